// FedAvg at the coordinator (see fedavg_driver.h).
#include "modes/fedavg/fedavg_driver.h"

#include <algorithm>
#include <cstdio>

#include "base/log.h"
#include "base/str.h"
#include "codecs/powersgd_two_phase.h"
#include "codecs/registry.h"
#include "codecs/round_kind.h"
#include "coordinator/collectors.h"
#include "modes/fedavg/fedavg_state.h"
#include "modes/fedavg/guarded_commit.h"
#include "modes/fedavg/round_protocols.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {

absl::Status FedAvgOptions::Validate() const {
  if (!(server_lr > 0) || server_momentum < 0 || server_momentum >= 1) {
    return absl::InvalidArgumentError("--server-lr must be > 0 and --server-momentum in [0, 1)");
  }
  if (absl::Status st = ParseRoundsMode(rounds_mode).status(); !st.ok()) return st;
  if (absl::Status st = ParseSecAgg(secagg).status(); !st.ok()) return st;
  if (absl::Status st = Algorithm::Parse(algorithm).status(); !st.ok()) return st;
  return ParseDp(dp, dp_epsilon, dp_delta, dp_max_epsilon).status();
}

namespace {

// FedAvg runs every codec, and the round protocols of its own: two-phase PowerSGD (the job
// codec itself, unwrapped, each message within --chunk-bytes) and GradiVeQ (the job codec
// itself: clients add what they keep of its error).
absl::Status CheckFedAvgCodecs(const coordinator::RoundPlan& plan,
                               const codecs::ModelLayout& layout) {
  const codecs::RoundKind kind = codecs::RoundKindOf(plan.codec);
  if (codecs::Present(kind.two_phase)) {
    if (kind.two_phase != codecs::Placement::kTop) {
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
  if (kind.basis == codecs::Placement::kNested) {
    return absl::InvalidArgumentError(
        "--codec: give gradiveq(...) itself; clients add what they keep of its error");
  }
  // Whether the round protocols the codecs ask for run together: the table's verdict
  // (round_protocols.cc), as the driver will make them, before the job starts.
  coordinator::DriverEnv env;
  env.plan = &plan;
  env.layout = layout;
  env.dim = layout.dim();
  const FedAvgOptions codecs_alone;
  auto job = ProtocolJob::Read(codecs_alone, env);
  if (!job.ok()) return job.status();
  return PlanProtocols(*job).status();
}

using coordinator::AggregatorOptions;
using coordinator::Clock;
using coordinator::Contribution;
using coordinator::RoundHost;

// The collector a round opens with: the aggregator's, or what `wrap` makes of it.
std::shared_ptr<coordinator::Collector> Wrapped(std::shared_ptr<coordinator::Collector> collector,
                                                const CollectorWrap& wrap) {
  return wrap ? wrap(std::move(collector)) : collector;
}

absl::Status RunBufferedRound(RoundHost& host, const std::vector<std::string>& participants,
                              Clock::time_point deadline,
                              const coordinator::ServerOptimizer& optimizer,
                              const AggregatorOptions& robust, coordinator::CommitResult* commit,
                              RoundReport* report, const std::function<void()>& tick,
                              const CollectorWrap& wrap) {
  // The mean takes updates one at a time: they wait as the frames that arrived.
  const bool compact = robust.kind == coordinator::AggregatorKind::kMean;
  auto collector = std::make_shared<coordinator::PerClientCollector>(compact);
  auto open = CollectRound(host, participants, deadline, Wrapped(collector, wrap), report, tick);
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

absl::Status RunStreamingRound(RoundHost& host, const std::vector<std::string>& participants,
                               Clock::time_point deadline,
                               const coordinator::ServerOptimizer& optimizer,
                               const AggregatorOptions& robust, SummedRoundState* state,
                               coordinator::CommitResult* commit, RoundReport* report,
                               const std::function<void()>& tick, const CollectorWrap& wrap) {
  coordinator::RoundEngine& engine = host.engine();
  const uint64_t round = engine.current_round();
  auto sum = std::make_shared<coordinator::WeightedSumCollector>(engine.dim(), state->next_bound,
                                                                 state->code);
  auto open = CollectRound(host, participants, deadline, Wrapped(sum, wrap), report, tick);
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

absl::StatusOr<bool> CollectRound(RoundHost& host, const std::vector<std::string>& participants,
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
                            const std::function<void()>& tick, const CollectorWrap& wrap) {
  if (robust.buffered()) {
    return RunBufferedRound(host, participants, deadline, optimizer, robust, commit, report, tick,
                            wrap);
  }
  return RunStreamingRound(host, participants, deadline, optimizer, robust, state, commit, report,
                           tick, wrap);
}

const coordinator::ModeTraits& FedAvgDriver::Traits() {
  static const coordinator::ModeTraits traits{
      .mode = Mode::kFedAvg,
      .robust_aggregators = true,
      .summed = true,
      .mode_in_job_key = false,
      .plain_clients = true,
      .codec_ladder = true,
      .check_codecs = &CheckFedAvgCodecs,
  };
  return traits;
}

absl::StatusOr<std::unique_ptr<FedAvgDriver>> FedAvgDriver::Create(
    const FedAvgOptions& options, const coordinator::DriverEnv& env) {
  std::unique_ptr<FedAvgDriver> d(new FedAvgDriver(options, env.robust));
  auto job = ProtocolJob::Read(options, env);
  if (!job.ok()) return job.status();
  auto protocols = AssembleProtocols(*job);
  if (!protocols.ok()) return protocols.status();
  d->protocols_ = *std::move(protocols);
  return d;
}

absl::Status FedAvgDriver::RunRound(coordinator::RoundHost& host,
                                    const std::vector<std::string>& participants,
                                    coordinator::Clock::time_point deadline,
                                    coordinator::CommitResult* commit, RoundReport* report) {
  coordinator::RoundEngine& engine = host.engine();
  RoundContext round{.host = host,
                     .participants = participants,
                     .deadline = deadline,
                     .commit = commit,
                     .report = report,
                     .optimizer = optimizer_,
                     .robust = robust_,
                     .round = engine.current_round(),
                     .summed = &state_};
  round.job_codec = engine.terms().plan().CodecFor(round.round) == engine.terms().plan().codec;
  size_t begun = 0;
  absl::Status st;
  for (; begun < protocols_.size(); ++begun) {
    st = protocols_[begun]->BeginRound(round);
    if (!st.ok()) break;
  }
  if (st.ok()) {
    const auto runner = std::find_if(protocols_.begin(), protocols_.end(),
                                     [&](const auto& p) { return p->RunsRound(round); });
    if (runner != protocols_.end()) {
      st = (*runner)->RunRound(round);
    } else {
      st = RunSummedRound(host, round.participants, deadline, optimizer_, robust_, &state_, commit,
                          report, round.Tick());
    }
  }
  state_.code = nullptr;
  // The ones that began end, last first (one that fails to begin undoes itself).
  for (size_t i = begun; i-- > 0;) {
    st = protocols_[i]->EndRound(round, std::move(st));
  }
  return st;
}

void FedAvgDriver::DecorateRoundStart(const std::string& client, protos::RoundStart* start) {
  start->mutable_fedavg();
  for (const auto& p : protocols_) p->DecorateRoundStart(client, start);
}

absl::Status FedAvgDriver::AcceptReport(const std::string& client,
                                        const protos::ProgressReport& report) {
  for (const auto& p : protocols_) {
    if (auto taken = p->AcceptReport(client, report)) return *std::move(taken);
  }
  return RoundDriver::AcceptReport(client, report);
}

absl::StatusOr<std::shared_ptr<const coordinator::ModelBlob>> FedAvgDriver::Blob(
    const std::string& client, const std::string& name, uint64_t version) {
  for (const auto& p : protocols_) {
    if (auto blob = p->Blob(client, name, version)) return *std::move(blob);
  }
  return RoundDriver::Blob(client, name, version);
}

bool FedAvgDriver::Broadcasts(const std::string& name) const {
  return std::any_of(protocols_.begin(), protocols_.end(),
                     [&name](const auto& p) { return p->Broadcasts(name); });
}

absl::Status FedAvgDriver::Save(uint64_t round) {
  for (const auto& p : protocols_) {
    if (absl::Status st = p->Save(round); !st.ok()) return st;
  }
  return absl::OkStatus();
}

size_t FedAvgDriver::KeepVersions() const {
  size_t keep = 0;
  for (const auto& p : protocols_) keep = std::max(keep, p->KeepVersions());
  return keep;
}

bool FedAvgDriver::AllowsClientStatistics() const {
  return std::all_of(protocols_.begin(), protocols_.end(),
                     [](const auto& p) { return p->AllowsClientStatistics(); });
}

std::optional<std::string> FedAvgDriver::Exhausted() const {
  for (const auto& p : protocols_) {
    if (auto why = p->Exhausted()) return why;
  }
  return std::nullopt;
}

std::vector<ProtocolId> FedAvgDriver::protocols() const {
  std::vector<ProtocolId> ids;
  for (const auto& p : protocols_) ids.push_back(p->id());
  return ids;
}

}  // namespace fedlgc::modes
