// The LGC round protocol at the coordinator (see lgc_driver.h).
#include "modes/lgc/lgc_driver.h"

#include <algorithm>
#include <cstdio>

#include "base/log.h"
#include "base/str.h"
#include "coordinator/collectors.h"
#include "modes/fedavg/fedavg_driver.h"
#include "modes/lgc/lgc_plan.h"
#include "modes/lgc/lgc_stage.h"
#include "modes/mode_rules.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {

using coordinator::CommitResult;
using coordinator::DriverEnv;
using coordinator::PayloadCollector;

absl::Status LgcOptions::Validate() const {
  if (ae_device != "auto" && ae_device != "cpu" && ae_device.rfind("cuda", 0) != 0) {
    return absl::InvalidArgumentError(
        StrCat("--ae-device must be cpu, cuda, cuda:N or auto, not ", ae_device));
  }
  if (ae_nice < 0 || ae_nice > 19) {
    return absl::InvalidArgumentError(StrCat("--ae-nice must be in [0, 19], not ", ae_nice));
  }
  return absl::OkStatus();
}

namespace {
// A job codec lgc(...) makes an LGC job, under --mode fedavg too (as before LGC had a mode
// name); a malformed one is LGC's to refuse.
bool ClaimsLgcCodec(std::string_view codec) {
  auto plan = lgc::ParseLgcSpec(codec);
  return !plan.ok() || plan->has_value();
}

// LGC's own codes, none of FedAvg's round protocols; its warm-up codecs (if any) are built
// without the model's layout.
absl::Status CheckLgcCodecs(const coordinator::RoundPlan& plan,
                            const codecs::ModelLayout& /*layout*/) {
  if (absl::Status st = RefuseFedAvgRoundProtocols(plan, Mode::kLgc); !st.ok()) return st;
  auto lgc = lgc::ParseLgcSpec(plan.codec);
  if (!lgc.ok()) return lgc.status();
  if (!lgc->has_value()) return absl::InvalidArgumentError("--mode lgc needs an lgc(...) --codec");
  return absl::OkStatus();
}
}  // namespace

const coordinator::ModeTraits& LgcDriver::Traits() {
  static const coordinator::ModeTraits traits{
      .mode = Mode::kLgc,
      .robust_aggregators = true,
      .summed = true,
      .mode_in_job_key = false,
      .codecs_take_layout = false,
      .claims_codec = &ClaimsLgcCodec,
      .check_codecs = &CheckLgcCodecs,
  };
  return traits;
}

LgcDriver::LgcDriver(LgcOptions options, coordinator::ServerOptimizer optimizer,
                     coordinator::AggregatorOptions robust, std::unique_ptr<LgcAggregator> agg)
    : options_(std::move(options)),
      optimizer_(optimizer),
      robust_(std::move(robust)),
      agg_(std::move(agg)) {}

absl::StatusOr<std::unique_ptr<LgcDriver>> LgcDriver::Create(
    const LgcOptions& options, const coordinator::ServerOptimizer& opt, const DriverEnv& env) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  auto plan = lgc::ParseLgcSpec(env.plan->codec);
  if (!plan.ok()) return plan.status();
  if (!plan->has_value()) {
    return absl::InvalidArgumentError(
        StrCat("an LGC job needs an lgc(...) codec, not ", env.plan->codec));
  }
  auto agg = LgcAggregator::Create(**plan, env.plan->warmup_codecs.size(), env.dim, env.state_dir,
                                   env.committed_round, env.init_seed, options.ae_device,
                                   options.ae_nice);
  if (!agg.ok()) return agg.status();
  return std::unique_ptr<LgcDriver>(new LgcDriver(options, opt, env.robust, *std::move(agg)));
}

