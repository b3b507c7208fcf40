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
#include <string>

#include "absl/strings/numbers.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/str.h"
#include "coordinator/model_keeper.h"

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

}  // namespace

int main(int argc, char** argv) {
  std::string state_dir = "state/coordinator", which = "last", out, model;
  bool list = false;
  CLI::App app(
      "Writes a round a coordinator kept (its --state-dir) as model.pt (TorchScript, for plain "
      "PyTorch), model.npz (the tensors by name) and model.json.",
      "fedlgc-export");
  fedlgc::AddCommonFlags(app);
  app.add_option("--state-dir", state_dir, "the coordinator's state folder");
  app.add_option("--round", which, "last, best (by the job's metric) or a round number");
  app.add_option("-o,--out", out, "the TorchScript file to write (.npz and .json beside it)");
  app.add_option("--model", model,
                 "the job's TorchScript file, when the state folder lacks its copy");
  app.add_flag("--list", list, "list the kept rounds and the best one");
  if (auto code = fedlgc::ParseFlags(app, argc, argv)) return *code;
  fedlgc::InitProcess();
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
