// The round the engine has open (round_engine.h): who takes part and as what, the chunks
// of each update it holds, and the rules a chunk meets before it is decoded. Plain data
// and functions of it: the engine holds its lock around every call.
#ifndef FEDLGC_COORDINATOR_LIVE_ROUND_H_
#define FEDLGC_COORDINATOR_LIVE_ROUND_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/collector.h"
#include "coordinator/round_terms.h"

namespace fedlgc::coordinator {

struct ChunkResult {
  absl::Status status;
  RejectReason reason = RejectReason::kNone;  // set when refused, and for a duplicate
  bool duplicate = false;
  uint64_t coordinates = 0;    // carried by this chunk (for raw byte accounting)
  std::vector<uint32_t> held;  // all chunks of this update now held
  std::string codec;           // the round's codec spec (metric label)
};

// A refused chunk's result.
ChunkResult Refused(RejectReason reason, absl::Status st);
inline ChunkResult Refused(Rejection rejection) {
  return Refused(rejection.reason, std::move(rejection.status));
}

// A participant of the open round, as asked.
struct AskedParticipant {
  uint64_t round = 0;    // the round it was asked in
  uint64_t version = 0;  // the model version it trains from
  Clock::time_point at, deadline;
  bool complete = false;  // every chunk of its update is held
  std::string codec;      // the codec it was asked to send with
};

// The chunks of one client's update held in the open round.
struct UpdateChunks {
  uint64_t update_id = 0;
  uint32_t chunk_count = 0;
  std::vector<bool> held;
  uint32_t held_count = 0;
  // Coordinates held, per part of the update: (part, begin) -> end.
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> ranges;

  bool complete() const { return held_count == chunk_count; }
  // The indices of the chunks held.
  std::vector<uint32_t> HeldList() const;
  // A range of `part` held that [begin, end) overlaps; nullopt when none does.
  std::optional<std::pair<uint64_t, uint64_t>> Overlap(uint32_t part, uint64_t begin,
                                                       uint64_t end) const;
};

struct LiveRound {
  uint64_t number = 0;
  std::set<std::string> participants;
  std::set<std::string> uploaders;
  std::map<std::string, UpdateChunks> updates;
  std::shared_ptr<Collector> collector;
  std::map<std::string, double> weights;  // of the participants (CappedWeights)
  Clock::time_point opened, deadline;
  bool frozen = false;
  RoundCodec codec;  // what participants are sent, and its decoder
  bool rolling = false;
  std::map<std::string, AskedParticipant> asked;  // each participant as asked
  std::set<std::string> settling;                 // rolling rounds: what the next commit settles

  // A rolling round: `client` is no participant any more, and nothing of it is held.
  void Drop(const std::string& client);
  // The round `client` was asked in: the round's, or in a rolling round its own.
  uint64_t AskedRound(const std::string& client) const;
  // Whether `client`'s update is complete (every chunk held).
  bool Complete(const std::string& client) const;
};

// Whether a chunk of `c.round` from its client belongs to `r` (null: no round is open)
// now: open, not frozen, its client not settling, and the round it was asked in.
bool TakesChunk(const LiveRound* r, const ChunkIn& c);

// The rules a chunk meets before it is decoded, with the engine's lock held: a refusal
// for a chunk of a round that is not open, a non-participant, a quarantined or unjoined
// client, a chunk through the wrong call, fields out of range, or what the collector
// refuses (given `facts`); the answer to a query (an empty frame); nullopt for a chunk to
// decode.
// `quarantined`: why the chunk's client is barred (nullopt: it is not).
std::optional<ChunkResult> AdmitChunk(const LiveRound* r, const ChunkIn& c,
                                      const std::optional<std::string>& quarantined,
                                      uint64_t max_chunks_per_update, const RoundFacts& facts);

// OK when `r` (null: none open) can commit an aggregate of `size` values of a model of
// `dim`.
absl::Status CheckCommittable(const LiveRound* r, size_t size, uint64_t dim);

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_LIVE_ROUND_H_
