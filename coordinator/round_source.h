// Where an aggregator's rounds come from (docs/scale.md). A coordinator started with
// --parent does not open rounds on its own: it runs one each time its parent opens one for
// it, from the parent's model, and hands the model its round commits back, which the
// aggregator's upstream client (tier/tier.h) turns into one update for the parent.
#ifndef FEDLGC_COORDINATOR_ROUND_SOURCE_H_
#define FEDLGC_COORDINATOR_ROUND_SOURCE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/round_engine.h"

namespace fedlgc::coordinator {

// A round the parent opened for this coordinator.
struct RoundOrder {
  uint64_t round = 0;          // the parent's round: the local round takes its number
  std::vector<float> model;    // the parent's model, to start from
  Clock::time_point deadline;  // of the local round
  LocalTraining training;      // how the parent asks its clients to train
  uint32_t total_rounds = 0;   // of the parent's job
};

// Thread-safe: the coordinator's round loop calls Next, Keep and Finish; Stop comes from
// any thread.
class RoundSource {
 public:
  virtual ~RoundSource() = default;
  // Blocks until the parent opens a round for this coordinator (an order), the job is over
  // or Stop() was called (nullopt), or the upstream client failed for good (an error, which
  // ends this coordinator's job).
  virtual absl::StatusOr<std::optional<RoundOrder>> Next() = 0;
  // The order's round committed `model` (with at least one client's update): called before
  // the round's checkpoint is written, so that a restart that finds the checkpoint finds
  // the model too and sends it up instead of running the round again.
  virtual absl::Status Keep(uint64_t round, std::span<const float> model) = 0;
  // The order's round is over: the model it committed, or why nothing goes up.
  virtual void Finish(absl::StatusOr<std::vector<float>> model) = 0;
  virtual void Stop() = 0;
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_ROUND_SOURCE_H_
