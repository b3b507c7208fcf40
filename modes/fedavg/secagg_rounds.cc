// Secure aggregation rounds at the coordinator (see secagg_rounds.h).
#include "modes/fedavg/secagg_rounds.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "base/log.h"
#include "base/spec.h"
#include "base/str.h"
#include "codecs/rng.h"
#include "codecs/round_kind.h"
#include "codecs/terngrad.h"
#include "codecs/zmod_frame.h"
#include "modes/fedavg/guarded_commit.h"
#include "modes/fedavg/secagg_collector.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {
namespace {

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError(StrCat(
      "--secagg: ", what,
      " (secagg(clip=C, quantile=Q, neighbours=K, threshold=F, kappa=A, margin=M, masks=0|1): "
      "clip > 0, quantile in (0, 1), neighbours >= 0, threshold in [0.5, 1), kappa > 0, "
      "margin in [0, 8])"));
}

// Phases end at these shares of the round's time at the latest.
constexpr double kKeysShare = 0.1, kSharesShare = 0.2, kInputShare = 0.8;

// `share` of the way from `from` to `to`.
coordinator::Clock::time_point Between(coordinator::Clock::time_point from,
                                       coordinator::Clock::time_point to, double share) {
  return from + std::chrono::duration_cast<coordinator::Clock::duration>((to - from) * share);
}

double Seconds(coordinator::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

privacy::Key32 KeyOf(const std::string& bytes) {
  privacy::Key32 k{};
  std::memcpy(k.data(), bytes.data(), std::min(bytes.size(), k.size()));
  return k;
}
std::string BytesOf(const privacy::Key32& k) {
  return std::string(reinterpret_cast<const char*>(k.data()), k.size());
}

}  // namespace

double SecAggRounds::QuantileClip(std::span<const int64_t> histogram, double clip) const {
  int64_t total = 0;
  for (int64_t c : histogram) total += std::max<int64_t>(c, 0);
  if (total == 0) return clip;
  int64_t below = 0;
  for (size_t b = 0; b < histogram.size(); ++b) {
    below += std::max<int64_t>(histogram[b], 0);
    if (static_cast<double>(below) >= options_.quantile * static_cast<double>(total)) {
      return codecs::SumCode::NormBinTop(static_cast<int>(b));
    }
  }
  return clip;
}

absl::StatusOr<std::optional<SecAggOptions>> ParseSecAgg(const std::string& spec) {
  if (spec.empty() || spec == "none") return std::nullopt;
  auto node = ParseSpec(spec);
  if (!node.ok()) return Bad(std::string(node.status().message()));
  if (node->name != "secagg") return Bad(StrCat("unknown scheme ", node->name));
  SecAggOptions o;
  std::set<std::string> seen;
  for (const SpecArg& a : node->args) {
    if (a.key.empty() || !a.is_number) return Bad("secagg(...) takes named numbers");
    if (!seen.insert(a.key).second) return Bad(StrCat(a.key, "= given twice"));
    const double v = a.number;
    const bool whole = v == std::floor(v);
    if (a.key == "clip") {
      o.clip = v;
    } else if (a.key == "neighbours") {
      if (!whole || v < 0 || v > 254 || v == 1) {
        return Bad("neighbours= must be 0 (the default) or a whole number in [2, 254]");
      }
      o.degree = static_cast<int>(v);
    } else if (a.key == "quantile") {
      if (!(v > 0 && v < 1)) return Bad("quantile= must be in (0, 1)");
      o.quantile = v;
    } else if (a.key == "threshold") {
      o.threshold = v;
    } else if (a.key == "kappa") {
      o.kappa = v;
    } else if (a.key == "margin") {
      if (!whole || v < 0 || v > 8) return Bad("margin= must be a whole number in [0, 8]");
      o.margin = static_cast<int>(v);
    } else if (a.key == "masks") {
      if (v != 0 && v != 1) return Bad("masks= is 0 or 1");
      o.masks = v == 1;
    } else {
      return Bad(StrCat("secagg(...) has no argument ", a.key));
    }
  }
  if (!(o.clip > 0) || !std::isfinite(o.clip)) return Bad("clip= must be a number > 0");
  if (!(o.threshold >= 0.5 && o.threshold < 1)) return Bad("threshold= must be in [0.5, 1)");
  if (!(o.kappa > 0) || !std::isfinite(o.kappa)) return Bad("kappa= must be a number > 0");
  return std::optional<SecAggOptions>(o);
}

