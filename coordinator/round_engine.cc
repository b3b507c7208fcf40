// Round engine (see round_engine.h).
#include "coordinator/round_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "codecs/crc32c.h"
#include "codecs/registry.h"
#include "codecs/rng.h"
#include "codecs/str.h"
#include "core/mixing.h"

namespace fedlgc::coordinator {
// Reason label for a frame that failed to parse or decode.
std::string RoundEngine::ReasonFor(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kDataLoss:
      return "crc";
    case absl::StatusCode::kResourceExhausted:
      return "oversized";
    case absl::StatusCode::kOutOfRange:
      return "range";
    case absl::StatusCode::kUnimplemented:
      return "version";
    default:
      break;
  }
  const std::string m(st.message());
  if (m.find("finite") != std::string::npos || m.find("invalid norm") != std::string::npos ||
      m.find("invalid scale") != std::string::npos) {
    return "nonfinite";
  }
  return "malformed";
}

ChunkResult RoundEngine::Reject(absl::Status st, std::string reason) {
  ChunkResult r;
  r.status = std::move(st);
  r.reason = std::move(reason);
  return r;
}

RoundEngine::RoundEngine(EngineOptions options, EngineState state)
    : options_(std::move(options)), state_(std::move(state)) {
  // The coordinator validates the job options before building the engine.
  std::vector<std::string> specs = options_.plan.warmup_codecs;
  specs.push_back(options_.plan.codec);
  for (const std::string& spec : specs) {
    if (decoders_.count(spec)) continue;
    if (auto codec = codecs::MakeCodec(spec); codec.ok())
      decoders_[spec] = std::move(codec).value();
  }
  if (state_.momentum.size() != state_.model.size())
    state_.momentum.assign(state_.model.size(), 0.0f);
  std::lock_guard<std::mutex> lock(mu_);
  PublishModelLocked();
  published_receipts_ = state_.receipts;
}

void RoundEngine::PublishModelLocked() {
  auto blob = std::make_shared<ModelBlob>();
  blob->version = state_.model_version;
  blob->bytes.assign(reinterpret_cast<const char*>(state_.model.data()), state_.model.size() * 4);
  blob->crc32c = codecs::Crc32c(blob->bytes.data(), blob->bytes.size());
  blob_ = std::move(blob);
}

const codecs::Codec* RoundEngine::DecoderFor(uint64_t round) const {
  auto it = decoders_.find(options_.plan.CodecFor(round));
  return it == decoders_.end() ? nullptr : it->second.get();
}

void RoundEngine::Register(const std::string& client_id, uint64_t num_samples) {
  std::lock_guard<std::mutex> lock(mu_);
  state_.clients[client_id] = num_samples;
}

absl::Status RoundEngine::OpenRound(const std::vector<std::string>& participants,
                                    Clock::time_point deadline, RoundMode mode) {
  std::lock_guard<std::mutex> lock(mu_);
  if (round_) return absl::FailedPreconditionError(StrCat("round ", round_->number, " is open"));
  auto r = std::make_unique<Round>();
  r->number = state_.next_round;
  r->participants.insert(participants.begin(), participants.end());
  r->uploaders = r->participants;
  r->separate = mode.separate || mode.gossip;
  r->gossip = mode.gossip;
  if (!r->separate) {
    r->sum.assign(state_.model.size(), 0.0);
    r->weight.assign(state_.model.size(), 0.0f);
  }
  r->opened = Clock::now();
  r->deadline = deadline;
  r->validator = std::move(mode.validator);
  round_ = std::move(r);
  return absl::OkStatus();
}

void RoundEngine::SetUploaders(const std::set<std::string>& uploaders) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!round_) return;
  round_->uploaders.clear();
  for (const std::string& u : uploaders) {
    if (round_->participants.count(u)) round_->uploaders.insert(u);
  }
}

uint64_t RoundEngine::current_round() const {
  std::lock_guard<std::mutex> lock(mu_);
  return round_ ? round_->number : state_.next_round;
}

std::optional<RoundInfo> RoundEngine::OpenRoundFor(const std::string& client_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!round_ || round_->participants.count(client_id) == 0) return std::nullopt;
  RoundInfo info;
  info.round = round_->number;
  info.model_version = state_.model_version;
  info.deadline = round_->deadline;
  const auto seed_of = [&](uint64_t round) {
    uint64_t h = codecs::Mix64(options_.seed ^ round);
    for (char c : client_id) h = codecs::Mix64(h ^ static_cast<unsigned char>(c));
    return h;
  };
  info.seed = seed_of(round_->number);
  info.next_seed = seed_of(round_->number + 1);
  info.codec = options_.plan.CodecFor(round_->number);
  return info;
}

std::vector<uint32_t> RoundEngine::HeldList(const Update& u) {
  std::vector<uint32_t> held;
  for (uint32_t i = 0; i < u.held.size(); ++i) {
    if (u.held[i]) held.push_back(i);
  }
  return held;
}

