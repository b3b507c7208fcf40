#include "modes/sgp/push_sum_collector.h"

#include "base/str.h"

namespace fedlgc::modes {

using coordinator::ChunkIn;
using coordinator::DecodedChunk;
using coordinator::RejectReason;
using coordinator::RoundFacts;

std::optional<coordinator::Rejection> PushSumCollector::Admit(const ChunkIn& c,
                                                              const coordinator::HeldUpdate* held,
                                                              const RoundFacts& round) const {
  const coordinator::PushSumShare& share = *c.share;  // the engine checked takes_shares()
  // A push-sum weight share is p w: positive, and at most everything (w <= n).
  if (!(share.weight > 0) || !(share.weight <= static_cast<double>(round.registered_clients + 1))) {
    return coordinator::Reject(RejectReason::kNonFinite,
                               absl::InvalidArgumentError(StrCat(
                                   "push-sum weight share ", share.weight, " is out of range")));
  }
  if (share.reference_version != round.model_version) {
    return coordinator::Reject(
        RejectReason::kMalformed,
        absl::InvalidArgumentError(StrCat("share coded against model ", share.reference_version,
                                          "; round ", c.round, " uses model ",
                                          round.model_version)));
  }
  if (held != nullptr && held->update_id == c.update_id) {
    absl::MutexLock lock(&mu_);
    auto it = weight_shares_.find(c.client_id);
    if (it != weight_shares_.end() && it->second != share.weight) {
      return coordinator::Reject(
          RejectReason::kBadChunkIndex,
          absl::InvalidArgumentError("weight share differs from earlier chunks"));
    }
  }
  return updates_.Admit(c, held, round);
}

absl::StatusOr<DecodedChunk> PushSumCollector::Decode(const ChunkIn& chunk,
                                                      const RoundFacts& round) const {
  return updates_.Decode(chunk, round);
}

void PushSumCollector::Collect(const ChunkIn& c, DecodedChunk decoded, bool fresh, bool complete,
                               const RoundFacts& round) {
  absl::MutexLock lock(&mu_);
  if (fresh) weight_shares_[c.client_id] = c.share->weight;
  updates_.Collect(c, std::move(decoded), fresh, complete, round);
}

void PushSumCollector::Forget(const std::string& client) {
  absl::MutexLock lock(&mu_);
  weight_shares_.erase(client);
  updates_.Forget(client);
}

std::map<std::string, SgpShare> PushSumCollector::Shares() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, SgpShare> out;
  for (auto& [client, u] : updates_.Updates()) {
    auto w = weight_shares_.find(client);
    out[client] = SgpShare{std::move(u.values), u.complete,
                           w == weight_shares_.end() ? 0.0 : w->second};
  }
  return out;
}

}  // namespace fedlgc::modes
