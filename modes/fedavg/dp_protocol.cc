// --dp as a round protocol (dp_rounds.h). With central noise (gaussian) it runs each
// round itself: a Poisson sample, every update that arrives cut to norm C and counted
// once in a noised mean the guard may refuse whole but from which it leaves no one out
// (leaving out the largest updates would depend on them). With distributed noise
// (skellam) secure aggregation runs the round: DP draws the sample, sets the noise the
// clients add, and charges the round once its noised sum is unmasked.
#include "base/str.h"
#include "coordinator/collectors.h"
#include "modes/fedavg/fedavg_driver.h"
#include "modes/fedavg/fedavg_state.h"
#include "modes/fedavg/guarded_commit.h"
#include "modes/fedavg/round_protocol.h"

namespace fedlgc::modes {
namespace {

using coordinator::Contribution;

absl::Status RunDpRound(RoundContext& r, DpRounds& dp) {
  coordinator::RoundEngine& engine = r.host.engine();
  auto sample = dp.Sample(r.host);
  if (!sample.ok()) return sample.status();
  for (const std::string& c : *sample) r.report->per_client["dp_asked"][c] = 1;
  auto collector = std::make_shared<coordinator::PerClientCollector>(/*compact=*/true);
  auto open = CollectRound(r.host, *sample, r.deadline, collector, r.report, nullptr);
  if (!open.ok() || !*open) return open.status();
  const auto updates = collector->TakeUpdates();
  std::vector<Contribution> all;
  std::set<std::string> counted;
  for (const auto& [client, u] : updates) {
    Contribution c{client, 1.0, u.values, u.ranges, u.complete};
    c.fill = [&collector, &u](std::span<float> dense) { return collector->Fill(u, dense); };
    c.norm = u.Norm();
    all.push_back(std::move(c));
    counted.insert(client);
  }
  auto mean = dp.NoisedMean(all, engine.dim(), r.report);
  if (!mean.ok()) return mean.status();
  // From here on the noised mean exists, and what follows depends on it (the guard's
  // verdict, its log line): the round has spent its privacy, whatever becomes of it.
  dp.Spend(sample->size(), r.report);
  auto choice = coordinator::ChooseUnderGuard(
      r.host, {}, 0,
      [&](const std::set<std::string>&) { return engine.Preview(*mean, r.optimizer); },
      r.report);
  if (!choice.ok()) return choice.status();
  return CommitGuarded(engine, r.round, *choice, *mean, r.optimizer, &counted, r.commit);
}

class Dp final : public RoundProtocol {
 public:
  Dp(std::unique_ptr<DpRounds> dp, bool distributed)
      : dp_(std::move(dp)), distributed_(distributed) {}
  ProtocolId id() const override { return ProtocolId::kDp; }
  bool AllowsClientStatistics() const override { return false; }

  absl::Status BeginRound(RoundContext& round) override {
    if (!distributed_) return absl::OkStatus();
    // A Poisson sample, each asked for its share of the sum's noise.
    auto sample = dp_->Sample(round.host);
    if (!sample.ok()) return sample.status();
    for (const std::string& c : *sample) round.report->per_client["dp_asked"][c] = 1;
    round.participants = *std::move(sample);
    RoundReport* report = round.report;
    round.noise = SumNoise{dp_->SumVariance(), [this, report](size_t inputs, size_t asked) {
                             dp_->SpendSkellam(
                                 asked, asked == 0 ? 0 : static_cast<double>(inputs) / asked,
                                 report);
                           }};
    return absl::OkStatus();
  }
  bool RunsRound(const RoundContext& /*round*/) const override { return !distributed_; }
  absl::Status RunRound(RoundContext& round) override { return RunDpRound(round, *dp_); }

  absl::Status Save(uint64_t round) override { return dp_->Save(round); }
  std::optional<std::string> Exhausted() const override { return dp_->Exhausted(); }