std::optional<ChunkResult> RoundEngine::ParticipantOrQuery(const ChunkIn& c) const {
  if (round_->participants.count(c.client_id) == 0) {
    return Reject(absl::FailedPreconditionError(
                      StrCat("client ", c.client_id, " is not a participant of round ", c.round)),
                  "not_participant");
  }
  if (c.gossip != round_->gossip) {
    return Reject(absl::InvalidArgumentError(
                      round_->gossip ? StrCat("round ", c.round, " takes push-sum shares (Gossip)")
                                     : StrCat("round ", c.round, " takes no push-sum shares")),
                  "malformed");
  }
  if (!c.frame.empty() && round_->uploaders.count(c.client_id) == 0) {
    return Reject(absl::FailedPreconditionError(
                      StrCat("client ", c.client_id, " has nothing to upload in round ", c.round)),
                  "not_participant");
  }
  if (!c.frame.empty()) return std::nullopt;
  ChunkResult r;  // a query: report what is held
  auto it = round_->updates.find(c.client_id);
  if (it != round_->updates.end() && it->second.update_id == c.update_id) {
    r.held = HeldList(it->second);
  }
  return r;
}

ChunkResult RoundEngine::AcceptChunk(const ChunkIn& c) {
  const bool payload_mode = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return round_ && round_->validator && c.round == round_->number;
  }();
  if (payload_mode) return AcceptPayload(c);
  uint64_t dim = 0;
  const codecs::Codec* decoder = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!round_ || c.round != round_->number) {
      return Reject(
          absl::FailedPreconditionError(
              round_ ? StrCat("round ", c.round, " is not open; round ", round_->number, " is")
                     : StrCat("round ", c.round, " is closed; no round is open")),
          "wrong_round");
    }
    if (auto early = ParticipantOrQuery(c)) return *early;
    auto it = round_->updates.find(c.client_id);
    if (c.chunk_count == 0 || c.chunk_count > options_.max_chunks_per_update ||
        c.chunk_index >= c.chunk_count) {
      return Reject(absl::InvalidArgumentError(
                        StrCat("chunk ", c.chunk_index, " of ", c.chunk_count, " is out of range")),
                    "bad_chunk_index");
    }
    if (c.num_samples == 0) {
      return Reject(absl::InvalidArgumentError("num_samples must be > 0"), "malformed");
    }
    if (!(c.scale > 0 && c.scale <= 16)) {
      return Reject(
          absl::InvalidArgumentError(StrCat("chunk scale ", c.scale, " is not in (0, 16]")),
          "nonfinite");
    }
    if (c.gossip) {
      // A push-sum weight share is p w: positive, and at most everything (w <= n).
      if (!(c.weight_share > 0) ||
          !(c.weight_share <= static_cast<double>(state_.clients.size() + 1))) {
        return Reject(absl::InvalidArgumentError(
                          StrCat("push-sum weight share ", c.weight_share, " is out of range")),
                      "nonfinite");
      }
      if (c.reference_version != state_.model_version) {
        return Reject(absl::InvalidArgumentError(StrCat("share coded against model ",
                                                        c.reference_version, "; round ", c.round,
                                                        " uses model ", state_.model_version)),
                      "malformed");
      }
    }
    if (it != round_->updates.end()) {
      const Update& u = it->second;
      if (c.gossip && u.update_id == c.update_id && u.separate.weight_share != c.weight_share) {
        return Reject(absl::InvalidArgumentError("weight share differs from earlier chunks"),
                      "bad_chunk_index");
      }
      if (u.update_id != c.update_id) {
        return Reject(absl::FailedPreconditionError(
                          StrCat("round ", c.round, " already holds update ", u.update_id, " from ",
                                 c.client_id, "; update ", c.update_id, " refused")),
                      "update_conflict");
      }
      if (u.chunk_count != c.chunk_count) {
        return Reject(absl::InvalidArgumentError(StrCat("chunk count ", c.chunk_count,
                                                        " differs from earlier chunks (",
                                                        u.chunk_count, ")")),
                      "bad_chunk_index");
      }
      if (u.held[c.chunk_index]) {
        ChunkResult r;
        r.duplicate = true;
        r.reason = "duplicate";
        r.held = HeldList(u);
        return r;
      }
    }
    dim = state_.model.size();
    decoder = DecoderFor(round_->number);
  }
  if (decoder == nullptr) return Reject(absl::InternalError("no codec"), "codec");

  // Parse and decode outside the lock.
  auto view = codecs::ParseFrame(c.frame, options_.frame_limits);
  if (!view.ok()) return Reject(view.status(), ReasonFor(view.status()));
  if (view->spec != decoder->wire_spec()) {
    return Reject(
        absl::InvalidArgumentError(StrCat("chunk encoded with \"", view->spec,
                                          "\"; this round uses \"", decoder->wire_spec(), "\"")),
        "codec");
  }
  if (view->dim != dim) {
    return Reject(absl::OutOfRangeError(
                      StrCat("chunk is for ", view->dim, " coordinates; the model has ", dim)),
                  "range");
  }
  std::vector<float> values(view->length);
  if (absl::Status st = decoder->Decode(*view, values); !st.ok()) return Reject(st, ReasonFor(st));
  if (c.scale != 1.0f) core::ScaleInPlace(values, c.scale);

  std::lock_guard<std::mutex> lock(mu_);
  if (!round_ || c.round != round_->number) {
    return Reject(
        absl::FailedPreconditionError(StrCat("round ", c.round, " closed while decoding")),
        "wrong_round");
  }
  auto [it, inserted] = round_->updates.try_emplace(c.client_id);
  Update& u = it->second;
  if (inserted) {
    u.update_id = c.update_id;
    u.chunk_count = c.chunk_count;
    u.held.assign(c.chunk_count, false);
    if (round_->separate) {
      u.separate.values.assign(dim, 0.0f);
      u.separate.num_samples = c.num_samples;
      u.separate.weight_share = c.weight_share;
      u.separate.reference_version = c.reference_version;
    }
  } else if (u.update_id != c.update_id || u.chunk_count != c.chunk_count) {
    return Reject(absl::FailedPreconditionError("a different update arrived concurrently"),
                  "update_conflict");
  }
  ChunkResult r;
  if (u.held[c.chunk_index]) {
    r.duplicate = true;
    r.reason = "duplicate";
  } else if (round_->separate) {
    std::copy(values.begin(), values.end(), u.separate.values.begin() + view->begin);
    u.held[c.chunk_index] = true;
    ++u.held_count;
    u.separate.complete = u.held_count == u.chunk_count;
    r.coordinates = view->length;
  } else {
    const double w = static_cast<double>(c.num_samples);
    double* sum = round_->sum.data() + view->begin;
    float* weight = round_->weight.data() + view->begin;
    for (size_t i = 0; i < values.size(); ++i) {
      sum[i] += w * values[i];
      weight[i] += static_cast<float>(w);
    }
    u.held[c.chunk_index] = true;
    ++u.held_count;
    r.coordinates = view->length;
  }
  r.held = HeldList(u);
  r.codec = options_.plan.CodecFor(c.round);
  return r;
}

