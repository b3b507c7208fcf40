// How a round collects what its uploaders send: the strategy a RoundDriver picks when it
// opens a round (RoundEngine::OpenRound). The engine owns the round's lifecycle, which
// chunks of which update it holds and the receipts (every chunk counts at most once); a
// collector owns what the chunks carry:
//   WeightedSumCollector  FedAvg: a weighted sum and a weight per coordinate, so a
//                         partial update counts for the ranges that arrived
//   PerClientCollector    LSGD and SGP: each client's decoded update kept apart
//   PayloadCollector      LGC and two-phase PowerSGD: one validated frame per client,
//                         aggregated by the driver
// A chunk goes through three steps: Admit (the engine's lock held: checks that need the
// round), Decode (no lock: parsing and decoding, concurrently), Collect (the engine's
// lock held again: the decoded chunk joins the round).
#ifndef FEDLGC_COORDINATOR_COLLECTOR_H_
#define FEDLGC_COORDINATOR_COLLECTOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/codec.h"
#include "codecs/frame.h"
#include "coordinator/rejection.h"

namespace fedlgc::coordinator {

// SGP: what a push-sum share adds to its chunks (GossipChunk).
struct PushSumShare {
  double weight = 0;               // the push-sum weight share p w
  uint64_t reference_version = 0;  // the model version the share is coded against
  uint64_t inbox_applied = 0;      // the last round whose relayed mail the sender added
};

// One chunk as a client sent it.
struct ChunkIn {
  std::string client_id;
  uint64_t round = 0;
  uint64_t update_id = 0;
  uint32_t chunk_index = 0;
  uint32_t chunk_count = 0;
  uint64_t num_samples = 0;           // what the client claims: informational, never a weight
  std::string_view frame;             // empty: a query for the receipt
  float scale = 1;                    // the decoded values are multiplied by this (in (0, 16])
  std::optional<PushSumShare> share;  // set when it came through Gossip
  uint32_t part = 0;                  // the update's part (UpdateChunk.part)
  // The client's weight in the round, set by the engine at admission: its sample count
  // at Join, capped (EngineOptions::max_client_weight).
  double weight = 0;
};

// What a collector may know of the round when it admits or decodes a chunk.
struct RoundFacts {
  uint64_t dim = 0;                        // coordinates of the model
  uint64_t model_version = 0;              // the version the round serves
  size_t registered_clients = 0;           // clients that ever joined
  const codecs::Codec* decoder = nullptr;  // of the round's codec; null in payload rounds
  // Keeps a decoder the driver chose for the round (RoundEngine::UseCodec) alive while a
  // chunk decodes outside the engine's lock.
  std::shared_ptr<const codecs::Codec> keep;
  codecs::FrameLimits frame_limits;
};

// The update of a client the engine holds so far in the open round.
struct HeldUpdate {
  uint64_t update_id = 0;
  uint32_t chunk_count = 0;
  uint32_t held_count = 0;
};

// A chunk after Decode.
struct DecodedChunk {
  uint64_t begin = 0;
  std::vector<float> values;  // codec rounds: the frame's range, times the chunk's scale
  // Summed-code rounds: values hold the frame's code (times the scale), which begins at
  // this index of the whole vector's code (codecs::LinearCode).
  uint64_t code_begin = 0;
  std::string spec, body;    // payload rounds: the frame's spec and body
  // Secure aggregation rounds: the frame's words in Z_(2^b) (codecs/zmod_frame.h).
  std::vector<uint32_t> words;
  uint64_t coordinates = 0;  // coordinates carried (4 fp32 bytes each in the raw count)
};

// Not thread-safe on its own: the engine calls Admit and Collect with its lock held, and
// Decode (const) from any thread. The accessors of the concrete collectors take their own
// lock, so a driver can read while chunks arrive.
class Collector {
 public:
  virtual ~Collector() = default;

  // Payload rounds: an update is one chunk, and a client's new update replaces its
  // earlier one (an LGC leader that was promoted resends as leader).
  virtual bool replaces_updates() const { return false; }
  // SGP: chunks must come through Gossip (with a PushSumShare), and only then.
  virtual bool takes_shares() const { return false; }
  // How many parts an update has (ChunkIn::part < parts()): 1 but for a PartCollector.
  virtual uint32_t parts() const { return 1; }
  // What only this strategy checks, before decoding; `held` is the client's update held
  // so far (nullptr: none).
  virtual std::optional<Rejection> Admit(const ChunkIn& /*chunk*/, const HeldUpdate* /*held*/,
                                         const RoundFacts& /*round*/) const {
    return std::nullopt;
  }
  // Parses and decodes the chunk's frame.
  virtual absl::StatusOr<DecodedChunk> Decode(const ChunkIn& chunk,
                                              const RoundFacts& round) const = 0;
  // Takes a decoded chunk of a new chunk index. `fresh`: the first chunk of this update
  // (a replacing update included); `complete`: the update has all its chunks now.
  virtual void Collect(const ChunkIn& chunk, DecodedChunk decoded, bool fresh, bool complete,
                       const RoundFacts& round) = 0;
  // A rolling round settled or released `client`'s update (RoundEngine::Settle, Release):
  // what is held of it goes. Only collectors of rolling rounds hold anything to forget.
  virtual void Forget(const std::string& /*client*/) {}
  // `client`'s update became complete with a chunk another collector took (a PartCollector's
  // other part): what Collect's `complete` says, for a collector that keeps it.
  virtual void Completed(const std::string& /*client*/) {}
};

// Decodes a codec frame of a summing or per-client round: the frame of the round's codec,
// for the model's dimension, times the chunk's scale.
absl::StatusOr<DecodedChunk> DecodeCodecChunk(const ChunkIn& chunk, const RoundFacts& round);
// The same for a summable codec (`code`: the round's decoder), decoding nothing: the
// chunk's code, times its scale (DecodedChunk::code_begin).
absl::StatusOr<DecodedChunk> ReadCodeChunk(const ChunkIn& chunk, const RoundFacts& round,
                                           const codecs::LinearCode& code);

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_COLLECTOR_H_
