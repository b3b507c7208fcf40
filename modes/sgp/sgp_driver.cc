// SGP relay at the coordinator (see sgp_driver.h).
#include "modes/sgp/sgp_driver.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "base/log.h"
#include "base/str.h"
#include "codecs/input_error.h"
#include "core/mixing.h"
#include "modes/mode_rules.h"
#include "modes/sgp/inbox.h"
#include "modes/sgp/sgp_checks.h"
#include "modes/sgp/sgp_state.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {
absl::Status SgpOptions::Validate() const { return absl::OkStatus(); }

namespace {
// SGP relays push-sum shares with its own accounting: the plain codecs of the job, none of
// FedAvg's round protocols.
absl::Status CheckSgpCodecs(const coordinator::RoundPlan& plan, const codecs::ModelLayout& layout) {
  return CheckOwnProtocolCodecs(plan, layout, Mode::kSgp);
}
}  // namespace

const coordinator::ModeTraits& SgpDriver::Traits() {
  // A share needs a peer to go to; shares are relayed, not summed (no median).
  static const coordinator::ModeTraits traits{
      .mode = Mode::kSgp,
      .min_participants = 2,
      .check_codecs = &CheckSgpCodecs,
      .report_key = "sgp_consensus_distance",
      .report_heading = "consensus",
      .end_of_run_check = &CheckSgpMass,
  };
  return traits;
}

absl::StatusOr<std::unique_ptr<SgpDriver>> SgpDriver::Create(
    const SgpOptions& options, size_t dim, std::string state_dir, uint64_t committed_round,
    const coordinator::AggregatorOptions& robust, monitoring::Metrics* metrics) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  std::unique_ptr<SgpDriver> d(new SgpDriver(options, dim, std::move(state_dir), robust));
  if (metrics != nullptr) {
    d->distance_gauge_ = &metrics->GaugeFamily(
        "fedlgc_sgp_consensus_distance",
        "SGP: root mean squared distance of the clients' de-biased models to their mean, from "
        "the last round's shares");
  }
  if (committed_round > 0) {
    if (absl::Status st = d->Load(committed_round); !st.ok()) return st;
  }
  return d;
}

void SgpDriver::BeginRound(uint64_t round, std::vector<std::string> participants) {
  std::sort(participants.begin(), participants.end());
  absl::MutexLock lock(&mu_);
  round_ = round;
  participants_ = std::move(participants);
  peer_.clear();
  distance_sq_.clear();
  const size_t n = participants_.size();
  for (size_t k = 0; k < n && n >= 2; ++k) {
    peer_[participants_[k]] = participants_[core::ExponentialPeer(k, n, round)];
  }
}

std::set<std::string> SgpDriver::Senders() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> out;
  for (const auto& [c, peer] : peer_) out.insert(c);
  return out;
}

std::string SgpDriver::PeerOf(const std::string& client) const {
  absl::MutexLock lock(&mu_);
  auto it = peer_.find(client);
  return it == peer_.end() ? "" : it->second;
}

void SgpDriver::Seal(uint64_t round, Mail* mail) {
  mail->blob = coordinator::MakeBlob(round, EncodeInbox(mail->w, mail->x));
}

std::map<std::string, double> SgpDriver::Deviations(const Shares& shares,
                                                    std::span<const float> reference) const {
  std::map<std::string, double> out;
  std::vector<float> f(dim_);
  for (const auto& [sender, u] : shares) {
    if (!u.complete || !(u.weight_share > 0)) continue;
    core::ReconstructShare(u.values, u.weight_share,
                           reference_ ? reference : std::span<const float>(), f);
    double sq = 0;
    for (size_t i = 0; i < dim_; ++i) {
      const double d = f[i] / u.weight_share - reference[i];
      sq += d * d;
    }
    out[sender] = std::sqrt(sq);
  }
  return out;
}