bool RoundEngine::AllComplete() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!round_) return false;
  for (const std::string& p : round_->uploaders) {
    auto it = round_->updates.find(p);
    if (it == round_->updates.end() || it->second.held_count != it->second.chunk_count)
      return false;
  }
  return true;
}

CommitResult RoundEngine::Commit() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!round_) return CommitResult{};
  // Weighted mean per coordinate over the chunks that arrived.
  const Round& r = *round_;
  std::vector<float> delta(state_.model.size());
  for (size_t i = 0; i < delta.size(); ++i) {
    delta[i] = r.weight[i] > 0 ? static_cast<float>(r.sum[i] / r.weight[i]) : 0.0f;
  }
  return Close(delta, [](const std::string&) { return true; });
}

CommitResult RoundEngine::CommitWith(std::span<const float> delta,
                                     const std::set<std::string>& counted) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!round_) return CommitResult{};
  return Close(delta, [&](const std::string& c) { return counted.count(c) > 0; });
}

CommitResult RoundEngine::Close(std::span<const float> delta,
                                const std::function<bool(const std::string&)>& counted,
                                std::vector<float>* set) {
  CommitResult res;
  Round& r = *round_;
  res.round = r.number;
  if (set != nullptr) {
    state_.model = std::move(*set);
  } else {
    // Server SGD with momentum.
    const float lr = options_.server_lr;
    const float mu = options_.server_momentum;
    for (size_t i = 0; i < state_.model.size(); ++i) {
      state_.momentum[i] = mu * state_.momentum[i] + delta[i];
      state_.model[i] += lr * state_.momentum[i];
    }
  }
  for (const std::string& p : r.participants) {
    Receipt rc;
    rc.round = r.number;
    auto it = r.updates.find(p);
    if (it != r.updates.end()) {
      rc.update_id = it->second.update_id;
      rc.chunk_count = it->second.chunk_count;
      if (counted(p)) rc.counted = HeldList(it->second);
      if (!rc.counted.empty()) ++res.participants;
      if (it->second.held_count != it->second.chunk_count || rc.counted.empty()) ++res.stragglers;
      auto& history = state_.receipts[p];
      history.push_back(rc);
      if (history.size() > kReceiptHistory) history.erase(history.begin());
    } else if (r.uploaders.count(p)) {
      ++res.stragglers;
    }
    res.receipts[p] = rc;
  }
  res.seconds = std::chrono::duration<double>(Clock::now() - r.opened).count();
  state_.next_round = r.number + 1;
  state_.model_version += 1;
  round_.reset();
  PublishModelLocked();
  return res;
}

std::shared_ptr<const ModelBlob> RoundEngine::model() const {
  std::lock_guard<std::mutex> lock(mu_);
  return blob_;
}

std::vector<float> RoundEngine::ModelVector() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.model;
}

EngineState RoundEngine::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

std::vector<Receipt> RoundEngine::ReceiptsFor(const std::string& client_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = published_receipts_.find(client_id);
  return it == published_receipts_.end() ? std::vector<Receipt>{} : it->second;
}

void RoundEngine::PublishReceipts() {
  std::lock_guard<std::mutex> lock(mu_);
  published_receipts_ = state_.receipts;
}

}  // namespace fedlgc::coordinator