std::string LgcDriver::ChooseLeader(const RoundHost& host,
                                    const std::vector<std::string>& candidates,
                                    const std::set<std::string>& tried) const {
  std::vector<std::string> open;
  for (const std::string& p : candidates) {
    if (!tried.count(p)) open.push_back(p);
  }
  if (open.empty()) return "";
  if (!options_.leader.empty() &&
      std::find(open.begin(), open.end(), options_.leader) != open.end()) {
    return options_.leader;
  }
  std::sort(open.begin(), open.end());
  std::string best = open.front();
  double best_bps = host.LinkBytesPerSecond(best);
  for (const std::string& p : open) {
    const double bps = host.LinkBytesPerSecond(p);
    if (bps > best_bps) {
      best = p;
      best_bps = bps;
    }
  }
  const std::map<std::string, uint64_t>& led = agg_->led();
  // Keep the last leader while its link is at least half as good as the best: in stage 3
  // every new leader downloads the encoder, and measured links jitter. (Rotating the lead
  // in stage 2, so that the support is not always one client's top-k, was measured:
  // +0.09 points over four seeds, within the run-to-run spread, for 2.9% more bytes.)
  std::string last;
  uint64_t last_round = 0;
  for (const auto& [client, r] : led) {
    if (r > last_round) last = client, last_round = r;
  }
  if (!last.empty() && std::find(open.begin(), open.end(), last) != open.end() &&
      host.LinkBytesPerSecond(last) >= 0.5 * best_bps) {
    return last;
  }
  return best;
}

void LgcDriver::DecorateRoundStart(const std::string& client, protos::RoundStart* s) {
  protos::LgcRound* lgc = s->mutable_lgc();
  absl::MutexLock lock(&mu_);
  if (round_.round != s->round() || round_.stage == LgcStage::kWarmUp) {
    // A warm-up round: a FedAvg round with the round's codec.
    lgc->set_stage(ToProto(LgcStage::kWarmUp));
    return;
  }
  lgc->set_stage(ToProto(round_.stage));
  lgc->set_support(round_.support);
  lgc->set_leader(client == round_.leader);
  lgc->set_support_size(agg_->KAt(round_.round));
  if (round_.stage == LgcStage::kAutoencoder) {
    lgc->set_encoder_version(LgcAggregator::kEncoderVersion);
  }
  lgc->set_latent(round_.latent);
  lgc->set_leader_cells(round_.cells);
}

absl::StatusOr<std::shared_ptr<const ModelBlob>> LgcDriver::Blob(const std::string& client,
                                                                 const std::string& name,
                                                                 uint64_t version) {
  std::shared_ptr<const ModelBlob> blob;
  if (name == "encoder") {
    absl::MutexLock lock(&mu_);
    if (!encoder_) return absl::NotFoundError("no LGC encoder is served yet");
    blob = encoder_;
  } else if (name == "lgc-decoder") {
    if (version == LgcAggregator::kEncoderVersion) blob = agg_->Decoder(client);
  } else {
    return RoundDriver::Blob(client, name, version);
  }
  if (!blob) return absl::NotFoundError(StrCat(name, " ", version, " is not served to ", client));
  return blob;
}

void LgcDriver::PublishEncoder() {
  auto blob = coordinator::MakeBlob(LgcAggregator::kEncoderVersion, agg_->EncoderBytes());
  agg_->Freeze();
  absl::MutexLock lock(&mu_);
  encoder_ = std::move(blob);
}

absl::Status LgcDriver::RunRound(RoundHost& host, const std::vector<std::string>& participants,
                                 Clock::time_point deadline, CommitResult* commit,
                                 RoundReport* report) {
  auto begun = agg_->BeginRound(host.engine().current_round());
  if (!begun.ok()) return begun.status();
  const LgcStage stage = *begun;
  report->figures["lgc_stage"] = static_cast<double>(stage);
  if (stage == LgcStage::kWarmUp)
    return RunPlainRound(host, participants, deadline, commit, report);
  return RunLeaderRound(host, stage, participants, deadline, commit, report);
}

absl::Status LgcDriver::RunPlainRound(RoundHost& host, const std::vector<std::string>& participants,
                                      Clock::time_point deadline, CommitResult* commit,
                                      RoundReport* report) {
  return RunSummedRound(host, participants, deadline, optimizer_, robust_, &summed_, commit,
                        report);
}

