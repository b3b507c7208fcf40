// The smooth mode, kept in the tree as the worked example of docs/adding-a-mode.md: FedAvg
// rounds whose clients send a smoothed update. Each client keeps an exponential moving
// average of its own updates (client state of its own, in its slot of the client state
// file) and sends it, bias-corrected as Adam's first moment is:
//
//   a_t = beta a_(t-1) + (1 - beta) u_t,   sent: a_t / (1 - beta^t),   beta = 1/2
//
// so its first round sends its update exactly, and later ones damp the round-to-round
// noise of a small local shard. The coordinator commits the sample-weighted mean of the
// complete updates through the job's clipping, aggregator and model guard (as FedAvg does,
// with a plain server step: the average is the momentum) and sets a gauge of its own,
// fedlgc_smooth_update_norm. Stateless codecs only: the average is the client's memory,
// and a codec's residual would be a second one.
#ifndef FEDLGC_MODES_SMOOTH_SMOOTH_DRIVER_H_
#define FEDLGC_MODES_SMOOTH_SMOOTH_DRIVER_H_

#include <memory>
#include <string>
#include <vector>

#include "coordinator/round_driver.h"

namespace prometheus {
class Gauge;
}

namespace fedlgc::modes {

// The weight of the past in a client's average.
inline constexpr double kSmoothBeta = 0.5;

class SmoothDriver final : public coordinator::RoundDriver {
 public:
  static const coordinator::ModeTraits& Traits();
  static absl::StatusOr<std::unique_ptr<SmoothDriver>> Create(const coordinator::DriverEnv& env);

  Mode mode() const override { return Mode::kSmooth; }
  absl::Status RunRound(coordinator::RoundHost& host, const std::vector<std::string>& participants,
                        coordinator::Clock::time_point deadline, coordinator::CommitResult* commit,
                        RoundReport* report) override;
  // The client trains FedAvg's local period: the mode's part of RoundStart is FedAvg's.
  void DecorateRoundStart(const std::string& client, protos::RoundStart* start) override;
  absl::Status Save(uint64_t) override { return absl::OkStatus(); }  // nothing of its own

 private:
  explicit SmoothDriver(const coordinator::AggregatorOptions& robust) : robust_(robust) {}

  const coordinator::AggregatorOptions robust_;
  prometheus::Gauge* norm_gauge_ = nullptr;  // null without metrics
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_SMOOTH_SMOOTH_DRIVER_H_
