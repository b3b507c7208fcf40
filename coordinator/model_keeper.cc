// Kept models and the export (see model_keeper.h).
#include "coordinator/model_keeper.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "base/file.h"
#include "base/log.h"
#include "base/str.h"
#include "core/float_bytes.h"
#include "core/sha256.h"
#include "core/state_file.h"
#include "core/state_message.h"
#include "nlohmann/json.hpp"
#include "protos/state.pb.h"

namespace fedlgc::coordinator {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kMagic = 0x4D4B4C46;  // "FLKM"
constexpr uint32_t kVersion = 1;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// The round's evaluation: the server's when it has one, else the clients' (--eval
// clients); the metric is the accuracy, or the loss where there are no classes.
void SetEvaluation(const RoundReport& rep, KeptModel* kept) {
  double accuracy = rep.accuracy, loss = rep.loss;
  kept->evaluated_on = "server";
  if (!(std::isfinite(loss) && loss >= 0) && rep.federated_eval.has_value() &&
      rep.federated_eval->clients > 0) {
    accuracy = rep.federated_eval->accuracy;
    loss = rep.federated_eval->loss;
    kept->evaluated_on = "clients";
  }
  if (std::isfinite(accuracy) && accuracy >= 0) {
    kept->metric = "accuracy";
  } else if (std::isfinite(loss) && (loss >= 0 || kept->evaluated_on == "clients")) {
    kept->metric = "loss";
  } else {
    kept->evaluated_on.clear();
    return;
  }
  kept->accuracy = accuracy;
  kept->loss = loss;
}

}  // namespace

std::optional<double> KeptModel::Score() const {
  if (metric == "accuracy" && std::isfinite(accuracy)) return accuracy;
  if (metric == "loss" && std::isfinite(loss)) return -loss;
  return std::nullopt;
}

std::string KeptModel::MetadataJson(const std::string& kept_as) const {
  auto num = [](double v) {
    return std::isfinite(v) && v >= 0 ? nlohmann::json(v) : nlohmann::json();
  };
  nlohmann::json j{
      {"format", "fedlgc-export/1"},
      {"job", job_id},
      {"model", model},
      {"model_sha256", model_sha256},
      {"round", round},
      {"model_version", model_version},
      {"kept_as", kept_as},
      {"buffers", buffers},
      {"freeze", freeze},
      {"local_params", local_params},
      {"metric", metric.empty() ? nlohmann::json() : nlohmann::json(metric)},
      {"evaluated_on", evaluated_on.empty() ? nlohmann::json() : nlohmann::json(evaluated_on)},
      {"accuracy", num(accuracy)},
      {"loss", num(loss)}};
  if (buffers == "local" || !local_params.empty()) {
    j["note"] = StrCat(
        "the federation's parameters with the module's initial ",
        local_params.empty() ? "" : "personal parameters (--local-params)",
        !local_params.empty() && buffers == "local" ? " and " : "",
        buffers == "local" ? "buffers (BatchNorm statistics, --buffers local)" : "",
        ": each client keeps its own (fedlgc-edge --export writes a client's model with them)");
  }
  return j.dump(1);
}

std::string KeptModelsDir(const std::string& state_dir) { return state_dir + "/models"; }

std::string KeptRoundPath(const std::string& state_dir, uint64_t round) {
  return StrCat(KeptModelsDir(state_dir), "/round-", round, ".bin");
}

std::string KeptBestPath(const std::string& state_dir) {
  return KeptModelsDir(state_dir) + "/best.bin";
}

std::string KeptModuleFilePath(const std::string& state_dir, const std::string& sha256) {
  return StrCat(KeptModelsDir(state_dir), "/", sha256, ".pt");
}

absl::Status WriteKeptModel(const std::string& path, const KeptModel& k) {
  state::KeptModel m;
  m.set_round(k.round);
  m.set_model_version(k.model_version);
  m.set_job(k.job);
  m.set_job_id(k.job_id);
  m.set_model(k.model);
  m.set_model_sha256(k.model_sha256);
  m.set_buffers(k.buffers);
  m.set_freeze(k.freeze);
  m.set_local_params(k.local_params);
  m.set_init_seed(k.init_seed);
  m.set_weights(core::FloatsToBytes(k.weights));
  m.set_metric(k.metric);
  m.set_evaluated_on(k.evaluated_on);
  m.set_accuracy(k.accuracy);
  m.set_loss(k.loss);
  core::StateWriter w;
  w.U32(kMagic);
  w.U32(kVersion);
  if (absl::Status st = core::AppendMessage(m, &w, path); !st.ok()) return st;
  return fedlgc::AtomicWriteFile(path, w.Finish());
}