absl::Status LgcDriver::RunLeaderRound(RoundHost& host, LgcStage stage,
                                       const std::vector<std::string>& participants,
                                       Clock::time_point deadline, CommitResult* commit,
                                       RoundReport* report) {
  coordinator::RoundEngine& engine = host.engine();
  const uint64_t round = engine.current_round();
  LeaderWatch w;
  w.leader = ChooseLeader(host, participants, w.tried);
  w.tried.insert(w.leader);
  if (stage == LgcStage::kAutoencoder && !encoder_published()) PublishEncoder();
  {
    absl::MutexLock lock(&mu_);
    // The support is the leader's, sent once its payload is in.
    round_ = {round, stage, w.leader, "", "", ""};
  }
  payloads_ = std::make_shared<PayloadCollector>(
      [this, round](std::string_view spec, std::span<const uint8_t> body) {
        return agg_->Validate(round, spec, body);
      });
  if (absl::Status st = host.StartRound(participants, deadline, payloads_); !st.ok()) return st;
  w.seen = w.asked = host.Now();
  absl::Status watch;
  host.WaitUntil(
      deadline, [&] { return !watch.ok() || engine.AllComplete(); },
      [&] {
        if (watch.ok()) watch = WatchLeader(host, round, stage, participants, deadline, &w);
      });
  if (!watch.ok()) return watch;
  if (host.stopped()) return absl::OkStatus();
  report->hit_deadline = !engine.AllComplete();
  engine.Freeze();
  // The leader whose payload went out is the round's.
  if (!w.pushed.empty()) w.leader = w.pushed;
  return CommitLeaderRound(host, round, &w, commit, report);
}

absl::Status LgcDriver::CommitLeaderRound(RoundHost& host, uint64_t round, LeaderWatch* watch,
                                          CommitResult* commit, RoundReport* report) {
  coordinator::RoundEngine& engine = host.engine();
  LeaderWatch& w = *watch;
  const auto t0 = host.Now();
  // The model guard picks who counts: the round's candidate, else without the largest
  // values (at most a minority of them).
  coordinator::GuardedChoice choice;
  const LgcAggregator::Chooser choose =
      [&](const std::map<std::string, double>& norms,
          const LgcAggregator::Combine& combine) -> absl::StatusOr<std::set<std::string>> {
    const auto candidate =
        [&](const std::set<std::string>& excluded) -> absl::StatusOr<std::vector<float>> {
      std::set<std::string> counted;
      auto delta = combine(excluded, &counted);
      if (!delta.ok()) return delta.status();
      return engine.Preview(*delta, optimizer_);
    };
    auto chosen = coordinator::ChooseUnderGuard(host, coordinator::ByNormDescending(norms),
                                                norms.empty() ? 0 : (norms.size() - 1) / 2,
                                                candidate, report);
    if (!chosen.ok()) return chosen.status();
    choice = *std::move(chosen);
    if (!choice.model.empty()) return choice.excluded;
    // Nothing passed: nobody counts, and the autoencoder learns from nobody.
    std::set<std::string> everyone;
    for (const auto& [client, n] : norms) everyone.insert(client);
    return everyone;
  };
  auto outcome =
      agg_->Aggregate(round, w.leader, payloads_->Payloads(), &w.tried, robust_, choose);
  if (!outcome.ok()) return outcome.status();
  coordinator::QuarantineExcluded(host, round, choice);
  report->figures["clip_bound"] = outcome->clip_bound;
  report->figures["clipped"] = outcome->clipped;
  report->per_client["update_norm"] = outcome->norms;
  report->figures["ae_seconds"] = std::chrono::duration<double>(host.Now() - t0).count();
  report->figures["ae_reconstruction"] = outcome->ae_reconstruction;
  report->figures["ae_similarity"] = outcome->ae_similarity;
  if (outcome->ae_backlog >= 0) {  // the autoencoder trains, or is yet to switch
    report->figures["ae_backlog"] = static_cast<double>(outcome->ae_backlog);
    report->figures["ae_trained_round"] = static_cast<double>(outcome->ae_trained_round);
  }
  report->figures["lgc_values_cosine"] = outcome->values_cosine;
  report->figures["lgc_rebuild_mismatches"] = outcome->rebuild_mismatches;
  report->labels["lgc_leader"] = w.leader;
  agg_->Led(w.leader, round);
  // A round whose every candidate the guard refused counts nothing (and the server
  // optimizer's momentum does not move the model either).
  auto committed = choice.model.empty() && !choice.first.passed()
                       ? engine.CommitModel(engine.ModelVector(), {})
                       : engine.CommitDelta(outcome->delta, optimizer_, &outcome->counted);
  if (!committed.ok()) return committed.status();
  *commit = *std::move(committed);
  return absl::OkStatus();
}

