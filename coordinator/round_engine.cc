// Round engine (see round_engine.h).
#include "coordinator/round_engine.h"

#include <algorithm>
#include <cstring>

#include "base/crc32c.h"
#include "base/str.h"

namespace fedlgc::coordinator {
namespace {

// A participant of `r` as asked now: the model `version`, the deadline and its codec
// (the codec ladder's, or the round's).
AskedParticipant Ask(const RoundTerms& terms, const LiveRound& r, const std::string& client,
                     uint64_t version, Clock::time_point now, Clock::time_point deadline) {
  AskedParticipant a{r.number, version, now, deadline};
  a.codec = terms.CodecOf(r.codec.spec, client, deadline - now);
  return a;
}

}  // namespace

std::map<std::string, double> CappedWeights(const std::map<std::string, uint64_t>& samples,
                                            double cap) {
  std::map<std::string, double> w;
  std::vector<double> v;
  for (const auto& [client, n] : samples) {
    w[client] = static_cast<double>(n);
    if (n > 0) v.push_back(static_cast<double>(n));
  }
  const size_t n = v.size();
  if (!(cap < 1)) return w;
  if (static_cast<double>(n) * cap <= 1) {
    for (auto& [client, x] : w) x = x > 0 ? 1.0 : 0.0;
    return w;
  }
  std::sort(v.begin(), v.end());
  double total = 0;
  for (double x : v) total += x;
  if (v.back() <= cap * total) return w;  // nobody holds more than the cap
  // With the k largest lowered to t: t = cap (S + k t), S the sum of the others, so
  // t = cap S / (1 - k cap), valid when it lies between the k-th largest and the next.
  double rest = total;
  for (size_t k = 1; k < n && k * cap < 1; ++k) {
    rest -= v[n - k];
    const double t = cap * rest / (1 - static_cast<double>(k) * cap);
    if (t >= v[n - k - 1] && t <= v[n - k]) {
      for (auto& [client, x] : w) x = std::min(x, t);
      return w;
    }
  }
  return w;  // cannot happen when n * cap > 1
}

std::shared_ptr<const ModelBlob> MakeBlob(uint64_t version, std::string bytes) {
  auto blob = std::make_shared<ModelBlob>();
  blob->version = version;
  blob->bytes = std::move(bytes);
  blob->crc32c = Crc32c(blob->bytes.data(), blob->bytes.size());
  return blob;
}

RoundEngine::RoundEngine(EngineOptions options, EngineState state)
    : options_(std::move(options)),
      dim_(state.model.size()),
      terms_(std::make_unique<RoundTerms>(options_.plan, options_.max_client_weight, options_.seed,
                                          options_.codec_chooser, &options_.layout)),
      roster_(std::make_unique<Roster>(std::move(state.clients), std::move(state.quarantined))),
      state_(std::move(state)) {
  absl::MutexLock lock(&mu_);
  state_.clients.clear();  // moved to the roster
  state_.quarantined.clear();
  if (state_.momentum.size() != state_.model.size())
    state_.momentum.assign(state_.model.size(), 0.0f);
  PublishModelLocked();
  published_receipts_ = state_.receipts;
}

void RoundEngine::PublishModelLocked() {
  if (blob_ != nullptr && options_.keep_versions > 0 && blob_->version != state_.model_version) {
    past_blobs_.push_back(blob_);
    // Only versions a participant still training was asked from may be downloaded.
    uint64_t oldest = state_.model_version;
    if (round_) {
      for (const auto& [client, a] : round_->asked) {
        if (!round_->Complete(client)) oldest = std::min(oldest, a.version);
      }
    }
    while (!past_blobs_.empty() &&
           (past_blobs_.size() > options_.keep_versions || past_blobs_.front()->version < oldest)) {
      past_blobs_.pop_front();
    }
  }
  blob_ = MakeBlob(
      state_.model_version,
      std::string(reinterpret_cast<const char*>(state_.model.data()), state_.model.size() * 4));
}

RoundFacts RoundEngine::FactsLocked(const std::string& client) const {
  RoundFacts f;
  f.dim = dim_;
  f.model_version = state_.model_version;
  f.registered_clients = roster_->size();
  f.decoder = round_ ? round_->codec.decoder : nullptr;
  if (round_) {
    f.keep = round_->codec.decoder_ref;
    // A codec ladder asked this client for a codec of its own.
    auto a = round_->asked.find(client);
    if (a != round_->asked.end() && a->second.codec != round_->codec.spec) {
      f.decoder = terms_->DecoderOf(a->second.codec);
    }
  }
  f.frame_limits = options_.frame_limits;
  return f;
}

absl::Status RoundEngine::OpenRound(const std::vector<std::string>& participants,
                                    Clock::time_point deadline,
                                    std::shared_ptr<Collector> collector, bool rolling) {
  absl::MutexLock lock(&mu_);
  if (round_) return absl::FailedPreconditionError(StrCat("round ", round_->number, " is open"));
  auto r = std::make_unique<LiveRound>();
  r->number = state_.next_round;
  r->rolling = rolling;
  r->participants.insert(participants.begin(), participants.end());
  r->uploaders = r->participants;
  r->collector = std::move(collector);
  const std::map<std::string, uint64_t> samples = roster_->SamplesOf(r->participants);
  // A rolling round's participants come and go: each update weighs its sample count, and
  // the driver caps the weights among the updates of each commit.
  r->weights = CappedWeights(samples, rolling ? 1.0 : options_.max_client_weight);
  r->opened = options_.clock->Now();
  r->deadline = deadline;
  r->codec = terms_->ForRound(r->number);
  for (const std::string& p : r->participants) {
    r->asked[p] = Ask(*terms_, *r, p, state_.model_version, r->opened, deadline);
  }
  round_ = std::move(r);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RoundEngine::AddParticipants(
    const std::vector<std::string>& clients, Clock::time_point deadline) {
  absl::MutexLock lock(&mu_);
  if (!round_ || !round_->rolling) {
    return absl::FailedPreconditionError("clients join only a rolling round that is open");
  }
  LiveRound& r = *round_;
  std::vector<std::string> added;
  const auto now = options_.clock->Now();
  for (const std::string& c : clients) {
    if (r.participants.count(c) || roster_->IsQuarantined(c)) continue;
    r.participants.insert(c);
    r.uploaders.insert(c);
    r.asked[c] = Ask(*terms_, r, c, state_.model_version, now, deadline);
    added.push_back(c);
  }
  const auto samples = roster_->SamplesOf(std::set<std::string>(added.begin(), added.end()));
  for (const auto& [c, n] : samples) r.weights[c] = static_cast<double>(n);
  return added;
}

void RoundEngine::Release(const std::set<std::string>& clients) {
  absl::MutexLock lock(&mu_);
  if (!round_ || !round_->rolling) return;
  LiveRound& r = *round_;
  for (const std::string& c : clients) {
    if (r.participants.count(c)) r.Drop(c);
  }
}

void RoundEngine::Settle(const std::set<std::string>& clients) {
  absl::MutexLock lock(&mu_);
  if (!round_ || !round_->rolling) return;
  round_->settling.clear();
  for (const std::string& c : clients) {
    if (round_->participants.count(c)) round_->settling.insert(c);
  }
}

std::map<std::string, RoundEngine::Asked> RoundEngine::Participants() const {
  absl::MutexLock lock(&mu_);
  if (!round_) return {};
  std::map<std::string, Asked> out = round_->asked;
  for (auto& [client, a] : out) a.complete = round_->Complete(client);
  return out;
}

std::optional<Clock::time_point> RoundEngine::AskedAt(const std::string& client) const {
  absl::MutexLock lock(&mu_);
  if (!round_) return std::nullopt;
  auto it = round_->asked.find(client);
  if (it == round_->asked.end()) return std::nullopt;
  return it->second.at;
}

absl::Status RoundEngine::Rebase(uint64_t round, std::vector<float> model,
                                 const RebaseOptions& options) {
  absl::MutexLock lock(&mu_);
  if (round_) return absl::FailedPreconditionError(StrCat("round ", round_->number, " is open"));
  if (options.from_version && *options.from_version != state_.model_version) {
    return absl::FailedPreconditionError(StrCat(
        "the model moved on from version ", *options.from_version, " to ", state_.model_version));
  }
  if (round < state_.next_round) {
    return absl::FailedPreconditionError(
        StrCat("round ", round, " is behind this coordinator's next round, ", state_.next_round));
  }
  if (model.size() != dim_) {
    return absl::InvalidArgumentError(
        StrCat("a model of ", model.size(), " values for a job of ", dim_));
  }
  state_.next_round = round;
  state_.model = std::move(model);
  state_.model_version += 1;
  if (!options.keep_momentum) std::fill(state_.momentum.begin(), state_.momentum.end(), 0.0f);
  if (options.statistics_round > 0) state_.statistics_round = options.statistics_round;
  PublishModelLocked();
  return absl::OkStatus();
}

void RoundEngine::SetUploaders(const std::set<std::string>& uploaders) {
  absl::MutexLock lock(&mu_);
  if (!round_) return;
  round_->uploaders.clear();
  for (const std::string& u : uploaders) {
    if (round_->participants.count(u)) round_->uploaders.insert(u);
  }
}

uint64_t RoundEngine::current_round() const {
  absl::MutexLock lock(&mu_);
  return round_ ? round_->number : state_.next_round;
}

std::optional<RoundInfo> RoundEngine::OpenRoundFor(const std::string& client_id) const {
  absl::MutexLock lock(&mu_);
  if (!round_ || round_->participants.count(client_id) == 0) return std::nullopt;
  RoundInfo info;
  info.round = round_->number;
  info.model_version = state_.model_version;
  info.deadline = round_->deadline;
  if (auto it = round_->asked.find(client_id); round_->rolling && it != round_->asked.end()) {
    info.round = it->second.round;
    info.model_version = it->second.version;
    info.deadline = it->second.deadline;
  }
  info.seed = terms_->ClientSeed(client_id, info.round);
  info.next_seed = terms_->ClientSeed(client_id, info.round + 1);
  info.codec = round_->codec.spec;
  if (auto it = round_->asked.find(client_id); it != round_->asked.end()) {
    info.codec = it->second.codec;
  }
  info.training = round_->codec.training;
  return info;
}

ChunkResult RoundEngine::AcceptChunk(const ChunkIn& chunk) {
  // Admit, with the lock: what needs the round. The weight is the round's, never the
  // chunk's claim.
  ChunkIn c = chunk;
  std::shared_ptr<Collector> collector;
  RoundFacts facts;
  {
    absl::MutexLock lock(&mu_);
    facts = FactsLocked(c.client_id);
    if (auto early = AdmitChunk(round_.get(), c, roster_->QuarantineReason(c.client_id),
                                options_.max_chunks_per_update, facts)) {
      return *std::move(early);
    }
    collector = round_->collector;
    c.weight = round_->weights.at(c.client_id);
  }
  // Decode, without it: parsing and decoding run concurrently.
  auto decoded = collector->Decode(c, facts);
  if (!decoded.ok()) return Refused(RejectStatus(decoded.status()));
  // Collect, with it again.
  absl::MutexLock lock(&mu_);
  return CollectLocked(c, *std::move(decoded));
}

ChunkResult RoundEngine::CollectLocked(const ChunkIn& c, DecodedChunk decoded) {
  if (!TakesChunk(round_.get(), c)) {
    return Refused(RejectReason::kWrongRound, absl::FailedPreconditionError(StrCat(
                                                  "round ", c.round, " closed while decoding")));
  }
  if (round_->participants.count(c.client_id) == 0) {
    // A rolling round let the client go while its chunk decoded: nothing of it is held
    // (its client restores the update when asked again).
    return Refused(RejectReason::kNotParticipant,
                   absl::FailedPreconditionError(StrCat(
                       "client ", c.client_id, " stopped being a participant while decoding")));
  }
  LiveRound& r = *round_;
  const bool replaces = r.collector->replaces_updates();
  auto [it, inserted] = r.updates.try_emplace(c.client_id);
  UpdateChunks& u = it->second;
  const bool renewed = !inserted && replaces && u.update_id != c.update_id;
  if (!inserted && !renewed && (u.update_id != c.update_id || u.chunk_count != c.chunk_count)) {
    return Refused(RejectReason::kUpdateConflict,
                   absl::FailedPreconditionError("a different update arrived concurrently"));
  }
  if (!inserted && !renewed) {
    // Another chunk of this update may have been collected since this one was admitted:
    // what the collector checks against the update (an SGP share's weight) is checked again.
    const HeldUpdate held{u.update_id, u.chunk_count, u.held_count};
    if (auto no = r.collector->Admit(c, &held, FactsLocked(c.client_id))) return Refused(*no);
  }
  if (inserted || renewed) {
    u = UpdateChunks();
    u.update_id = c.update_id;
    u.chunk_count = c.chunk_count;
    u.held.assign(c.chunk_count, false);
  }
  ChunkResult res;
  if (u.held[c.chunk_index]) {
    res.duplicate = true;
    res.reason = RejectReason::kDuplicate;
    res.held = u.HeldList();
    return res;
  }
  // Each coordinate counts at most once in an update, whatever the chunk index.
  const uint64_t begin = decoded.begin, end = decoded.begin + decoded.coordinates;
  if (auto overlap = u.Overlap(c.part, begin, end)) {
    return Refused(RejectReason::kOverlap, absl::InvalidArgumentError(StrCat(
                                               "chunk ", c.chunk_index, " covers [", begin, ", ",
                                               end, "), which overlaps [", overlap->first, ", ",
                                               overlap->second, ") of this update")));
  }
  if (end > begin) u.ranges[{c.part, begin}] = end;
  u.held[c.chunk_index] = true;
  ++u.held_count;
  // A replacing update's bytes travelled again, but the model it stands for counts once.
  res.coordinates = renewed ? 0 : decoded.coordinates;
  r.collector->Collect(c, std::move(decoded), inserted || renewed, u.held_count == u.chunk_count,
                       FactsLocked(c.client_id));
  res.held = u.HeldList();
  // The metric label: the plan's spec (not a round's seeded one), or the client's own
  // under a codec ladder.
  auto asked = r.asked.find(c.client_id);
  res.codec = terms_->MetricLabel(c.round, asked != r.asked.end() ? asked->second.codec : "");
  return res;
}

bool RoundEngine::AllComplete() const {
  absl::MutexLock lock(&mu_);
  if (!round_) return false;
  for (const std::string& p : round_->uploaders) {
    auto it = round_->updates.find(p);
    if (it == round_->updates.end() || it->second.held_count != it->second.chunk_count)
      return false;
  }
  return true;
}

void RoundEngine::Freeze() {
  absl::MutexLock lock(&mu_);
  if (round_) round_->frozen = true;
}

absl::StatusOr<CommitResult> RoundEngine::CommitDelta(std::span<const float> delta,
                                                      const ServerOptimizer& optimizer,
                                                      const std::set<std::string>* counted) {
  absl::MutexLock lock(&mu_);
  if (absl::Status st = CheckCommittable(round_.get(), delta.size(), dim_); !st.ok()) return st;
  return CloseLocked(delta, optimizer, counted, nullptr);
}

absl::StatusOr<CommitResult> RoundEngine::CommitModel(std::vector<float> model,
                                                      const std::set<std::string>& counted) {
  absl::MutexLock lock(&mu_);
  if (absl::Status st = CheckCommittable(round_.get(), model.size(), dim_); !st.ok()) return st;
  return CloseLocked({}, ServerOptimizer(), &counted, &model);
}

CommitResult RoundEngine::CloseLocked(std::span<const float> delta,
                                      const ServerOptimizer& optimizer,
                                      const std::set<std::string>* counted,
                                      std::vector<float>* set) {
  CommitResult res;
  LiveRound& r = *round_;
  res.round = r.number;
  if (set != nullptr) {
    state_.model = std::move(*set);
  } else {
    // Server SGD with momentum.
    for (size_t i = 0; i < state_.model.size(); ++i) {
      state_.momentum[i] = optimizer.momentum * state_.momentum[i] + delta[i];
      state_.model[i] += optimizer.lr * state_.momentum[i];
    }
  }
  state_.model_version += 1;
  // A rolling round settles the updates chosen for this commit; the others go on.
  const std::set<std::string> settled = r.rolling ? r.settling : r.participants;
  for (const std::string& p : settled) {
    Receipt rc;
    rc.round = r.AskedRound(p);
    rc.version = state_.model_version;
    auto it = r.updates.find(p);
    if (it != r.updates.end()) {
      rc.update_id = it->second.update_id;
      rc.chunk_count = it->second.chunk_count;
      if (counted == nullptr || counted->count(p)) rc.counted = it->second.HeldList();
      if (!rc.counted.empty()) ++res.participants;
      if (it->second.held_count != it->second.chunk_count || rc.counted.empty()) ++res.stragglers;
      auto& history = state_.receipts[p];
      history.push_back(rc);
      if (history.size() > kReceiptHistory) history.erase(history.begin());
    } else if (r.uploaders.count(p)) {
      ++res.stragglers;
    }
    res.receipts[p] = rc;
    auto a = r.asked.find(p);
    res.codecs[p] = a != r.asked.end() ? a->second.codec : r.codec.spec;
  }
  const auto now = options_.clock->Now();
  res.seconds = core::SecondsSince(*options_.clock, r.opened);
  state_.next_round = r.number + 1;
  if (r.rolling) {
    for (const std::string& p : settled) r.Drop(p);
    r.number = state_.next_round;
    r.opened = now;
  } else {
    round_.reset();
  }
  PublishModelLocked();
  return res;
}

absl::StatusOr<std::vector<float>> RoundEngine::Preview(std::span<const float> delta,
                                                        const ServerOptimizer& optimizer) const {
  absl::MutexLock lock(&mu_);
  if (delta.size() != dim_) {
    return absl::InternalError(StrCat("an aggregate of ", delta.size(), " values for ", dim_));
  }
  std::vector<float> model = state_.model;
  for (size_t i = 0; i < model.size(); ++i) {
    model[i] += optimizer.lr * (optimizer.momentum * state_.momentum[i] + delta[i]);
  }
  return model;
}

std::shared_ptr<const ModelBlob> RoundEngine::model() const {
  absl::MutexLock lock(&mu_);
  return blob_;
}

std::shared_ptr<const ModelBlob> RoundEngine::ModelAt(uint64_t version) const {
  absl::MutexLock lock(&mu_);
  if (blob_->version == version) return blob_;
  for (const auto& b : past_blobs_) {
    if (b->version == version) return b;
  }
  return nullptr;
}

std::vector<float> RoundEngine::ModelVector() const {
  absl::MutexLock lock(&mu_);
  return state_.model;
}

EngineState RoundEngine::Snapshot() const {
  absl::MutexLock lock(&mu_);
  EngineState state = state_;
  state.clients = roster_->Clients();
  state.quarantined = roster_->Quarantined();
  return state;
}

std::vector<Receipt> RoundEngine::ReceiptsFor(const std::string& client_id) const {
  absl::MutexLock lock(&mu_);
  auto it = published_receipts_.find(client_id);
  return it == published_receipts_.end() ? std::vector<Receipt>{} : it->second;
}

void RoundEngine::PublishReceipts() {
  absl::MutexLock lock(&mu_);
  published_receipts_ = state_.receipts;
}

}  // namespace fedlgc::coordinator
