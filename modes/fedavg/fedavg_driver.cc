// FedAvg at the coordinator (see fedavg_driver.h).
#include "modes/fedavg/fedavg_driver.h"

#include "coordinator/collectors.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {

absl::Status FedAvgOptions::Validate() const {
  if (!(server_lr > 0) || server_momentum < 0 || server_momentum >= 1) {
    return absl::InvalidArgumentError("--server-lr must be > 0 and --server-momentum in [0, 1)");
  }
  return absl::OkStatus();
}

absl::Status RunSummedRound(coordinator::RoundHost& host,
                            const std::vector<std::string>& participants,
                            coordinator::Clock::time_point deadline,
                            const coordinator::ServerOptimizer& optimizer,
                            coordinator::CommitResult* commit, RoundReport* report) {
  coordinator::RoundEngine& engine = host.engine();
  auto sum = std::make_shared<coordinator::WeightedSumCollector>(engine.dim());
  if (absl::Status st = host.StartRound(participants, deadline, sum); !st.ok()) return st;
  host.WaitUntil(deadline, [&] { return engine.AllComplete(); });
  if (host.stopped()) return absl::OkStatus();
  report->hit_deadline = !engine.AllComplete();
  engine.Freeze();  // the mean and the receipts cover the same chunks
  auto committed = engine.CommitDelta(sum->Mean(), optimizer);
  if (!committed.ok()) return committed.status();
  *commit = *std::move(committed);
  return absl::OkStatus();
}

void FedAvgDriver::DecorateRoundStart(const std::string&, protos::RoundStart* start) {
  start->mutable_fedavg();
}

}  // namespace fedlgc::modes
