// The models a job keeps and hands over (docs/your-model.md, "The trained model"):
//   <state_dir>/models/round-<r>.bin  the committed model of each of the last --keep-models
//                                     rounds (a KeptModel, magic 'FLKM', version 1)
//   <state_dir>/models/best.bin       the best evaluated round's, by the job's metric
//                                     (accuracy, or the loss where there are no classes)
//   <state_dir>/models/<sha256>.pt    a TorchScript job's module file
// so that a state folder holds all fedlgc-export needs to write any kept round as files,
// after the job or after a crash; and with --export PATH the export files (core/export.h)
// of the newest committed round, or with --export-best of the best one so far, rewritten
// after each committed round.
#ifndef FEDLGC_COORDINATOR_MODEL_KEEPER_H_
#define FEDLGC_COORDINATOR_MODEL_KEEPER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/export.h"
#include "core/model.h"
#include "core/round_report.h"

namespace fedlgc::coordinator {

// A kept round (protos/state.proto KeptModel).
struct KeptModel {
  uint64_t round = 0;
  uint64_t model_version = 0;
  std::string job, job_id;
  std::string model;         // "cnn", "mlp", or the TorchScript file's name
  std::string model_sha256;  // empty: a built-in
  std::string buffers = "average";
  std::string freeze, local_params;  // the job's parameter rules (core::ModelOptions)
  uint64_t init_seed = 0;            // a built-in's initial weights (its frozen parameters)
  std::vector<float> weights;
  std::string metric;  // "accuracy", "loss", or "" (not evaluated)
  std::string evaluated_on;
  double accuracy = -1, loss = -1;

  // The value the best round is chosen by, larger is better (the loss negated); nullopt
  // when the round was not evaluated.
  std::optional<double> Score() const;
  // The export's model.json: what the files hold.
  std::string MetadataJson(const std::string& kept_as) const;
  bool operator==(const KeptModel&) const = default;
};

std::string KeptModelsDir(const std::string& state_dir);
// models/round-<r>.bin, models/best.bin, models/<sha256>.pt
std::string KeptRoundPath(const std::string& state_dir, uint64_t round);
std::string KeptBestPath(const std::string& state_dir);
std::string KeptModuleFilePath(const std::string& state_dir, const std::string& sha256);

absl::Status WriteKeptModel(const std::string& path, const KeptModel& kept);
// nullopt when the file does not exist; DATA_LOSS naming it when it is damaged.
absl::StatusOr<std::optional<KeptModel>> ReadKeptModel(const std::string& path);
// The rounds of models/round-<r>.bin in `state_dir`, ascending.
std::vector<uint64_t> KeptRounds(const std::string& state_dir);

// The model options a kept round was trained with: its module file from the state folder
// (or `module_file` when given, whose SHA-256 must be the round's).
absl::StatusOr<core::ModelOptions> KeptModelOptions(const KeptModel& kept,
                                                    const std::string& state_dir,
                                                    const std::string& module_file = "");

struct KeeperOptions {
  std::string state_dir;
  std::string export_path;   // empty: no export
  bool export_best = false;  // the export holds the best round, not the newest
  uint32_t keep = 3;         // the last rounds' models kept (0: none but the best)
  core::ModelOptions model;
  uint64_t init_seed = 1;
  std::string model_sha256;  // of a TorchScript job's file
  std::string job, job_id;
};

// Not thread-safe: the coordinator's recorder calls Keep, one round after another.
class ModelKeeper {
 public:
  // Makes its model, copies a TorchScript job's file into the state folder, checks that
  // the export can be written, and reads the best round so far (a restarted job's).
  static absl::StatusOr<std::unique_ptr<ModelKeeper>> Create(KeeperOptions options);

  // A committed round's model, with its report (evaluated when its accuracy or loss is
  // set). Keeps it, replaces the best, and rewrites the export as asked; adds
  // "export_seconds" and the label "export_round" to the report.
  absl::Status Keep(std::span<const float> model, uint64_t model_version, RoundReport* rep);

  // The round the export holds (0: none yet).
  uint64_t exported_round() const { return exported_round_; }
  const core::ExportFiles* export_files() const {
    return options_.export_path.empty() ? nullptr : &files_;
  }

 private:
  explicit ModelKeeper(KeeperOptions options) : options_(std::move(options)) {}
  absl::Status Export(const KeptModel& kept, const char* kept_as);

  KeeperOptions options_;
  core::ExportFiles files_;
  std::unique_ptr<core::Model> model_;
  std::optional<double> best_score_;
  uint64_t exported_round_ = 0;
};

// Writes a kept round as export files (fedlgc-export): its model from the state folder
// (or `module_file`), with its weights.
absl::Status ExportKept(const KeptModel& kept, const std::string& state_dir,
                        const std::string& module_file, const core::ExportFiles& files,
                        const char* kept_as);

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_MODEL_KEEPER_H_
