// FedAvg at the coordinator (see fedavg_driver.h).
#include "modes/fedavg/fedavg_driver.h"

#include <algorithm>
#include <cstdio>

#include "base/log.h"
#include "base/str.h"
#include "codecs/gradiveq.h"
#include "codecs/powersgd_two_phase.h"
#include "codecs/registry.h"
#include "codecs/sparse_codec.h"
#include "coordinator/collectors.h"
#include "modes/fedavg/fedavg_state.h"
#include "modes/fedavg/guarded_commit.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {

absl::Status FedAvgOptions::Validate() const {
  if (!(server_lr > 0) || server_momentum < 0 || server_momentum >= 1) {
    return absl::InvalidArgumentError("--server-lr must be > 0 and --server-momentum in [0, 1)");
  }
  if (absl::Status st = ParseRoundsMode(rounds_mode).status(); !st.ok()) return st;
  if (absl::Status st = ParseSecAgg(secagg).status(); !st.ok()) return st;
  return ParseDp(dp, dp_epsilon, dp_delta, dp_max_epsilon).status();
}

namespace {

// FedAvg runs every codec, and the round protocols of its own: two-phase PowerSGD (the job
// codec itself, unwrapped, each message within --chunk-bytes) and GradiVeQ (the job codec
// itself: clients add what they keep of its error).
absl::Status CheckFedAvgCodecs(const coordinator::RoundPlan& plan,
                               const codecs::ModelLayout& layout) {
  if (codecs::NamesTwoPhasePowerSgd(plan.codec)) {
    if (!codecs::IsTwoPhasePowerSgd(plan.codec)) {
      return absl::InvalidArgumentError(
          "powersgd(..., phases=2) is a round protocol of --mode fedavg: give it as the job's "
          "--codec itself, unwrapped");
    }
    auto two = codecs::PowerSgdTwoPhase::Create(plan.codec, layout);
    if (!two.ok()) return two.status();
    const uint64_t bytes =
        std::max(two->FrameBytes(codecs::kPowerSgdMessageSpec, two->message_floats()),
                 two->FrameBytes(codecs::kPowerSgdProjectionSpec, two->projection_floats()));
    if (bytes > plan.max_chunk_bytes) {
      return absl::InvalidArgumentError(
          StrCat("powersgd(..., phases=2) sends P, then Q and the dense tensors, as one chunk "
                 "each, of up to ",
                 bytes, " bytes: raise --chunk-bytes to at least that"));
    }
  }
  auto c = codecs::MakeCodec(plan.codec, &layout);
  if (!c.ok()) return c.status();
  if (codecs::IsGradiveq(plan.codec) && plan.codec.rfind("gradiveq", 0) != 0) {
    return absl::InvalidArgumentError(
        "--codec: give gradiveq(...) itself; clients add what they keep of its error");
  }
  return absl::OkStatus();
}

// DP-FedAvg's rounds are synchronous rounds of whole updates averaged with weight one:
// nothing that weighs, drops or sums updates by what they hold, and no round protocol.
absl::Status CheckDp(bool buffered, const coordinator::DriverEnv& env) {
  const char* why = nullptr;
  if (buffered) {
    why = "buffered rounds (their sampling is not the accountant's)";
  } else if (env.robust.kind != coordinator::AggregatorKind::kMean) {
    why = "a robust or streaming --aggregator (DP clips every update to C and averages)";
  } else if (env.plan != nullptr && (codecs::IsGradiveq(env.plan->codec) ||
                                     codecs::NamesTwoPhasePowerSgd(env.plan->codec) ||
                                     codecs::IsSharedScaleTernGrad(env.plan->codec))) {
    why = "a round protocol (gradiveq, powersgd(..., phases=2), terngrad(shared=1))";
  }
  if (why == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("--dp does not run with ", why));
}

// Distributed DP's grid: --dp skellam(...) runs on secure aggregation's masked codes, cut
// at the DP clip (no quantile: a clip that follows the data would need its own budget).
absl::StatusOr<SkellamGrid> SkellamGridOf(const DpOptions& dp,
                                          const std::optional<SecAggOptions>& secagg,
                                          const coordinator::DriverEnv& env) {
  if (dp.mechanism != DpMechanism::kSkellam) return SkellamGrid{};
  if (!secagg || !secagg->masks) {
    return absl::InvalidArgumentError(
        "--dp skellam(...) adds its noise at the clients, to masked codes: give --secagg "
        "secagg(clip=C) (with masks) as well");
  }
  if (secagg->quantile > 0 || secagg->clip != dp.clip) {
    return absl::InvalidArgumentError(StrCat(
        "--dp skellam(clip=", dp.clip, ") and --secagg must cut updates at the same fixed norm: "
        "give secagg(clip=", dp.clip, ") without quantile="));
  }
  const std::string codec = env.plan != nullptr ? env.plan->codec : "";
  auto levels = codecs::SumCode::LevelsOf(codec);
  if (!levels.ok()) return levels.status();
  auto kept = codecs::SumCode::KeptOf(codec, env.dim);
  if (!kept.ok()) return kept.status();
  return SkellamGrid{env.dim, *levels, secagg->kappa, *kept};
}

using coordinator::AggregatorOptions;
using coordinator::Clock;
using coordinator::Contribution;
using coordinator::RoundHost;

// Opens the round with `collector` and waits for every update or the deadline. False
// when the coordinator stops.
absl::StatusOr<bool> Collect(RoundHost& host, const std::vector<std::string>& participants,
                             Clock::time_point deadline,
                             std::shared_ptr<coordinator::Collector> collector, RoundReport* report,
                             const std::function<void()>& tick) {
  coordinator::RoundEngine& engine = host.engine();
  if (absl::Status st = host.StartRound(participants, deadline, std::move(collector)); !st.ok())
    return st;
  host.WaitUntil(
      deadline, [&] { return engine.AllComplete(); }, tick);
  if (host.stopped()) return false;
  report->hit_deadline = !engine.AllComplete();
  engine.Freeze();  // the aggregate and the receipts cover the same chunks
  return true;
}

absl::Status RunBufferedRound(RoundHost& host, const std::vector<std::string>& participants,
                              Clock::time_point deadline,
                              const coordinator::ServerOptimizer& optimizer,
                              const AggregatorOptions& robust, coordinator::CommitResult* commit,
                              RoundReport* report, const std::function<void()>& tick) {
  // The mean takes updates one at a time: they wait as the frames that arrived.
  const bool compact = robust.kind == coordinator::AggregatorKind::kMean;
  auto collector = std::make_shared<coordinator::PerClientCollector>(/*push_sum=*/false, compact);
  auto open = Collect(host, participants, deadline, collector, report, tick);
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
  return AggregateAndCommit(host, all, optimizer, robust, commit, report, nullptr);
}

// A DP-FedAvg round (dp_rounds.h): a Poisson sample of the connected clients, whatever
// the coordinator sampled; every update that arrives counts once, cut to norm C, in a
// noised mean the guard may refuse whole but from which it leaves no one out (leaving out
// the largest updates would depend on them).
absl::Status RunDpRound(RoundHost& host, Clock::time_point deadline,
                        const coordinator::ServerOptimizer& optimizer, DpRounds& dp,
                        coordinator::CommitResult* commit, RoundReport* report) {
  coordinator::RoundEngine& engine = host.engine();
  const uint64_t round = engine.current_round();
  auto sample = dp.Sample(host);
  if (!sample.ok()) return sample.status();
  for (const std::string& c : *sample) report->per_client["dp_asked"][c] = 1;
  auto collector = std::make_shared<coordinator::PerClientCollector>(/*push_sum=*/false,
                                                                     /*compact=*/true);
  auto open = Collect(host, *sample, deadline, collector, report, nullptr);
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
  auto mean = dp.NoisedMean(all, engine.dim(), report);
  if (!mean.ok()) return mean.status();
  // From here on the noised mean exists, and what follows depends on it (the guard's
  // verdict, its log line): the round has spent its privacy, whatever becomes of it.
  dp.Spend(sample->size(), report);
  auto choice = coordinator::ChooseUnderGuard(
      host, {}, 0, [&](const std::set<std::string>&) { return engine.Preview(*mean, optimizer); },
      report);
  if (!choice.ok()) return choice.status();
  return CommitGuarded(engine, round, *choice, *mean, optimizer, &counted, commit);
}

absl::Status RunStreamingRound(RoundHost& host, const std::vector<std::string>& participants,
                               Clock::time_point deadline,
                               const coordinator::ServerOptimizer& optimizer,
                               const AggregatorOptions& robust, SummedRoundState* state,
                               coordinator::CommitResult* commit, RoundReport* report,
                               const std::function<void()>& tick) {
  coordinator::RoundEngine& engine = host.engine();
  const uint64_t round = engine.current_round();
  auto sum = std::make_shared<coordinator::WeightedSumCollector>(engine.dim(), state->next_bound,
                                                                 state->code);
  auto open = Collect(host, participants, deadline, sum, report, tick);
  if (!open.ok() || !*open) return open.status();
  auto summed = sum->Mean();
  if (!summed.ok()) {
    // Codes that decode to values beyond float (the decoders bound what one chunk can
    // carry, so this is a guard): the round counts nothing, the job goes on.
    log::Warning("coordinator", "round %llu: %s: the round counts nothing",
                 static_cast<unsigned long long>(round),
                 std::string(summed.status().message()).c_str());
    coordinator::GuardedChoice none;
    none.first.detail = std::string(summed.status().message());
    report->labels["aggregate_error"] = none.first.detail;
    return CommitGuarded(engine, round, none, {}, optimizer, nullptr, commit);
  }
  const std::vector<float> mean = *std::move(summed);
  const std::map<std::string, double> norms = sum->Norms();
  report->figures["clip_bound"] = state->next_bound;
  report->figures["clipped"] = sum->clipped();
  // Summed codes: floats in the code each update added to the round's sum.
  if (state->code != nullptr) report->figures["summed_code_floats"] = state->code->code_size();
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
  return CommitGuarded(engine, round, *choice, mean, optimizer, nullptr, commit);
}

}  // namespace