absl::StatusOr<std::unique_ptr<SecAggRounds>> SecAggRounds::Create(const SecAggOptions& options,
                                                                   const std::string& spec,
                                                                   uint64_t dim) {
  const codecs::RoundKind kind = codecs::RoundKindOf(spec);
  const absl::StatusOr<int>& levels = kind.sum_levels;
  if (!levels.ok()) return levels.status();
  auto kept = kind.SumKept(dim);
  if (!kept.ok()) return kept.status();
  // The grid every round builds, checked once.
  if (absl::Status st =
          codecs::SumCode::Create(dim, *levels, options.clip, options.kappa, 1).status();
      !st.ok()) {
    return st;
  }
  const int bits = codecs::SumCode::SumBits(*levels, 1 << 20) + options.margin;
  if (bits > codecs::kMaxZmodBits) {
    return Bad(StrCat(*levels, " levels and margin ", options.margin, " leave no room for sums of ",
                      "a million codes in ", codecs::kMaxZmodBits, " bits"));
  }
  return std::unique_ptr<SecAggRounds>(new SecAggRounds(options, *levels, dim, *kept));
}

void SecAggRounds::FailLocked(const absl::Status& why) {
  phase_ = Phase::kFailed;
  failed_ = std::string(why.message());
}

void SecAggRounds::FillKeysLocked(const std::string& client, protos::SecAggKeys* k) const {
  k->set_round(round_);
  k->set_threshold(static_cast<uint32_t>(server_->threshold()));
  for (const privacy::Peer& p : server_->PeersOf(client)) {
    auto* peer = k->add_peers();
    peer->set_client_id(p.id);
    peer->set_enc_key(BytesOf(p.keys.enc));
    peer->set_mask_key(BytesOf(p.keys.mask));
  }
  if (const auto own = server_->KeysOf(client)) {
    k->mutable_own()->set_client_id(client);
    k->mutable_own()->set_enc_key(BytesOf(own->enc));
    k->mutable_own()->set_mask_key(BytesOf(own->mask));
  }
}

void SecAggRounds::FillSharesLocked(const std::string& client, protos::SecAggShares* s) const {
  s->set_round(round_);
  for (const privacy::Box& b : server_->BoxesFor(client)) {
    auto* box = s->add_boxes();
    box->set_peer(b.peer);
    box->set_box(b.bytes);
    box->set_point(b.point);
  }
}

void SecAggRounds::FillUnmaskLocked(const std::string& client, protos::SecAggUnmask* u) const {
  const auto [survivors, dropped] = server_->RequestFor(client);
  u->set_round(round_);
  for (const std::string& v : survivors) u->add_survivors(v);
  for (const std::string& d : dropped) u->add_dropped(d);
}

