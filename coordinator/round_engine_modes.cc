// The round engine's payload mode (LGC) and separate mode (LSGD, SGP): updates the
// engine keeps per client for a driver instead of summing them (see round_engine.h).
#include "codecs/str.h"
#include "coordinator/round_engine.h"

namespace fedlgc::coordinator {

CommitResult RoundEngine::CommitModel(std::vector<float> model,
                                      const std::set<std::string>& counted) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!round_ || model.size() != state_.model.size()) return CommitResult{};
  return Close(
      {}, [&](const std::string& c) { return counted.count(c) > 0; }, &model);
}

std::map<std::string, RoundEngine::SeparateUpdate> RoundEngine::Separate() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, SeparateUpdate> out;
  if (!round_ || !round_->separate) return out;
  for (const auto& [client, u] : round_->updates) out[client] = u.separate;
  return out;
}

void RoundEngine::Freeze() {
  std::lock_guard<std::mutex> lock(mu_);
  if (round_) round_->frozen = true;
}

std::map<std::string, RoundEngine::Payload> RoundEngine::Payloads() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, Payload> out;
  if (!round_) return out;
  for (const auto& [client, u] : round_->updates) {
    if (u.held_count == u.chunk_count) out[client] = u.payload;
  }
  return out;
}

ChunkResult RoundEngine::AcceptPayload(const ChunkIn& c) {
  PayloadValidator validator;
  uint64_t dim = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!round_ || c.round != round_->number || round_->frozen) {
      return Reject(absl::FailedPreconditionError(StrCat("round ", c.round, " is not open")),
                    "wrong_round");
    }
    if (auto early = ParticipantOrQuery(c)) return *early;
    auto it = round_->updates.find(c.client_id);
    if (c.chunk_count != 1 || c.chunk_index != 0) {
      return Reject(absl::InvalidArgumentError("an LGC update is one chunk"), "bad_chunk_index");
    }
    if (c.num_samples == 0) {
      return Reject(absl::InvalidArgumentError("num_samples must be > 0"), "malformed");
    }
    if (it != round_->updates.end() && it->second.update_id == c.update_id) {
      ChunkResult r;
      r.duplicate = true;
      r.reason = "duplicate";
      r.held = HeldList(it->second);
      return r;
    }
    validator = round_->validator;
    dim = state_.model.size();
  }
  auto view = codecs::ParseFrame(c.frame, options_.frame_limits);
  if (!view.ok()) return Reject(view.status(), ReasonFor(view.status()));
  if (view->dim != dim || view->begin != 0 || view->length != dim) {
    return Reject(absl::OutOfRangeError(
                      StrCat("an LGC frame covers the whole model (", dim, " coordinates)")),
                  "range");
  }
  if (absl::Status st = validator(c.client_id, view->spec, view->body); !st.ok()) {
    return Reject(
        st, absl::IsInvalidArgument(st) && st.message().find("codec") == 0 ? "codec" : "malformed");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!round_ || c.round != round_->number || round_->frozen) {
    return Reject(absl::FailedPreconditionError(StrCat("round ", c.round, " closed meanwhile")),
                  "wrong_round");
  }
  // A new update replaces an earlier one (a promoted leader resends as leader): its
  // bytes travelled again, but the model it stands for is counted once.
  const bool replaces = round_->updates.count(c.client_id) > 0;
  Update& u = round_->updates[c.client_id];
  u.update_id = c.update_id;
  u.chunk_count = 1;
  u.held.assign(1, true);
  u.held_count = 1;
  u.payload.spec = std::string(view->spec);
  u.payload.body.assign(reinterpret_cast<const char*>(view->body.data()), view->body.size());
  u.payload.num_samples = c.num_samples;
  ChunkResult r;
  r.coordinates = replaces ? 0 : view->length;
  r.held = {0};
  r.codec = options_.plan.CodecFor(c.round);
  return r;
}

}  // namespace fedlgc::coordinator
