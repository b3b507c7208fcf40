// fedlgc-export: writes a kept round of a coordinator's state folder (a finished job's, a
// running one's or a crashed one's) as the export files (core/export.h), or lists the
// rounds it keeps.
//
//   fedlgc-export --state-dir state/coordinator -o model.pt              the newest round
//   fedlgc-export --state-dir state/coordinator --round best -o best.pt  the best one
//   fedlgc-export --state-dir state/coordinator --round 7 -o r7.pt
//   fedlgc-export --state-dir state/coordinator --list
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/numbers.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/str.h"
#include "coordinator/model_keeper.h"
#include "core/export.h"
#include "core/model.h"
#include "core/preflight.h"

namespace {

namespace coord = fedlgc::coordinator;
using fedlgc::StrAppend;
using fedlgc::StrCat;

int Fail(const absl::Status& st) {
  fedlgc::log::Error("fedlgc-export", "%s", std::string(st.message()).c_str());
  return 1;
}

std::string Describe(const coord::KeptModel& k) {
  std::string s = StrCat("round ", k.round, " (", k.model, ", ", k.weights.size(), " values");
  if (k.metric == "accuracy") StrAppend(&s, ", accuracy ", k.accuracy);
  if (k.metric == "loss") StrAppend(&s, ", loss ", k.loss);
  return s + ")";
}

// The round `which` names: "last", "best" or a number.
absl::StatusOr<coord::KeptModel> Find(const std::string& state_dir, const std::string& which) {
  const std::vector<uint64_t> rounds = coord::KeptRounds(state_dir);
  std::string path;
  if (which == "best") {
    path = coord::KeptBestPath(state_dir);
  } else if (which == "last") {
    if (rounds.empty()) {
      return absl::NotFoundError(StrCat(state_dir, " keeps no round's model (",
                                        coord::KeptModelsDir(state_dir), " is empty or missing)"));
    }
    path = coord::KeptRoundPath(state_dir, rounds.back());
  } else {
    uint64_t round = 0;
    if (!absl::SimpleAtoi(which, &round)) {
      return absl::InvalidArgumentError(
          StrCat("--round '", which, "': last, best or a round number"));
    }
    path = coord::KeptRoundPath(state_dir, round);
  }
  auto kept = coord::ReadKeptModel(path);
  if (!kept.ok()) return kept.status();
  if (!kept->has_value()) {
    std::string have;
    for (uint64_t r : rounds) StrAppend(&have, have.empty() ? "" : ", ", r);
    return absl::NotFoundError(StrCat(state_dir, " keeps no model of round ", which,
                                      " (kept: ", have.empty() ? "none" : have,
                                      "; --keep-models sets how many the coordinator keeps)"));
  }
  return **std::move(kept);
}

// --check: the state folder and the round, whether the job's model takes its weights,
// and the files to write.
int Check(const std::string& state_dir, const std::string& which, const std::string& out,
          const std::string& module_file) {
  fedlgc::core::Preflight p("fedlgc-export");
  const std::vector<uint64_t> rounds = coord::KeptRounds(state_dir);
  std::string kept_text = StrCat(state_dir, ": ", rounds.size(), " rounds kept");
  if (!rounds.empty()) StrAppend(&kept_text, " (", rounds.front(), " to ", rounds.back(), ")");
  std::error_code ec;
  p.Report("state folder",
           std::filesystem::is_directory(state_dir, ec)
               ? absl::StatusOr<std::string>(kept_text)
               : absl::NotFoundError(StrCat(state_dir, ": no such folder (--state-dir)")));
  auto kept = Find(state_dir, which);
  p.Report("round", kept.status(), kept.ok() ? Describe(*kept) : "");
  if (!kept.ok()) {
    p.Skip("model", "needs the round");
  } else {
    auto mo = coord::KeptModelOptions(*kept, state_dir, module_file);
    absl::Status fits = mo.status();
    if (mo.ok()) {
      auto model = fedlgc::core::Model::Create(*mo, kept->init_seed);
      fits = model.ok() ? (*model)->SetFlat(kept->weights) : model.status();
    }
    p.Report("model", fits, mo.ok() ? StrCat(mo->model, ": takes the round's weights") : "");
  }
  if (out.empty()) {
    p.Report("out", absl::InvalidArgumentError("give -o PATH (e.g. -o model.pt)"));
  } else if (auto files = fedlgc::core::ExportFiles::For(out); !files.ok()) {
    p.Report("out", files.status());
  } else {
    p.Report("out", fedlgc::core::CheckWritableFile(files->pt));
  }
  return p.Finish();
}

}  // namespace

int main(int argc, char** argv) {
  std::string state_dir = "state/coordinator", which = "last", out, model;
  bool list = false, check = false;
  CLI::App app(
      "Writes a round a coordinator kept (its --state-dir) as model.pt (TorchScript, for plain "
      "PyTorch), model.npz (the tensors by name) and model.json.",
      "fedlgc-export");
  fedlgc::AddCommonFlags(app);
  fedlgc::AddCheckFlag(app, &check);
  app.add_option("--state-dir", state_dir, "the coordinator's state folder");
  app.add_option("--round", which, "last, best (by the job's metric) or a round number");
  app.add_option("-o,--out", out, "the TorchScript file to write (.npz and .json beside it)");
  app.add_option("--model", model,
                 "the job's TorchScript file, when the state folder lacks its copy");
  app.add_flag("--list", list, "list the kept rounds and the best one");
  if (auto code = fedlgc::ParseFlags(app, argc, argv)) return *code;
  fedlgc::InitProcess();
  if (check) return Check(state_dir, which, out, model);
  if (list) {
    for (uint64_t r : coord::KeptRounds(state_dir)) {
      auto k = coord::ReadKeptModel(coord::KeptRoundPath(state_dir, r));
      if (!k.ok()) return Fail(k.status());
      if (k->has_value()) std::printf("%s\n", Describe(**k).c_str());
    }
    auto best = coord::ReadKeptModel(coord::KeptBestPath(state_dir));
    if (!best.ok()) return Fail(best.status());
    if (best->has_value()) std::printf("best: %s\n", Describe(**best).c_str());
    return 0;
  }
  if (out.empty()) return Fail(absl::InvalidArgumentError("give -o PATH (e.g. -o model.pt)"));
  auto files = fedlgc::core::ExportFiles::For(out);
  if (!files.ok()) return Fail(files.status());
  if (auto st = fedlgc::core::PrepareExport(*files); !st.ok()) return Fail(st);
  auto kept = Find(state_dir, which);
  if (!kept.ok()) return Fail(kept.status());
  if (auto st =
          coord::ExportKept(*kept, state_dir, model, *files, which == "best" ? "best" : "round");
      !st.ok()) {
    return Fail(st);
  }
  std::printf("%s -> %s (%s, %s)\n", Describe(*kept).c_str(), files->pt.c_str(), files->npz.c_str(),
              files->json.c_str());
  return 0;
}