void SecAggRounds::Advance(coordinator::RoundHost& host) {
  std::set<std::string> watched;
  coordinator::Clock::time_point since;
  {
    absl::MutexLock lock(&mu_);
    watched = participants_;
    since = opened_;
  }
  // Outside the lock: the host's own locks are taken before this one (WaitUntil's `done`).
  const std::set<std::string> gone = host.Vanished(watched, since);
  std::vector<std::pair<std::string, protos::ServerEvent>> out;
  {
    absl::MutexLock lock(&mu_);
    if (!server_) return;
    const auto now = host.Now();
    gone_ = gone;
    if (phase_ == Phase::kKeys &&
        (server_->KeysIn(gone_) || now >= Between(opened_, deadline_, kKeysShare))) {
      if (absl::Status st = server_->CloseKeys(); !st.ok()) return FailLocked(st);
      for (const std::string& c : server_->keyed()) {
        protos::ServerEvent e;
        FillKeysLocked(c, e.mutable_mode()->mutable_secagg_keys());
        out.emplace_back(c, std::move(e));
      }
      phase_ = Phase::kShares;
      keys_closed_ = now;
    } else if (phase_ == Phase::kShares &&
               (server_->SharesIn(gone_) || now >= Between(opened_, deadline_, kSharesShare))) {
      if (absl::Status st = server_->CloseShares(); !st.ok()) return FailLocked(st);
      collector_->AllowOnly(server_->shared());
      for (const std::string& c : server_->shared()) {
        protos::ServerEvent e;
        FillSharesLocked(c, e.mutable_mode()->mutable_secagg_shares());
        out.emplace_back(c, std::move(e));
      }
      phase_ = Phase::kMasked;
      shares_closed_ = now;
    }
  }
  // Outside the lock: a RoundStart made meanwhile (Decorate) carries the same.
  for (const auto& [client, event] : out) host.Push(client, event);
}

void SecAggRounds::UseNoise(double sum_variance,
                            std::function<void(size_t inputs, size_t asked)> on_sum) {
  sum_variance_ = sum_variance;
  on_sum_ = std::move(on_sum);
}

absl::StatusOr<SecAggRounds::Opened> SecAggRounds::Open(
    coordinator::RoundHost& host, const std::vector<std::string>& participants,
    coordinator::Clock::time_point deadline) {
  coordinator::RoundEngine& engine = host.engine();
  const uint64_t round = engine.current_round();
  const uint64_t seed = engine.terms().SharedSeed(round);
  double clip;
  {
    absl::MutexLock lock(&mu_);
    clip = clip_;
  }
  auto code = codecs::SumCode::Create(dim_, levels_, clip, options_.kappa, seed, kept_);
  if (!code.ok()) return code.status();
  const uint64_t bins = options_.quantile > 0 ? codecs::SumCode::kNormBins : 0;
  const size_t n = std::max<size_t>(participants.size(), 1);
  // The codes' sum, and 6 standard deviations of the noise on it.
  int sum_bits = codecs::SumCode::SumBits(levels_, n) + options_.margin;
  if (sum_variance_ > 0) {
    const double span = 2 * (static_cast<double>(n) * levels_ + 6 * std::sqrt(sum_variance_)) + 1;
    sum_bits = static_cast<int>(std::ceil(std::log2(span))) + options_.margin;
  }
  if (sum_bits > codecs::kMaxZmodBits) {
    return absl::InvalidArgumentError(StrCat("secure aggregation: sums of ", n, " codes of ",
                                             levels_, " levels with their noise need ", sum_bits,
                                             " bits, past ", codecs::kMaxZmodBits));
  }
  const int width = options_.masks ? sum_bits : code->code_bits();
  auto collector = std::make_shared<ZmodSumCollector>(code->code_size() + bins, width, sum_bits,
                                                      options_.masks ? 0 : levels_);
  {
    absl::MutexLock lock(&mu_);
    round_ = round;
    rotation_seed_ = seed;
    width_ = width;
    client_variance_ = sum_variance_ / static_cast<double>(n);
    opened_ = host.Now();
    deadline_ = deadline;
    participants_ = std::set<std::string>(participants.begin(), participants.end());
    gone_.clear();
    failed_.clear();
    collector_ = collector;
    server_.reset();
    phase_ = Phase::kMasked;
    if (options_.masks) {
      server_ = std::make_unique<privacy::SecAggServer>(
          privacy::RoundContext(round, seed), participants_, options_.degree, options_.threshold,
          codecs::Mix64(seed ^ 0x5ECA66), sum_bits);
      collector->AllowOnly(std::set<std::string>());
      phase_ = Phase::kKeys;
    }
  }
  if (absl::Status st = host.StartRound(participants, deadline, collector); !st.ok()) {
    Close();
    return st;
  }
  return Opened{round, *std::move(code), std::move(collector), sum_bits, bins};
}

void SecAggRounds::Close() {
  absl::MutexLock lock(&mu_);
  phase_ = Phase::kNone;
  server_.reset();
  collector_.reset();
  round_ = 0;
}