SgpDriver::Outcome SgpDriver::Commit(uint64_t round, const Shares& shares,
                                     const std::set<std::string>& live,
                                     std::span<const float> reference,
                                     const std::set<std::string>& withheld, bool preview) {
  Outcome out;
  absl::MutexLock lock(&mu_);
  std::vector<std::vector<float>> full;  // complete shares, reconstructed
  std::vector<double> weights;
  std::vector<double> sum(dim_, 0.0);
  double wsum = 0;
  std::set<std::string> touched;
  for (const auto& [sender, peer] : peer_) {
    auto it = shares.find(sender);
    if (it == shares.end() || !it->second.complete || withheld.count(sender)) continue;
    const SgpShare& u = it->second;
    std::vector<float> f(dim_);
    core::ReconstructShare(u.values, u.weight_share,
                           reference_ ? reference : std::span<const float>(), f);
    auto box = mail_.find(peer);
    const bool full_box =
        box != mail_.end() && box->second.size() >= kMaxMailRounds && !box->second.count(round);
    if (live.count(peer) && !full_box && !preview) {
      Mail& mail = mail_[peer][round];
      if (mail.x.empty()) mail.x.assign(dim_, 0.0f);
      for (size_t i = 0; i < dim_; ++i) mail.x[i] += f[i];
      mail.w += u.weight_share;
      touched.insert(peer);
      out.delivered.insert(sender);
    }
    // Every complete share is p times its sender's model: together they give the mean.
    for (size_t i = 0; i < dim_; ++i) sum[i] += f[i];
    wsum += u.weight_share;
    full.push_back(std::move(f));
    weights.push_back(u.weight_share);
  }
  for (const std::string& peer : touched) Seal(round, &mail_[peer][round]);
  if (preview) {
    // The model alone.
  } else if (!distance_sq_.empty()) {
    double sum_sq = 0;
    for (const auto& [c, d] : distance_sq_) sum_sq += d;
    out.consensus_distance = std::sqrt(sum_sq / static_cast<double>(distance_sq_.size()));
  } else if (full.size() >= 2) {
    std::vector<std::span<const float>> views(full.begin(), full.end());
    out.consensus_distance = core::ConsensusDistance(views, weights);
  }
  out.model.assign(reference.begin(), reference.end());
  if (wsum > 0) {
    for (size_t i = 0; i < dim_; ++i) out.model[i] = static_cast<float>(sum[i] / wsum);
  }
  return out;
}

void SgpDriver::DecorateRoundStart(const std::string& client, protos::RoundStart* start) {
  protos::SgpRound* s = start->mutable_sgp();
  absl::MutexLock lock(&mu_);
  s->set_share(peer_.count(client) ? 0.5 : 1.0);
  s->set_reference(reference_);
  s->set_overlap(overlap_ ? 1 : 0);
  if (auto it = mail_.find(client); it != mail_.end()) {
    for (const auto& [round, mail] : it->second) s->add_inbox_rounds(round);
  }
}

absl::StatusOr<std::shared_ptr<const ModelBlob>> SgpDriver::Blob(const std::string& client,
                                                                 const std::string& name,
                                                                 uint64_t version) {
  if (name != "inbox") return RoundDriver::Blob(client, name, version);
  auto blob = Inbox(client, version);
  if (!blob) return absl::NotFoundError(StrCat("inbox ", version, " is not served to ", client));
  return blob;
}

void SgpDriver::ObserveChunk(const std::string& client, const coordinator::ChunkIn& chunk) {
  if (chunk.share) InboxApplied(client, chunk.share->inbox_applied);
}

