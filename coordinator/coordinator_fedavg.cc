// FedAvg rounds, with LGC's stages when the job's codec is lgc(...): participants upload
// their updates, the engine averages them (or the LGC driver decodes and aggregates its
// payloads) and the server optimizer applies the mean (see coordinator.h, lgc_driver.h).
#include <algorithm>
#include <cstdio>

#include "autoencoder/lgc_plan.h"
#include "codecs/crc32c.h"
#include "coordinator/coordinator.h"
#include "coordinator/service.h"

namespace fedlgc::coordinator {

std::string Coordinator::ChooseLeader(const std::vector<std::string>& participants,
                                      const std::set<std::string>& tried) const {
  std::vector<std::string> open;
  for (const std::string& p : participants) {
    if (!tried.count(p)) open.push_back(p);
  }
  if (open.empty()) return "";
  if (!options_.lgc_leader.empty() &&
      std::find(open.begin(), open.end(), options_.lgc_leader) != open.end()) {
    return options_.lgc_leader;
  }
  std::sort(open.begin(), open.end());
  std::string best = open.front();
  double best_bps = service_->LinkBytesPerSecond(best);
  for (const std::string& p : open) {
    const double bps = service_->LinkBytesPerSecond(p);
    if (bps > best_bps) {
      best = p;
      best_bps = bps;
    }
  }
  // Keep the last leader while its link is at least half as good as the best: every new
  // leader downloads the encoder, and measured links jitter.
  if (!last_leader_.empty() && std::find(open.begin(), open.end(), last_leader_) != open.end() &&
      service_->LinkBytesPerSecond(last_leader_) >= 0.5 * best_bps) {
    return last_leader_;
  }
  return best;
}

void Coordinator::DecorateRoundStart(const std::string& client, protos::RoundStart* s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (lgc_round_.round != s->round() || lgc_round_.stage < 2) return;
  s->set_lgc_stage(static_cast<uint32_t>(lgc_round_.stage));
  s->set_lgc_support(lgc_round_.support);
  s->set_lgc_leader(client == lgc_round_.leader);
  if (lgc_round_.stage == 3) s->set_lgc_encoder_version(LgcDriver::kEncoderVersion);
  s->set_lgc_latent(lgc_round_.latent);
}

absl::Status Coordinator::PushLgcLatent(uint64_t round, const std::string& leader,
                                        const std::set<std::string>& leaders,
                                        const std::vector<std::string>& participants,
                                        const std::map<std::string, RoundEngine::Payload>& payloads,
                                        std::string* pushed) {
  // The leader's payload, or a former leader's of this round (it was promoted over, then
  // delivered); never a leader payload from a client that was not asked to lead.
  auto from = payloads.find(leader);
  if (from == payloads.end() || from->second.spec != autoencoder::kLeaderSpec) {
    from = std::find_if(payloads.begin(), payloads.end(), [&](const auto& p) {
      return p.second.spec == autoencoder::kLeaderSpec && leaders.count(p.first) > 0;
    });
  }
  if (from == payloads.end()) return absl::OkStatus();
  const std::string& body = from->second.body;
  auto ref = lgc_->LeaderPayloadBytes(
      round, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(body.data()), body.size()));
  if (!ref.ok()) return ref.status();  // validated on arrival: cannot happen
  *pushed = from->first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lgc_round_.support = ref->support;
    lgc_round_.latent = ref->latent;
  }
  protos::ServerEvent e;
  e.mutable_latent()->set_round(round);
  e.mutable_latent()->set_latent(ref->latent);
  e.mutable_latent()->set_support(ref->support);
  for (const std::string& p : participants) {
    if (p != from->first) service_->Push(p, e);
  }
  return absl::OkStatus();
}