absl::Status LgcDriver::WatchLeader(RoundHost& host, uint64_t round, LgcStage stage,
                                    const std::vector<std::string>& participants,
                                    Clock::time_point deadline, LeaderWatch* w) {
  const auto payloads = payloads_->Payloads();
  const auto live = host.Connected();
  const bool delivered =
      payloads.count(w->leader) && lgc::IsLeaderSpec(payloads.at(w->leader).spec);
  if (w->pushed.empty()) {
    if (absl::Status st = PushLatent(host, round, participants, payloads, w); !st.ok()) return st;
  }
  // Gone: no event stream for 3 s (a reconnecting client is briefly absent).
  const auto now = host.Now();
  if (std::find(live.begin(), live.end(), w->leader) != live.end()) w->seen = now;
  const bool gone = now - w->seen > std::chrono::seconds(3);
  // Each leader gets half of the time left when it was asked.
  const bool late = now - w->asked > (deadline - w->asked) / 2;
  // A payload on its way from another leader serves as well.
  if (delivered || !w->pushed.empty() || !(gone || late)) return absl::OkStatus();
  std::vector<std::string> candidates;
  for (const std::string& c : participants) {
    if (std::find(live.begin(), live.end(), c) != live.end()) candidates.push_back(c);
  }
  const std::string next = ChooseLeader(host, candidates, w->tried);
  if (next.empty()) return absl::OkStatus();
  w->tried.insert(next);
  w->leader = next;
  w->seen = w->asked = host.Now();
  {
    absl::MutexLock lock(&mu_);
    round_.leader = next;
  }
  protos::ServerEvent e;
  protos::LgcPromote* promote = e.mutable_mode()->mutable_lgc_promote();
  promote->set_round(round);
  promote->set_encoder_version(LgcAggregator::kEncoderVersion);
  host.Push(next, e);
  log::Info("coordinator", "round %llu: leader %s promoted (stage %d)",
            static_cast<unsigned long long>(round), next, static_cast<int>(stage));
  return absl::OkStatus();
}

absl::Status LgcDriver::PushLatent(RoundHost& host, uint64_t round,
                                   const std::vector<std::string>& participants,
                                   const std::map<std::string, PayloadCollector::Payload>& in,
                                   LeaderWatch* w) {
  // The leader's payload, or a former leader's of this round (it was promoted over, then
  // delivered); never a leader payload from a client that was not asked to lead.
  auto from = in.find(w->leader);
  if (from == in.end() || !lgc::IsLeaderSpec(from->second.spec)) {
    from = std::find_if(in.begin(), in.end(), [&](const auto& p) {
      return lgc::IsLeaderSpec(p.second.spec) && w->tried.count(p.first) > 0;
    });
  }
  if (from == in.end()) return absl::OkStatus();
  const std::string& body = from->second.body;
  auto ref = agg_->LeaderPayloadBytes(
      round, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(body.data()), body.size()));
  if (!ref.ok()) return ref.status();  // validated on arrival: cannot happen
  w->pushed = from->first;
  {
    absl::MutexLock lock(&mu_);
    round_.support = ref->support;
    round_.latent = ref->latent;
    round_.cells = ref->cells;
  }
  protos::ServerEvent e;
  protos::LgcLatent* latent = e.mutable_mode()->mutable_lgc_latent();
  latent->set_round(round);
  latent->set_latent(ref->latent);
  latent->set_support(ref->support);
  latent->set_leader_cells(ref->cells);
  for (const std::string& p : participants) {
    if (p != from->first) host.Push(p, e);
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::modes
