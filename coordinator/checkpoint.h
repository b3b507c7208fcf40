// Coordinator checkpoints: the EngineState after every committed round, written
// atomically to <state_dir>/checkpoint.bin. A checkpoint remembers the job it belongs to
// (model, dimension, codec); resuming with a different job is refused.
#ifndef FEDLGC_COORDINATOR_CHECKPOINT_H_
#define FEDLGC_COORDINATOR_CHECKPOINT_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/round_engine.h"

namespace fedlgc::coordinator {

std::string CheckpointPath(const std::string& state_dir);

absl::Status WriteCheckpoint(const std::string& state_dir, const std::string& job,
                             const EngineState& state);
// nullopt when there is no checkpoint yet.
absl::StatusOr<std::optional<EngineState>> ReadCheckpoint(const std::string& state_dir,
                                                          const std::string& job);

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_CHECKPOINT_H_