absl::Status SgpDriver::RunRound(coordinator::RoundHost& host,
                                 const std::vector<std::string>& participants,
                                 Clock::time_point deadline, coordinator::CommitResult* commit,
                                 RoundReport* report) {
  coordinator::RoundEngine& engine = host.engine();
  const uint64_t round = engine.current_round();
  BeginRound(round, participants);
  // A sender that vanishes is not waited for: the round closes without its share.
  std::set<std::string> waiting = Senders();
  auto collector = std::make_shared<PushSumCollector>();
  if (absl::Status st = host.StartRound(participants, deadline, collector, &waiting); !st.ok())
    return st;
  const auto opened = host.Now();
  host.WaitUntil(
      deadline, [&] { return engine.AllComplete(); },
      [&] {
        const std::set<std::string> gone = host.Vanished(waiting, opened);
        if (gone.empty()) return;
        for (const std::string& c : gone) waiting.erase(c);
        engine.SetUploaders(waiting);
        log::Warning("coordinator", "round %llu: %zu SGP sender(s) gone",
                     static_cast<unsigned long long>(round), gone.size());
      });
  if (host.stopped()) return absl::OkStatus();
  report->hit_deadline = !engine.AllComplete();
  // Shares go to receivers seen in the last 3 s; the others' senders keep theirs.
  std::set<std::string> live(participants.begin(), participants.end());
  for (const std::string& c : host.Vanished(live, opened)) live.erase(c);
  // Shares far from the served model are withheld (their senders keep them: push-sum's
  // mass stays whole); the model guard may withhold more, and quarantines those.
  const Shares shares = collector->Shares();
  // What clients downloaded as the round's model (their shares are relative to it).
  const std::vector<float> served = host.ServedModel();
  const std::map<std::string, double> deviations = Deviations(shares, served);
  std::set<std::string> withheld;
  double bound = 0;
  if (robust_.clip > 0 && !deviations.empty()) {
    std::vector<double> d;
    for (const auto& [c, x] : deviations) d.push_back(x);
    bound = robust_.clip * coordinator::LowerMedian(d);
    for (const auto& [c, x] : deviations) {
      if (x > bound) withheld.insert(c);
    }
  }
  report->figures["clip_bound"] = bound;
  report->figures["clipped"] = static_cast<double>(withheld.size());
  report->per_client["update_norm"] = deviations;
  std::vector<std::string> suspects;
  for (const std::string& c : coordinator::ByNormDescending(deviations)) {
    if (!withheld.count(c)) suspects.push_back(c);
  }
  auto choice = coordinator::ChooseUnderGuard(
      host, suspects, suspects.empty() ? 0 : (suspects.size() - 1) / 2,
      [&](const std::set<std::string>& excluded) -> absl::StatusOr<std::vector<float>> {
        std::set<std::string> out = withheld;
        out.insert(excluded.begin(), excluded.end());
        return Commit(round, shares, live, served, out, /*preview=*/true).model;
      },
      report);
  if (!choice.ok()) return choice.status();
  coordinator::QuarantineExcluded(host, round, *choice);
  Outcome out;
  if (choice->model.empty()) {
    out.model = served;  // nothing is delivered: every sender keeps its share
  } else {
    withheld.insert(choice->excluded.begin(), choice->excluded.end());
    out = Commit(round, shares, live, served, withheld);
  }
  auto committed = engine.CommitModel(std::move(out.model), out.delivered);
  if (!committed.ok()) return committed.status();
  *commit = *std::move(committed);
  report->figures["sgp_consensus_distance"] = out.consensus_distance;
  if (out.consensus_distance >= 0 && distance_gauge_ != nullptr) {
    distance_gauge_->Add({}).Set(out.consensus_distance);
  }
  return absl::OkStatus();
}

std::shared_ptr<const ModelBlob> SgpDriver::Inbox(const std::string& client, uint64_t round) const {
  absl::MutexLock lock(&mu_);
  auto it = mail_.find(client);
  if (it == mail_.end()) return nullptr;
  auto m = it->second.find(round);
  return m == it->second.end() ? nullptr : m->second.blob;
}

void SgpDriver::InboxApplied(const std::string& client, uint64_t round) {
  absl::MutexLock lock(&mu_);
  auto it = mail_.find(client);
  if (it == mail_.end()) return;
  it->second.erase(it->second.begin(), it->second.upper_bound(round));
  if (it->second.empty()) mail_.erase(it);
}

absl::Status SgpDriver::AcceptReport(const std::string& client,
                                     const protos::ProgressReport& report) {
  if (!report.has_sgp()) {
    return absl::InvalidArgumentError(
        StrCat("report of ", client, ": an SGP job's report carries SgpProgress"));
  }
  const double d = report.sgp().distance_sq();
  if (std::isnan(d) || std::isinf(d)) {
    return codecs::NonFiniteError(StrCat("report of ", client, ": distance ", d));
  }
  InboxApplied(client, report.sgp().inbox_applied());
  absl::MutexLock lock(&mu_);
  if (d >= 0 && report.round() == round_ &&
      std::find(participants_.begin(), participants_.end(), client) != participants_.end()) {
    distance_sq_[client] = d;
  }
  return absl::OkStatus();
}

std::pair<std::vector<double>, double> SgpDriver::MailTotals() const {
  absl::MutexLock lock(&mu_);
  std::vector<double> x(dim_, 0.0);
  double w = 0;
  for (const auto& [client, box] : mail_) {
    for (const auto& [round, mail] : box) {
      for (size_t i = 0; i < dim_; ++i) x[i] += mail.x[i];
      w += mail.w;
    }
  }
  return {std::move(x), w};
}

absl::Status SgpDriver::Save(uint64_t round) {
  absl::MutexLock lock(&mu_);
  std::vector<SgpMailView> views;
  for (const auto& [client, box] : mail_) {
    for (const auto& [r, mail] : box) views.push_back({client, r, mail.w, mail.x});
  }
  return SaveSgpState(state_dir_, round, views);
}

absl::Status SgpDriver::Load(uint64_t round) {
  auto loaded = LoadSgpState(state_dir_, round, dim_);
  if (!loaded.ok()) return loaded.status();
  absl::MutexLock lock(&mu_);
  for (SgpMail& m : *loaded) {
    Mail mail;
    mail.w = m.w;
    mail.x = std::move(m.x);
    Seal(m.round, &mail);
    mail_[m.client][m.round] = std::move(mail);
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::modes