absl::StatusOr<std::optional<KeptModel>> ReadKeptModel(const std::string& path) {
  auto bytes = fedlgc::ReadFileIfExists(path);
  if (!bytes.ok()) return bytes.status();
  if (!bytes->has_value()) return std::optional<KeptModel>();
  auto reader = core::StateReader::Open(**bytes, path);
  if (!reader.ok()) return reader.status();
  uint32_t magic = 0, version = 0;
  if (!reader->U32(&magic) || !reader->U32(&version) || magic != kMagic) {
    return absl::DataLossError(StrCat(path, ": not a kept model"));
  }
  if (version != kVersion) {
    return absl::UnimplementedError(
        StrCat(path, ": kept model version ", version, " (this build reads ", kVersion, ")"));
  }
  state::KeptModel m;
  if (absl::Status st = core::ParseMessage(*reader, &m, path); !st.ok()) return st;
  auto weights = core::FloatsFromBytes(m.weights(), path);
  if (!weights.ok()) return weights.status();
  KeptModel k;
  k.round = m.round();
  k.model_version = m.model_version();
  k.job = m.job();
  k.job_id = m.job_id();
  k.model = m.model();
  k.model_sha256 = m.model_sha256();
  k.buffers = m.buffers();
  k.freeze = m.freeze();
  k.local_params = m.local_params();
  k.init_seed = m.init_seed();
  k.weights = *std::move(weights);
  k.metric = m.metric();
  k.evaluated_on = m.evaluated_on();
  k.accuracy = m.accuracy();
  k.loss = m.loss();
  return std::optional<KeptModel>(std::move(k));
}

std::vector<uint64_t> KeptRounds(const std::string& state_dir) {
  std::vector<uint64_t> rounds;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(KeptModelsDir(state_dir), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("round-", 0) != 0 || e.path().extension() != ".bin") continue;
    const std::string digits = name.substr(6, name.size() - 10);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    uint64_t round = 0;
    if (absl::SimpleAtoi(digits, &round)) rounds.push_back(round);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds;
}

absl::StatusOr<core::ModelOptions> KeptModelOptions(const KeptModel& kept,
                                                    const std::string& state_dir,
                                                    const std::string& module_file) {
  core::ModelOptions mo;
  mo.buffers = kept.buffers.empty() ? "average" : kept.buffers;
  mo.freeze = kept.freeze;
  mo.local_params = kept.local_params;
  if (kept.model_sha256.empty()) {
    mo.model = kept.model;
    return mo;
  }
  mo.model = module_file.empty() ? KeptModuleFilePath(state_dir, kept.model_sha256) : module_file;
  auto bytes = fedlgc::ReadFile(mo.model);
  if (!bytes.ok()) {
    return absl::NotFoundError(StrCat("round ", kept.round, " was trained with ", kept.model,
                                      " (sha256:", kept.model_sha256, "), not found at ", mo.model,
                                      ": give its file with --model"));
  }
  if (const std::string sha = core::Sha256Hex(*bytes); sha != kept.model_sha256) {
    return absl::FailedPreconditionError(StrCat(mo.model, " has sha256:", sha, "; round ",
                                                kept.round,
                                                " was trained with sha256:", kept.model_sha256));
  }
  return mo;
}