absl::Status SecAggRounds::GatherInputs(coordinator::RoundHost& host,
                                        coordinator::Clock::time_point deadline,
                                        const ZmodSumCollector& collector) {
  const auto input_end = options_.masks ? Between(host.Now(), deadline, kInputShare) : deadline;
  host.WaitUntil(
      input_end,
      [&] {
        absl::MutexLock lock(&mu_);
        if (phase_ == Phase::kFailed) return true;
        if (phase_ != Phase::kMasked) return false;
        const std::set<std::string> whole = collector.Complete();
        const std::set<std::string>& senders = server_ ? server_->shared() : participants_;
        for (const std::string& c : senders) {
          if (!whole.count(c) && !gone_.count(c)) return false;
        }
        return true;
      },
      [&] { Advance(host); });
  absl::MutexLock lock(&mu_);
  if (phase_ == Phase::kFailed) return absl::FailedPreconditionError(failed_);
  if (phase_ != Phase::kMasked) {
    return absl::DeadlineExceededError("the round's keys or shares never closed");
  }
  if (!options_.masks && collector.Complete().empty()) {
    return absl::FailedPreconditionError("no whole update arrived");
  }
  return absl::OkStatus();
}

std::set<std::string> SecAggRounds::ReportPhases(const ZmodSumCollector& collector,
                                                 RoundReport* report) const {
  absl::MutexLock lock(&mu_);
  if (!server_) return collector.Complete();
  report->figures["secagg_keys_s"] = Seconds(keys_closed_ - opened_);
  report->figures["secagg_shares_s"] = Seconds(shares_closed_ - keys_closed_);
  report->figures["secagg_keyed"] = static_cast<double>(server_->keyed().size());
  report->figures["secagg_shared"] = static_cast<double>(server_->shared().size());
  report->figures["secagg_degree"] = server_->degree();
  report->figures["secagg_threshold"] = server_->threshold();
  report->figures["secagg_dropped"] =
      static_cast<double>(server_->shared().size() - server_->masked().size());
  return server_->masked();
}

absl::Status SecAggRounds::RunRound(coordinator::RoundHost& host,
                                    const std::vector<std::string>& participants,
                                    coordinator::Clock::time_point deadline,
                                    const coordinator::ServerOptimizer& optimizer,
                                    coordinator::CommitResult* commit, RoundReport* report) {
  auto opened = Open(host, participants, deadline);
  if (!opened.ok()) return opened.status();
  report->figures["secagg_width_bits"] = options_.masks ? opened->sum_bits : opened->code.code_bits();
  report->figures["clip_bound"] = opened->code.clip();
  absl::Status inputs = GatherInputs(host, deadline, *opened->collector);
  if (host.stopped()) {
    Close();
    return absl::OkStatus();
  }
  coordinator::RoundEngine& engine = host.engine();
  engine.Freeze();
  std::vector<uint64_t> sum = opened->collector->Sum();
  if (inputs.ok() && options_.masks) inputs = Unmask(host, deadline, &sum, report);
  if (inputs.ok() && on_sum_) {
    // The noised sum exists from here: whatever the guard says of it, it was released.
    on_sum_(ReportPhases(*opened->collector, report).size(), participants.size());
  }
  const std::set<std::string> counted = ReportPhases(*opened->collector, report);
  report->figures["secagg_masked"] = static_cast<double>(inputs.ok() ? counted.size() : 0);
  Close();
  report->hit_deadline = !engine.AllComplete();
  if (!inputs.ok()) {
    log::Warning("coordinator", "round %llu: secure aggregation: %s: the round counts nothing",
                 static_cast<unsigned long long>(opened->round),
                 std::string(inputs.message()).c_str());
    report->labels["secagg_failed"] = std::string(inputs.message());
    coordinator::GuardedChoice none;
    none.first.detail = report->labels["secagg_failed"];
    return CommitGuarded(engine, opened->round, none, {}, optimizer, nullptr, commit);
  }
  return CommitSum(host, *opened, sum, counted, optimizer, commit, report);
}