absl::Status Coordinator::RunFedAvgRound(const std::vector<std::string>& connected,
                                         Clock::time_point deadline, CommitResult* commit_out,
                                         RoundReport* rep_out) {
  const uint64_t round = engine_->current_round();
  const int stage = lgc_ ? lgc_->Stage(round) : 0;
  RoundEngine::PayloadValidator validator;
  std::set<std::string> tried;
  std::string leader;
  if (stage >= 2) {
    leader = ChooseLeader(connected, tried);
    tried.insert(leader);
    validator = [this, round](const std::string&, std::string_view spec,
                              std::span<const uint8_t> body) {
      return lgc_->Validate(round, spec, body);
    };
    if (stage == 3 && !encoder_published_) {
      auto blob = std::make_shared<ModelBlob>();
      blob->version = LgcDriver::kEncoderVersion;
      blob->bytes = lgc_->EncoderBytes();
      blob->crc32c = codecs::Crc32c(blob->bytes.data(), blob->bytes.size());
      service_->SetEncoderBlob(std::move(blob));
      lgc_->Freeze();
      encoder_published_ = true;
    }
    std::lock_guard<std::mutex> lock(mu_);
    // predict=1: the support is the leader's, sent once its payload is in.
    lgc_round_ = {round, stage, leader, lgc_->predicts() ? "" : lgc_->SupportBytes(), ""};
  }
  std::vector<float> before;
  if (stage == 1) before = engine_->ModelVector();
  if (absl::Status st = StartRound(connected, deadline, {.validator = validator}); !st.ok())
    return st;

  const auto opened = Clock::now();
  auto leader_seen = opened, asked = opened;
  std::string latent_pushed;  // predict=1: who gave the round's latent
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_ && Clock::now() < deadline && !engine_->AllComplete()) {
      cv_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
      // Rounds that wait for a leader: compressed ones, and with predict=1 training ones.
      if (stage != 3 && !(stage == 2 && lgc_->predicts())) continue;
      // A compressed round needs its leader's latent (with predict=1 every round needs its
      // leader's support): when the leader has gone, or has not delivered by half the
      // round's time, the next best participant leads.
      lock.unlock();
      const auto payloads = engine_->Payloads();
      const auto live = service_->Connected();
      const bool delivered =
          payloads.count(leader) && payloads.at(leader).spec == autoencoder::kLeaderSpec;
      if (lgc_->predicts() && latent_pushed.empty()) {
        if (absl::Status st =
                PushLgcLatent(round, leader, tried, connected, payloads, &latent_pushed);
            !st.ok()) {
          return st;
        }
      }
      // Gone: no event stream for 3 s (a reconnecting client is briefly absent).
      if (std::find(live.begin(), live.end(), leader) != live.end()) {
        leader_seen = Clock::now();
      }
      const bool gone = Clock::now() - leader_seen > std::chrono::seconds(3);
      // Each leader gets half of the time left when it was asked.
      const bool late = Clock::now() - asked > (deadline - asked) / 2;
      std::string next;
      // predict=1: a latent on its way from another leader payload serves as well.
      if (!delivered && latent_pushed.empty() && (gone || late)) {
        std::vector<std::string> candidates;
        for (const std::string& c : connected) {
          if (std::find(live.begin(), live.end(), c) != live.end()) candidates.push_back(c);
        }
        next = ChooseLeader(candidates, tried);
      }
      lock.lock();
      if (!next.empty()) {
        tried.insert(next);
        leader = next;
        leader_seen = Clock::now();
        asked = leader_seen;
        lgc_round_.leader = next;
        lock.unlock();
        protos::ServerEvent e;
        e.mutable_promote()->set_round(round);
        e.mutable_promote()->set_encoder_version(LgcDriver::kEncoderVersion);
        service_->Push(next, e);
        std::fprintf(stderr, "coordinator: round %llu: leader %s promoted\n",
                     static_cast<unsigned long long>(round), next.c_str());
        lock.lock();
      }
    }
  }
  if (stop_) return absl::OkStatus();
  CommitResult& commit = *commit_out;
  RoundReport& rep = *rep_out;
  rep.hit_deadline = !engine_->AllComplete();
  rep.lgc_stage = lgc_ ? (stage == 0 ? 1 : stage) : 0;
  if (stage >= 2) {
    engine_->Freeze();
    const auto t0 = Clock::now();
    // predict=1: the leader whose support and latent went out is the round's.
    if (!latent_pushed.empty()) leader = latent_pushed;
    auto outcome = lgc_->Aggregate(round, leader, engine_->Payloads(), &tried);
    if (!outcome.ok()) return outcome.status();
    rep.ae_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    rep.ae_reconstruction = outcome->ae_reconstruction;
    rep.ae_similarity = outcome->ae_similarity;
    rep.lgc_values_cosine = outcome->values_cosine;
    rep.lgc_rebuild_mismatches = outcome->rebuild_mismatches;
    rep.lgc_leader = leader;
    last_leader_ = leader;
    commit = engine_->CommitWith(outcome->delta, outcome->counted);
  } else {
    commit = engine_->Commit();
    if (lgc_) lgc_->ObservePlainRound(before, engine_->ModelVector());
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::coordinator
