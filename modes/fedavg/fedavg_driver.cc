// FedAvg at the coordinator (see fedavg_driver.h).
#include "modes/fedavg/fedavg_driver.h"

#include <cstdio>

#include "coordinator/collectors.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {

absl::Status FedAvgOptions::Validate() const {
  if (!(server_lr > 0) || server_momentum < 0 || server_momentum >= 1) {
    return absl::InvalidArgumentError("--server-lr must be > 0 and --server-momentum in [0, 1)");
  }
  return absl::OkStatus();
}

namespace {

using coordinator::AggregatorOptions;
using coordinator::Clock;
using coordinator::Contribution;
using coordinator::RoundHost;

absl::Status Commit(coordinator::RoundEngine& engine, uint64_t round,
                    const coordinator::GuardedChoice& choice, std::span<const float> delta,
                    const coordinator::ServerOptimizer& optimizer,
                    const std::set<std::string>* counted, coordinator::CommitResult* commit) {
  absl::StatusOr<coordinator::CommitResult> committed;
  if (choice.model.empty()) {
    std::fprintf(stderr,
                 "coordinator: round %llu: the model guard refused every candidate (%s): the "
                 "round counts nothing\n",
                 static_cast<unsigned long long>(round), choice.first.detail.c_str());
    committed = engine.CommitModel(engine.ModelVector(), {});
  } else {
    committed = engine.CommitDelta(delta, optimizer, counted);
  }
  if (!committed.ok()) return committed.status();
  *commit = *std::move(committed);
  return absl::OkStatus();
}

// Opens the round with `collector` and waits for every update or the deadline. False
// when the coordinator stops.
absl::StatusOr<bool> Collect(RoundHost& host, const std::vector<std::string>& participants,
                             Clock::time_point deadline,
                             std::shared_ptr<coordinator::Collector> collector,
                             RoundReport* report) {
  coordinator::RoundEngine& engine = host.engine();
  if (absl::Status st = host.StartRound(participants, deadline, std::move(collector)); !st.ok())
    return st;
  host.WaitUntil(deadline, [&] { return engine.AllComplete(); });
  if (host.stopped()) return false;
  report->hit_deadline = !engine.AllComplete();
  engine.Freeze();  // the aggregate and the receipts cover the same chunks
  return true;
}

absl::Status RunBufferedRound(RoundHost& host, const std::vector<std::string>& participants,
                              Clock::time_point deadline,
                              const coordinator::ServerOptimizer& optimizer,
                              const AggregatorOptions& robust, coordinator::CommitResult* commit,
                              RoundReport* report) {
  coordinator::RoundEngine& engine = host.engine();
  const uint64_t round = engine.current_round();
  // The mean takes updates one at a time: they wait as the frames that arrived.
  const bool compact = robust.kind == coordinator::AggregatorKind::kMean;
  auto collector =
      std::make_shared<coordinator::PerClientCollector>(/*push_sum=*/false, compact);
  auto open = Collect(host, participants, deadline, collector, report);
  if (!open.ok() || !*open) return open.status();
  const auto updates = collector->TakeUpdates();
  std::vector<Contribution> all;
  for (const auto& [client, u] : updates) {
    Contribution c{client, u.weight, u.values, u.ranges, u.complete};
    if (compact) {
      c.fill = [&collector, &u](std::span<float> dense) { return collector->Fill(u, dense); };
      c.norm = u.Norm();
    }
    all.push_back(std::move(c));
  }
  const coordinator::Clipping clipping = coordinator::ClipByMedian(all, robust.clip);
  report->figures["clip_bound"] = clipping.bound;
  report->figures["clipped"] = clipping.clipped;
  report->per_client["update_norm"] = clipping.norms;
  // The candidate of each exclusion tried; the last one made is the one chosen.
  std::vector<float> delta;
  std::set<std::string> used;
  const coordinator::CandidateFn candidate =
      [&](const std::set<std::string>& excluded) -> absl::StatusOr<std::vector<float>> {
    std::vector<Contribution> kept;
    for (const Contribution& c : all) {
      if (!excluded.count(c.client)) kept.push_back(c);
    }
    auto agg = coordinator::AggregateUpdates(robust, kept,
                                             coordinator::ClipByMedian(kept, robust.clip),
                                             engine.dim());
    if (!agg.ok()) return agg.status();
    if (!agg->fallback.empty()) {
      std::fprintf(stderr, "coordinator: round %llu: %s\n",
                   static_cast<unsigned long long>(round), agg->fallback.c_str());
      report->labels["aggregator_fallback"] = agg->fallback;
    }
    delta = std::move(agg->values);
    used = std::move(agg->considered);
    return engine.Preview(delta, optimizer);
  };
  // At most a minority can be left out.
  const size_t max_excluded = all.empty() ? 0 : (all.size() - 1) / 2;
  auto choice = coordinator::ChooseUnderGuard(host, coordinator::ByNormDescending(clipping.norms),
                                              max_excluded, candidate, report);
  if (!choice.ok()) return choice.status();
  coordinator::QuarantineExcluded(host, round, *choice);
  return Commit(engine, round, *choice, delta, optimizer, &used, commit);
}

absl::Status RunStreamingRound(RoundHost& host, const std::vector<std::string>& participants,
                               Clock::time_point deadline,
                               const coordinator::ServerOptimizer& optimizer,
                               const AggregatorOptions& robust, SummedRoundState* state,
                               coordinator::CommitResult* commit, RoundReport* report) {
  coordinator::RoundEngine& engine = host.engine();
  const uint64_t round = engine.current_round();
  auto sum = std::make_shared<coordinator::WeightedSumCollector>(engine.dim(), state->next_bound);
  auto open = Collect(host, participants, deadline, sum, report);
  if (!open.ok() || !*open) return open.status();
  const std::vector<float> mean = sum->Mean();
  const std::map<std::string, double> norms = sum->Norms();
  report->figures["clip_bound"] = state->next_bound;
  report->figures["clipped"] = sum->clipped();
  report->per_client["update_norm"] = norms;
  std::vector<double> values;
  for (const auto& [client, n] : norms) values.push_back(n);
  const double median = coordinator::LowerMedian(values);
  if (robust.clip > 0 && median > 0) state->next_bound = robust.clip * median;
  // A sum cannot leave one client out: the guard judges the round as it is.
  auto choice = coordinator::ChooseUnderGuard(
      host, {}, 0, [&](const std::set<std::string>&) { return engine.Preview(mean, optimizer); },
      report);
  if (!choice.ok()) return choice.status();
  if (choice->model.empty()) {
    // The round counts nothing; the updates far above the others' norms are quarantined.
    const double outlier = std::max(3.0, robust.clip) * median;
    for (const auto& [client, n] : norms) {
      if (n > outlier) choice->excluded.insert(client);
    }
    coordinator::QuarantineExcluded(host, round, *choice);
  }
  return Commit(engine, round, *choice, mean, optimizer, nullptr, commit);
}

}  // namespace

absl::Status RunSummedRound(coordinator::RoundHost& host,
                            const std::vector<std::string>& participants,
                            coordinator::Clock::time_point deadline,
                            const coordinator::ServerOptimizer& optimizer,
                            const AggregatorOptions& robust, SummedRoundState* state,
                            coordinator::CommitResult* commit, RoundReport* report) {
  if (robust.buffered()) {
    return RunBufferedRound(host, participants, deadline, optimizer, robust, commit, report);
  }
  return RunStreamingRound(host, participants, deadline, optimizer, robust, state, commit, report);
}

void FedAvgDriver::DecorateRoundStart(const std::string&, protos::RoundStart* start) {
  start->mutable_fedavg();
}

}  // namespace fedlgc::modes
