// The smooth mode at the coordinator (see smooth_driver.h).
#include "modes/smooth/smooth_driver.h"

#include <utility>

#include "codecs/layout.h"
#include "coordinator/collectors.h"
#include "coordinator/robust.h"
#include "modes/fedavg/fedavg_driver.h"
#include "modes/mode_rules.h"
#include "monitoring/metrics.h"
#include "prometheus/gauge.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {
namespace {

// Any stateless codec without one of FedAvg's round protocols: the client's average is its
// only memory of what it sent.
absl::Status CheckSmoothCodecs(const coordinator::RoundPlan& plan,
                               const codecs::ModelLayout& layout) {
  return CheckOwnProtocolCodecs(plan, layout, Mode::kSmooth);
}

}  // namespace

const coordinator::ModeTraits& SmoothDriver::Traits() {
  static const coordinator::ModeTraits traits{
      .mode = Mode::kSmooth,
      .robust_aggregators = true,  // a round aggregates a set of whole updates
      .check_codecs = &CheckSmoothCodecs,
      .report_key = "smooth_update_norm",
      .report_heading = "|update|",
  };
  return traits;
}

absl::StatusOr<std::unique_ptr<SmoothDriver>> SmoothDriver::Create(
    const coordinator::DriverEnv& env) {
  std::unique_ptr<SmoothDriver> d(new SmoothDriver(env.robust));
  if (env.metrics != nullptr) {
    d->norm_gauge_ =
        &env.metrics
             ->GaugeFamily("fedlgc_smooth_update_norm",
                           "smooth mode: the sample-weighted mean L2 norm of the smoothed "
                           "updates the last round committed")
             .Add({});
  }
  return d;
}

void SmoothDriver::DecorateRoundStart(const std::string&, protos::RoundStart* start) {
  start->mutable_fedavg();
}

absl::Status SmoothDriver::RunRound(coordinator::RoundHost& host,
                                    const std::vector<std::string>& participants,
                                    coordinator::Clock::time_point deadline,
                                    coordinator::CommitResult* commit, RoundReport* report) {
  coordinator::RoundEngine& engine = host.engine();
  auto updates = std::make_shared<coordinator::PerClientCollector>();
  if (absl::Status st = host.StartRound(participants, deadline, updates); !st.ok()) return st;
  host.WaitUntil(deadline, [&] { return engine.AllComplete(); });
  if (host.stopped()) return absl::OkStatus();
  report->hit_deadline = !engine.AllComplete();
  engine.Freeze();
  // Whole updates only: a client's average moves on only when all of what it sent counts.
  const std::map<std::string, coordinator::PerClientCollector::Update> held =
      updates->TakeUpdates();
  std::vector<coordinator::Contribution> all;
  for (const auto& [client, u] : held) {
    if (!u.complete) continue;
    coordinator::Contribution c;
    c.client = client;
    c.weight = u.weight;
    c.values = u.values;
    c.ranges = u.ranges;
    c.complete = true;
    all.push_back(std::move(c));
  }
  std::set<std::string> counted;
  if (absl::Status st = AggregateAndCommit(host, all, coordinator::ServerOptimizer{}, robust_,
                                           commit, report, &counted);
      !st.ok()) {
    return st;
  }
  // The norms the clipping measured, of the updates the committed aggregate weighed.
  const std::map<std::string, double>& norms = report->per_client["update_norm"];
  double weighted_norm = 0, weight = 0;
  for (const coordinator::Contribution& c : all) {
    const auto it = norms.find(c.client);
    if (!counted.count(c.client) || it == norms.end()) continue;
    weighted_norm += c.weight * it->second;
    weight += c.weight;
  }
  const double norm = weight > 0 ? weighted_norm / weight : 0;
  report->figures["smooth_clients"] = static_cast<double>(counted.size());
  report->figures["smooth_update_norm"] = norm;
  if (norm_gauge_ != nullptr) norm_gauge_->Set(norm);
  return absl::OkStatus();
}

}  // namespace fedlgc::modes
