// The open round's data and admission rules (see live_round.h).
#include "coordinator/live_round.h"

#include "base/str.h"

namespace fedlgc::coordinator {
namespace {

// Whether this sender may send `r` a chunk of this kind (open round, participant, not
// quarantined, joined, shares as the round takes them, an uploader); nullopt when it may.
std::optional<ChunkResult> AdmitSender(const LiveRound* r, const ChunkIn& c,
                                       const std::optional<std::string>& quarantined) {
  if (!TakesChunk(r, c)) {
    const uint64_t open = r == nullptr ? 0 : r->AskedRound(c.client_id);
    return Refused(
        RejectReason::kWrongRound,
        absl::FailedPreconditionError(
            r == nullptr ? StrCat("round ", c.round, " is closed; no round is open")
            : c.round != open
                ? StrCat("round ", c.round, " is not open; round ", open, " is")
                : StrCat("round ", c.round, " is closing: its updates are being aggregated")));
  }
  if (r->participants.count(c.client_id) == 0) {
    return Refused(RejectReason::kNotParticipant,
                   absl::FailedPreconditionError(
                       StrCat("client ", c.client_id, " is not a participant of round ", c.round)));
  }
  if (quarantined.has_value()) {
    return Refused(RejectReason::kQuarantined,
                   absl::PermissionDeniedError(
                       StrCat("client ", c.client_id, " is quarantined: ", *quarantined)));
  }
  if (auto w = r->weights.find(c.client_id); w == r->weights.end() || !(w->second > 0)) {
    return Refused(RejectReason::kNotParticipant,
                   absl::FailedPreconditionError(
                       StrCat("client ", c.client_id, " has not joined (no sample count)")));
  }
  if (c.share.has_value() != r->collector->takes_shares()) {
    return Refused(RejectReason::kMalformed,
                   absl::InvalidArgumentError(
                       r->collector->takes_shares()
                           ? StrCat("round ", c.round, " takes push-sum shares (Gossip)")
                           : StrCat("round ", c.round, " takes no push-sum shares")));
  }
  if (!c.frame.empty() && r->uploaders.count(c.client_id) == 0) {
    return Refused(RejectReason::kNotParticipant,
                   absl::FailedPreconditionError(StrCat(
                       "client ", c.client_id, " has nothing to upload in round ", c.round)));
  }
  return std::nullopt;
}

}  // namespace

ChunkResult Refused(RejectReason reason, absl::Status st) {
  ChunkResult r;
  r.status = std::move(st);
  r.reason = reason;
  return r;
}

std::vector<uint32_t> UpdateChunks::HeldList() const {
  std::vector<uint32_t> list;
  for (uint32_t i = 0; i < held.size(); ++i) {
    if (held[i]) list.push_back(i);
  }
  return list;
}

std::optional<std::pair<uint64_t, uint64_t>> UpdateChunks::Overlap(uint32_t part, uint64_t begin,
                                                                   uint64_t end) const {
  if (end <= begin) return std::nullopt;
  // The range of this part starting after `begin`, and the one before it.
  auto next = ranges.upper_bound({part, begin});
  if (next != ranges.end() && next->first.first == part && next->first.second < end) {
    return std::make_pair(next->first.second, next->second);
  }
  if (next != ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first.first == part && prev->second > begin) {
      return std::make_pair(prev->first.second, prev->second);
    }
  }
  return std::nullopt;
}

void LiveRound::Drop(const std::string& client) {
  participants.erase(client);
  uploaders.erase(client);
  asked.erase(client);
  updates.erase(client);
  settling.erase(client);
  weights.erase(client);
  collector->Forget(client);
}

uint64_t LiveRound::AskedRound(const std::string& client) const {
  auto it = asked.find(client);
  return rolling && it != asked.end() ? it->second.round : number;
}

bool LiveRound::Complete(const std::string& client) const {
  auto it = updates.find(client);
  return it != updates.end() && it->second.complete();
}

bool TakesChunk(const LiveRound* r, const ChunkIn& c) {
  return r != nullptr && !r->frozen && !r->settling.count(c.client_id) &&
         c.round == r->AskedRound(c.client_id);
}

std::optional<ChunkResult> AdmitChunk(const LiveRound* r, const ChunkIn& c,
                                      const std::optional<std::string>& quarantined,
                                      uint64_t max_chunks_per_update, const RoundFacts& facts) {
  if (auto no = AdmitSender(r, c, quarantined)) return no;
  auto it = r->updates.find(c.client_id);
  const UpdateChunks* u = it == r->updates.end() ? nullptr : &it->second;
  if (c.frame.empty()) {  // a query: report what is held
    ChunkResult q;
    if (u != nullptr && u->update_id == c.update_id) q.held = u->HeldList();
    return q;
  }
  if (c.chunk_count == 0 || c.chunk_count > max_chunks_per_update ||
      c.chunk_index >= c.chunk_count) {
    return Refused(RejectReason::kBadChunkIndex,
                   absl::InvalidArgumentError(
                       StrCat("chunk ", c.chunk_index, " of ", c.chunk_count, " is out of range")));
  }
  if (c.part >= r->collector->parts()) {
    return Refused(
        RejectReason::kPart,
        absl::InvalidArgumentError(StrCat("chunk ", c.chunk_index, " of part ", c.part, ": round ",
                                          c.round, " takes ", r->collector->parts(), " part(s)")));
  }
  if (!(c.scale > 0 && c.scale <= 16)) {
    return Refused(RejectReason::kNonFinite, absl::InvalidArgumentError(StrCat(
                                                 "chunk scale ", c.scale, " is not in (0, 16]")));
  }
  std::optional<HeldUpdate> held;
  if (u != nullptr) held = HeldUpdate{u->update_id, u->chunk_count, u->held_count};
  if (auto no = r->collector->Admit(c, held ? &*held : nullptr, facts)) return Refused(*no);
  if (u == nullptr) return std::nullopt;
  const bool same = u->update_id == c.update_id;
  if (!same && !r->collector->replaces_updates()) {
    return Refused(RejectReason::kUpdateConflict,
                   absl::FailedPreconditionError(StrCat("round ", c.round, " already holds update ",
                                                        u->update_id, " from ", c.client_id,
                                                        "; update ", c.update_id, " refused")));
  }
  if (same && u->chunk_count != c.chunk_count) {
    return Refused(
        RejectReason::kBadChunkIndex,
        absl::InvalidArgumentError(StrCat("chunk count ", c.chunk_count,
                                          " differs from earlier chunks (", u->chunk_count, ")")));
  }
  if (same && u->held[c.chunk_index]) {
    ChunkResult dup;
    dup.duplicate = true;
    dup.reason = RejectReason::kDuplicate;
    dup.held = u->HeldList();
    return dup;
  }
  return std::nullopt;
}

absl::Status CheckCommittable(const LiveRound* r, size_t size, uint64_t dim) {
  if (r == nullptr) return absl::FailedPreconditionError("no round is open to commit");
  if (size != dim) {
    return absl::InternalError(
        StrCat("round ", r->number, ": an aggregate of ", size, " values for ", dim));
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::coordinator