absl::Status AggregateAndCommit(coordinator::RoundHost& host,
                                std::span<const coordinator::Contribution> all,
                                const coordinator::ServerOptimizer& optimizer,
                                const AggregatorOptions& robust, coordinator::CommitResult* commit,
                                RoundReport* report, std::set<std::string>* counted) {
  coordinator::RoundEngine& engine = host.engine();
  const uint64_t round = engine.current_round();
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
    auto agg = coordinator::AggregateUpdates(
        robust, kept, coordinator::ClipByMedian(kept, robust.clip), engine.dim());
    if (!agg.ok()) return agg.status();
    if (!agg->fallback.empty()) {
      log::Warning("coordinator", "round %llu: %s", static_cast<unsigned long long>(round),
                   agg->fallback);
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
  if (absl::Status st = CommitGuarded(engine, round, *choice, delta, optimizer, &used, commit); !st.ok())
    return st;
  if (counted != nullptr) *counted = choice->model.empty() ? std::set<std::string>() : used;
  return absl::OkStatus();
}

absl::Status RunSummedRound(coordinator::RoundHost& host,
                            const std::vector<std::string>& participants,
                            coordinator::Clock::time_point deadline,
                            const coordinator::ServerOptimizer& optimizer,
                            const AggregatorOptions& robust, SummedRoundState* state,
                            coordinator::CommitResult* commit, RoundReport* report,
                            const std::function<void()>& tick) {
  if (robust.buffered()) {
    return RunBufferedRound(host, participants, deadline, optimizer, robust, commit, report, tick);
  }
  return RunStreamingRound(host, participants, deadline, optimizer, robust, state, commit, report,
                           tick);
}

const coordinator::ModeTraits& FedAvgDriver::Traits() {
  static const coordinator::ModeTraits traits{
      .mode = Mode::kFedAvg,
      .robust_aggregators = true,
      .mode_in_job_key = false,
      .plain_clients = true,
      .codec_ladder = true,
      .check_codecs = &CheckFedAvgCodecs,
  };
  return traits;
}

absl::StatusOr<std::unique_ptr<FedAvgDriver>> FedAvgDriver::Create(
    const FedAvgOptions& options, const coordinator::DriverEnv& env) {
  std::unique_ptr<FedAvgDriver> d(new FedAvgDriver(options, env.robust, env.layout));
  auto buffered = ParseRoundsMode(options.rounds_mode);
  if (!buffered.ok()) return buffered.status();
  if (*buffered && env.plan != nullptr) {
    // A rolling round decodes every update with one codec, whatever round it was asked in.
    const coordinator::RoundPlan& plan = *env.plan;
    if (!plan.warmup_codecs.empty() || codecs::NamesRoundSeed(plan.codec) ||
        codecs::IsGradiveq(plan.codec) || codecs::NamesTwoPhasePowerSgd(plan.codec) ||
        codecs::IsSharedScaleTernGrad(plan.codec)) {
      return absl::InvalidArgumentError(StrCat(
          "--rounds-mode buffered(...) decodes every update with the job's one codec: it takes "
          "no --codec-warmup and no codec whose rounds differ (randk(seed=round), gradiveq, "
          "powersgd(..., phases=2), terngrad(shared=1)); --codec is ",
          plan.codec));
    }
  }
  if (*buffered) d->buffered_ = std::make_unique<BufferedRounds>(**buffered);
  auto dp = ParseDp(options.dp, options.dp_epsilon, options.dp_delta, options.dp_max_epsilon);
  if (!dp.ok()) return dp.status();
  if (!*dp && env.committed_round > 0 &&
      !absl::IsNotFound(LoadDpAccount(env.state_dir, env.committed_round).status())) {
    // A DP job restarted without --dp would go on without clipping, noise or accounting.
    return absl::FailedPreconditionError(
        StrCat("the checkpoint of round ", env.committed_round, " is a DP job's (",
               DpAccountPath(env.state_dir, env.committed_round),
               "): restart it with the --dp flags it started with"));
  }
  auto secagg = ParseSecAgg(options.secagg);
  if (!secagg.ok()) return secagg.status();
  if (*dp) {
    if (absl::Status st = CheckDp(d->buffered_ != nullptr, env); !st.ok()) return st;
    auto grid = SkellamGridOf(**dp, *secagg, env);
    if (!grid.ok()) return grid.status();
    auto rounds = DpRounds::Create(**dp, env.fraction, env.rounds, env.state_dir,
                                   env.committed_round, env.metrics, *grid);
    if (!rounds.ok()) return rounds.status();
    d->dp_ = *std::move(rounds);
  }
  if (*secagg) {
    const bool central = *dp && (**dp).mechanism == DpMechanism::kGaussian;
    if (absl::Status st = CheckSecAgg(env, d->buffered_ != nullptr, central); !st.ok()) return st;
    auto rounds = SecAggRounds::Create(**secagg, env.plan != nullptr ? env.plan->codec : "",
                                       env.dim);
    if (!rounds.ok()) return rounds.status();
    d->secagg_ = *std::move(rounds);
    log::Info("coordinator",
              "--secagg: clients cut their updates to norm %g and mask their codes%s; "
              "--clip-multiplier does not apply",
              (**secagg).clip, (**secagg).masks ? "" : " (masks=0: unmasked)");
    return d;
  }
  if (env.plan != nullptr && codecs::IsGradiveq(env.plan->codec)) {
    auto bases =
        GradiveqBases::Create(env.plan->codec, env.layout, env.state_dir, env.committed_round);
    if (!bases.ok()) return bases.status();
    d->bases_ = *std::move(bases);
  }
  if (env.plan != nullptr && codecs::IsTwoPhasePowerSgd(env.plan->codec)) {
    auto rounds =
        PowerSgdRounds::Create(env.plan->codec, env.layout, env.state_dir, env.committed_round);
    if (!rounds.ok()) return rounds.status();
    d->two_phase_ = *std::move(rounds);
  }
  if (env.plan != nullptr && codecs::IsSharedScaleTernGrad(env.plan->codec)) {
    auto rounds = TernGradRounds::Create(env.plan->codec, env.dim, env.robust.clip);
    if (!rounds.ok()) return rounds.status();
    d->shared_scale_ = *std::move(rounds);
  }
  return d;
}

absl::Status FedAvgDriver::RunRound(coordinator::RoundHost& host,
                                    const std::vector<std::string>& participants,
                                    coordinator::Clock::time_point deadline,
                                    coordinator::CommitResult* commit, RoundReport* report) {
  if (secagg_) return RunSecAggRound(host, participants, deadline, commit, report);
  if (dp_) return RunDpRound(host, deadline, optimizer_, *dp_, commit, report);
  if (buffered_) {
    return buffered_->RunRound(host, participants, deadline, optimizer_, robust_, commit, report);
  }
  coordinator::RoundEngine& engine = host.engine();
  const uint64_t round = engine.current_round();
  // Warm-up rounds (--codec-warmup) run their own codec as plain FedAvg rounds; a
  // randk(seed=round) one names its seed, and the next round's spec is the plan's again.
  auto code = UseRoundSeed(engine, round);
  if (!code.ok()) return code.status();
  if (two_phase_ && engine.plan().CodecFor(round) == engine.plan().codec) {
    return two_phase_->RunRound(host, participants, deadline, optimizer_, robust_, commit, report);
  }
  if (shared_scale_ && engine.plan().CodecFor(round) == engine.plan().codec) {
    auto decoder = shared_scale_->BeginRound(round, participants, host.Now(), deadline);
    if (!decoder.ok()) return decoder.status();
    engine.UseCodec((*decoder)->spec(), *decoder);
    state_.code = decoder->get();
    absl::Status st = RunSummedRound(host, participants, deadline, optimizer_, robust_, &state_,
                                     commit, report, [&] { shared_scale_->Tick(host); });
    state_.code = nullptr;
    engine.UseCodec("", nullptr);
    shared_scale_->EndRound(report);
    return st;
  }
  if (!bases_) {
    state_.code = *code;
    absl::Status st =
        RunSummedRound(host, participants, deadline, optimizer_, robust_, &state_, commit, report);
    state_.code = nullptr;
    return st;
  }
  state_.code = bases_->BeginRound(engine, round);
  const bool fitting = bases_->fitting();
  std::vector<float> before;
  if (fitting) before = engine.ModelVector();
  // Fit rounds carry whole updates, coded rounds their projections: each kind keeps its
  // own clip bound (the median of the last round of its kind).
  std::swap(state_.next_bound, fitting ? fit_bound_ : coded_bound_);
  absl::Status st =
      RunSummedRound(host, participants, deadline, optimizer_, robust_, &state_, commit, report);
  std::swap(state_.next_bound, fitting ? fit_bound_ : coded_bound_);
  state_.code = nullptr;
  if (!st.ok() || commit->round != round) return st;  // stopped: nothing committed
  std::vector<float> step;
  if (fitting) {
    step = engine.ModelVector();
    for (size_t i = 0; i < step.size(); ++i) step[i] -= before[i];
  }
  return bases_->EndRound(round, step, report);
}

absl::Status FedAvgDriver::RunSecAggRound(coordinator::RoundHost& host,
                                          const std::vector<std::string>& participants,
                                          coordinator::Clock::time_point deadline,
                                          coordinator::CommitResult* commit, RoundReport* report) {
  if (!dp_) return secagg_->RunRound(host, participants, deadline, optimizer_, commit, report);
  // Distributed DP: a Poisson sample, each asked for its share of the sum's noise; the
  // round is charged once its noised sum is unmasked.
  auto sample = dp_->Sample(host);
  if (!sample.ok()) return sample.status();
  for (const std::string& c : *sample) report->per_client["dp_asked"][c] = 1;
  secagg_->UseNoise(dp_->SumVariance(), [&](size_t inputs, size_t asked) {
    dp_->SpendSkellam(asked, asked == 0 ? 0 : static_cast<double>(inputs) / asked, report);
  });
  return secagg_->RunRound(host, *sample, deadline, optimizer_, commit, report);
}

absl::StatusOr<const codecs::LinearCode*> FedAvgDriver::UseRoundSeed(
    coordinator::RoundEngine& engine, uint64_t round) {
  const std::string& plan_spec = engine.plan().CodecFor(round);
  if (!codecs::NamesRoundSeed(plan_spec)) {
    if (seeded_) engine.UseCodec("", nullptr);
    seeded_ = false;
    return nullptr;
  }
  auto plan_codec = codecs::MakeCodec(plan_spec, &layout_);  // canonical: `seed=round`
  if (!plan_codec.ok()) return plan_codec.status();
  auto sender = codecs::MakeCodec(
      codecs::WithRoundSeed((*plan_codec)->spec(), engine.SharedSeed(round)), &layout_);
  if (!sender.ok()) return sender.status();
  auto decoder = codecs::MakeCodec((*sender)->wire_spec(), &layout_);
  if (!decoder.ok()) return decoder.status();
  std::shared_ptr<const codecs::Codec> shared = *std::move(decoder);
  engine.UseCodec((*sender)->spec(), shared);
  seeded_ = true;
  return shared->traits().summable ? dynamic_cast<const codecs::LinearCode*>(shared.get())
                                   : nullptr;
}

void FedAvgDriver::DecorateRoundStart(const std::string& client, protos::RoundStart* start) {
  start->mutable_fedavg();
  if (secagg_) secagg_->Decorate(client, start);
  if (two_phase_ && codecs::IsTwoPhasePowerSgd(start->codec())) two_phase_->Decorate(start);
  if (shared_scale_) shared_scale_->Decorate(start);
}

absl::Status FedAvgDriver::AcceptReport(const std::string& client,
                                        const protos::ProgressReport& report) {
  if (secagg_) return secagg_->Accept(client, report);
  if (!shared_scale_) return RoundDriver::AcceptReport(client, report);
  return shared_scale_->Accept(client, report);
}

absl::StatusOr<std::shared_ptr<const coordinator::ModelBlob>> FedAvgDriver::Blob(
    const std::string& client, const std::string& name, uint64_t version) {
  if (bases_ && name == codecs::kGradiveqBasisBlob) return bases_->Blob(version);
  return RoundDriver::Blob(client, name, version);
}

absl::Status FedAvgDriver::Save(uint64_t round) {
  if (dp_) {
    if (absl::Status st = dp_->Save(round); !st.ok()) return st;
  }
  if (two_phase_) {
    if (absl::Status st = two_phase_->Save(round); !st.ok()) return st;
  }
  return bases_ ? bases_->Save(round) : absl::OkStatus();
}

}  // namespace fedlgc::modes