 private:
  const std::unique_ptr<DpRounds> dp_;
  const bool distributed_;  // skellam: secure aggregation runs the rounds
};

bool Gaussian(const ProtocolJob& job) {
  return job.dp && job.dp->mechanism == DpMechanism::kGaussian;
}
bool Skellam(const ProtocolJob& job) {
  return job.dp && job.dp->mechanism == DpMechanism::kSkellam;
}
constexpr std::string_view kProtocolRound =
    "DP-FedAvg's rounds are rounds of whole updates averaged with weight one";

// DP clips every update to C and averages; a job whose checkpoint is a DP job's goes on
// only as one (it would go on without clipping, noise or accounting).
absl::Status CheckDpJob(const ProtocolJob& job) {
  const coordinator::DriverEnv& env = *job.env;
  if (!job.dp) {
    if (env.committed_round > 0 &&
        !absl::IsNotFound(LoadDpAccount(env.state_dir, env.committed_round).status())) {
      return absl::FailedPreconditionError(
          StrCat("the checkpoint of round ", env.committed_round, " is a DP job's (",
                 DpAccountPath(env.state_dir, env.committed_round),
                 "): restart it with the --dp flags it started with"));
    }
    return absl::OkStatus();
  }
  if (env.robust.kind != coordinator::AggregatorKind::kMean) {
    return absl::InvalidArgumentError(
        "--dp does not run with a robust or streaming --aggregator (DP clips every update to C "
        "and averages)");
  }
  if (Skellam(job) && job.secagg) {
    // Distributed DP's grid: secure aggregation's masked codes, cut at the DP clip (no
    // quantile: a clip that follows the data would need its own budget).
    if (!job.secagg->masks) {
      return absl::InvalidArgumentError(
          "--dp skellam(...) adds its noise at the clients, to masked codes: give --secagg "
          "secagg(clip=C) with masks");
    }
    if (job.secagg->quantile > 0 || job.secagg->clip != job.dp->clip) {
      return absl::InvalidArgumentError(
          StrCat("--dp skellam(clip=", job.dp->clip,
                 ") and --secagg must cut updates at the same fixed norm: give secagg(clip=",
                 job.dp->clip, ") without quantile="));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SkellamGrid> SkellamGridOf(const ProtocolJob& job) {
  if (!Skellam(job)) return SkellamGrid{};
  const absl::StatusOr<int>& levels = job.codec.sum_levels;
  if (!levels.ok()) return levels.status();
  auto kept = job.codec.SumKept(job.env->dim);
  if (!kept.ok()) return kept.status();
  return SkellamGrid{job.env->dim, *levels, job.secagg->kappa, *kept};
}

}  // namespace

const ProtocolEntry& DpProtocol() {
  static const ProtocolEntry kEntry{
      .id = ProtocolId::kDp,
      .name = "--dp",
      .wanted = [](const ProtocolJob& job) { return job.dp.has_value(); },
      .check = &CheckDpJob,
      .conflicts = {{ProtocolId::kBuffered, "their sampling is not the accountant's"},
                    {ProtocolId::kBasis, kProtocolRound},
                    {ProtocolId::kSharedScale, kProtocolRound},
                    {ProtocolId::kTwoPhase, kProtocolRound},
                    {ProtocolId::kSecAgg,
                     "--dp gaussian(...) adds the coordinator's noise to updates it sees, and "
                     "with secure aggregation it sees none: give --dp skellam(...), whose noise "
                     "the clients add",
                     &Gaussian}},
      .needs = {{ProtocolId::kSecAgg,
                 "--dp skellam(...) adds its noise at the clients, to masked codes: give "
                 "--secagg secagg(clip=C) as well",
                 &Skellam}},
      .make = [](const ProtocolJob& job) -> absl::StatusOr<std::unique_ptr<RoundProtocol>> {
        const coordinator::DriverEnv& env = *job.env;
        auto grid = SkellamGridOf(job);
        if (!grid.ok()) return grid.status();
        auto rounds = DpRounds::Create(*job.dp, env.fraction, env.rounds, env.state_dir,
                                       env.committed_round, env.metrics, *grid);
        if (!rounds.ok()) return rounds.status();
        return std::make_unique<Dp>(*std::move(rounds), Skellam(job));
      },
  };
  return kEntry;
}

}  // namespace fedlgc::modes