absl::Status SecAggRounds::CommitSum(coordinator::RoundHost& host, const Opened& opened,
                                     std::span<const uint64_t> sum,
                                     const std::set<std::string>& counted,
                                     const coordinator::ServerOptimizer& optimizer,
                                     coordinator::CommitResult* commit, RoundReport* report) {
  coordinator::RoundEngine& engine = host.engine();
  std::vector<int64_t> signed_sum(sum.size());
  for (size_t i = 0; i < sum.size(); ++i) signed_sum[i] = SignExtend(sum[i], opened.sum_bits);
  std::vector<float> mean(dim_);
  const size_t words = opened.code.code_size();
  if (absl::Status st = opened.code.DecodeSum(std::span<const int64_t>(signed_sum).first(words),
                                              static_cast<double>(counted.size()), mean);
      !st.ok()) {
    return st;
  }
  if (opened.bins > 0) {
    // Each input adds a single 1: a histogram that says otherwise was lied into (one
    // input's words can hold anything), and the clip stays.
    const std::span<const int64_t> histogram = std::span<const int64_t>(signed_sum).subspan(words);
    int64_t total = 0;
    bool valid = true;
    for (int64_t c : histogram) {
      valid &= c >= 0 && c <= static_cast<int64_t>(counted.size());
      total += c;
    }
    valid &= total == static_cast<int64_t>(counted.size());
    if (!valid) report->labels["secagg_histogram_refused"] = "its counts are not one per input";
    const double next = valid ? QuantileClip(histogram, opened.code.clip()) : opened.code.clip();
    report->figures["secagg_next_clip"] = next;
    absl::MutexLock lock(&mu_);
    clip_ = next;
  }
  // A sum cannot leave one client out: the guard judges the round as it is.
  auto choice = coordinator::ChooseUnderGuard(
      host, {}, 0, [&](const std::set<std::string>&) { return engine.Preview(mean, optimizer); },
      report);
  if (!choice.ok()) return choice.status();
  return CommitGuarded(engine, opened.round, *choice, mean, optimizer, &counted, commit);
}