absl::StatusOr<std::unique_ptr<ModelKeeper>> ModelKeeper::Create(KeeperOptions options) {
  std::unique_ptr<ModelKeeper> k(new ModelKeeper(std::move(options)));
  const KeeperOptions& o = k->options_;
  if (!o.export_path.empty()) {
    auto files = core::ExportFiles::For(o.export_path);
    if (!files.ok()) return files.status();
    k->files_ = *std::move(files);
    if (absl::Status st = core::PrepareExport(k->files_); !st.ok()) return st;
  }
  auto model = core::Model::Create(o.model, o.init_seed);
  if (!model.ok()) return model.status();
  k->model_ = *std::move(model);
  if (!o.model_sha256.empty()) {
    // The module's file beside its rounds: the state folder alone can be exported.
    const std::string copy = KeptModuleFilePath(o.state_dir, o.model_sha256);
    if (!fs::exists(copy)) {
      auto bytes = fedlgc::ReadFile(o.model.model);
      if (!bytes.ok()) return bytes.status();
      if (absl::Status st = fedlgc::AtomicWriteFile(copy, *bytes); !st.ok()) return st;
    }
  }
  auto best = ReadKeptModel(KeptBestPath(o.state_dir));
  if (!best.ok()) return best.status();
  if (best->has_value() && (*best)->job == o.job) {
    k->best_score_ = (*best)->Score();
    // A restarted job's export starts from the best round, not from the next one.
    if (o.export_best && !o.export_path.empty()) {
      if (absl::Status st = k->Export(**best, "best"); !st.ok()) return st;
    }
  }
  return k;
}

absl::Status ModelKeeper::Export(const KeptModel& kept, const char* kept_as) {
  if (absl::Status st = model_->SetFlat(kept.weights); !st.ok()) return st;
  if (absl::Status st = core::WriteExport(*model_, files_, kept.MetadataJson(kept_as)); !st.ok()) {
    return st;
  }
  exported_round_ = kept.round;
  return absl::OkStatus();
}

absl::Status ModelKeeper::Keep(std::span<const float> model, uint64_t model_version,
                               RoundReport* rep) {
  const auto t0 = std::chrono::steady_clock::now();
  const KeeperOptions& o = options_;
  KeptModel kept;
  kept.round = rep->round;
  kept.model_version = model_version;
  kept.job = o.job;
  kept.job_id = o.job_id;
  kept.model = o.model.IsFile() ? fs::path(o.model.model).filename().string() : o.model.model;
  kept.model_sha256 = o.model_sha256;
  kept.buffers = o.model.buffers;
  kept.freeze = o.model.freeze;
  kept.local_params = o.model.local_params;
  kept.init_seed = o.init_seed;
  kept.weights.assign(model.begin(), model.end());
  SetEvaluation(*rep, &kept);
  if (o.keep > 0) {
    if (absl::Status st = WriteKeptModel(KeptRoundPath(o.state_dir, kept.round), kept); !st.ok()) {
      return st;
    }
    for (uint64_t r : KeptRounds(o.state_dir)) {
      if (r + o.keep <= kept.round) {
        std::error_code ec;
        fs::remove(KeptRoundPath(o.state_dir, r), ec);
      }
    }
  }
  const std::optional<double> score = kept.Score();
  const bool best = score.has_value() && (!best_score_.has_value() || *score > *best_score_);
  if (best) {
    if (absl::Status st = WriteKeptModel(KeptBestPath(o.state_dir), kept); !st.ok()) return st;
    best_score_ = score;
  }
  // Without --export-best the export follows every round; with it, the best one (and
  // the newest until a round is evaluated).
  if (!o.export_path.empty() && (!o.export_best || best || !best_score_.has_value())) {
    if (absl::Status st = Export(kept, o.export_best && best ? "best" : "last"); !st.ok()) {
      return st;
    }
  }
  if (exported_round_ > 0) rep->labels["export_round"] = std::to_string(exported_round_);
  rep->figures["export_seconds"] = Seconds(t0);
  return absl::OkStatus();
}

absl::Status ExportKept(const KeptModel& kept, const std::string& state_dir,
                        const std::string& module_file, const core::ExportFiles& files,
                        const char* kept_as) {
  auto mo = KeptModelOptions(kept, state_dir, module_file);
  if (!mo.ok()) return mo.status();
  auto model = core::Model::Create(*mo, kept.init_seed);
  if (!model.ok()) return model.status();
  if (absl::Status st = (*model)->SetFlat(kept.weights); !st.ok()) {
    return absl::FailedPreconditionError(
        StrCat("round ", kept.round, ": ", st.message(), " (another model than the round's?)"));
  }
  return core::WriteExport(**model, files, kept.MetadataJson(kept_as));
}

}  // namespace fedlgc::coordinator