absl::Status SecAggRounds::Unmask(coordinator::RoundHost& host,
                                  coordinator::Clock::time_point deadline,
                                  std::vector<uint64_t>* sum, RoundReport* report) {
  std::vector<std::pair<std::string, protos::ServerEvent>> out;
  {
    absl::MutexLock lock(&mu_);
    report->figures["secagg_input_s"] = Seconds(host.Now() - shares_closed_);
    if (absl::Status st = server_->BeginUnmask(collector_->Complete()); !st.ok()) return st;
    for (const std::string& c : server_->masked()) {
      protos::ServerEvent e;
      FillUnmaskLocked(c, e.mutable_mode()->mutable_secagg_unmask());
      out.emplace_back(c, std::move(e));
    }
    phase_ = Phase::kUnmask;
  }
  const auto asked = host.Now();
  for (const auto& [client, event] : out) host.Push(client, event);
  host.WaitUntil(deadline, [&] {
    absl::MutexLock lock(&mu_);
    return server_->CanFinish();
  });
  if (host.stopped()) return absl::CancelledError("the coordinator stops");
  report->figures["secagg_reveal_s"] = Seconds(host.Now() - asked);
  const auto t0 = std::chrono::steady_clock::now();
  // The masks come off without the lock (an AES stream over the code for every seed and
  // every dropped client's surviving peer): a RoundStart made meanwhile (Decorate) and a
  // late report (Accept) find no server and wait for nothing.
  std::unique_ptr<privacy::SecAggServer> server;
  {
    absl::MutexLock lock(&mu_);
    server = std::move(server_);
  }
  auto done = server->Finish(*sum);
  const std::set<std::string> proven = server->proven_liars();
  {
    absl::MutexLock lock(&mu_);
    server_ = std::move(server);
  }
  report->figures["secagg_unmask_s"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report->figures["secagg_liars"] = static_cast<double>(proven.size());
  if (done.ok()) {
    // A share off a secret that checked out: its holder lied or its dealer dealt it so;
    // left out, said, and nobody quarantined for it.
    report->figures["secagg_off_shares"] = static_cast<double>(done->off.size());
    for (const std::string& c : done->off) report->per_client["secagg_off_share"][c] = 1;
  }
  if (!proven.empty()) {
    host.Quarantine(proven,
                    "dealt secure aggregation shares of a secret its own commitment refutes");
  }
  return done.status();
}

absl::Status SecAggRounds::Accept(const std::string& client, const protos::ProgressReport& report) {
  if (!report.has_fedavg() ||
      report.fedavg().secagg_case() == protos::FedAvgProgress::SECAGG_NOT_SET) {
    return absl::InvalidArgumentError(
        StrCat("report of ", client, ": a secure aggregation round takes its phases' messages"));
  }
  absl::MutexLock lock(&mu_);
  if (report.round() != round_ || round_ == 0 || !server_) {
    return absl::FailedPreconditionError(
        StrCat("round ", report.round(), " takes no secure aggregation message now"));
  }
  const protos::FedAvgProgress& f = report.fedavg();
  switch (f.secagg_case()) {
    case protos::FedAvgProgress::kSecaggKeys: {
      if (f.secagg_keys().enc_key().size() != 32 || f.secagg_keys().mask_key().size() != 32) {
        return absl::InvalidArgumentError("secure aggregation: public keys are 32 bytes each");
      }
      return server_->AddKeys(client, {KeyOf(f.secagg_keys().enc_key()),
                                       KeyOf(f.secagg_keys().mask_key())});
    }
    case protos::FedAvgProgress::kSecaggShares: {
      if (f.secagg_shares().commitment().size() != 32) {
        return absl::InvalidArgumentError("secure aggregation: a commitment is 32 bytes");
      }
      std::vector<privacy::Box> boxes;
      for (const protos::SecAggBox& b : f.secagg_shares().boxes()) boxes.push_back({b.peer(), b.box()});
      return server_->AddShares(client, std::move(boxes), KeyOf(f.secagg_shares().commitment()));
    }
    case protos::FedAvgProgress::kSecaggReveal: {
      std::vector<privacy::Reveal> reveals;
      for (const protos::SecAggReveal& r : f.secagg_reveal().reveals()) {
        if (r.x() == 0 || r.x() > 255) {
          return absl::InvalidArgumentError("secure aggregation: a share's point is in [1, 255]");
        }
        reveals.push_back({r.peer(), r.key(),
                           {static_cast<uint8_t>(r.x()), {r.y().begin(), r.y().end()}}});
      }
      return server_->AddReveals(client, reveals);
    }
    default:
      break;
  }
  return absl::InvalidArgumentError("secure aggregation: an unknown message");
}

void SecAggRounds::Decorate(const std::string& client, protos::RoundStart* start) {
  absl::MutexLock lock(&mu_);
  if (start->round() != round_ || round_ == 0) return;
  auto* s = start->mutable_fedavg()->mutable_secagg();
  s->set_levels(static_cast<uint32_t>(levels_));
  s->set_clip(clip_);
  s->set_norm_bins(options_.quantile > 0 ? codecs::SumCode::kNormBins : 0);
  s->set_noise_variance(client_variance_);
  s->set_kept(kept_ == dim_ ? 0 : kept_);
  s->set_kappa(options_.kappa);
  s->set_rotation_seed(rotation_seed_);
  s->set_width(static_cast<uint32_t>(width_));
  s->set_masks(options_.masks);
  if (!server_ || phase_ == Phase::kKeys || phase_ == Phase::kFailed) return;
  if (server_->keyed().count(client)) FillKeysLocked(client, s->mutable_keys());
  if (phase_ == Phase::kShares || !server_->shared().count(client)) return;
  FillSharesLocked(client, s->mutable_shares());
  if (phase_ != Phase::kUnmask || !server_->masked().count(client)) return;
  FillUnmaskLocked(client, s->mutable_unmask());
}

}  // namespace fedlgc::modes
