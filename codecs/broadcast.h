// A compressed broadcast: the model sent to receivers as deltas through any codec of the
// library, with error feedback at the sender (as in DoubleSqueeze and DoCoFL).
//
// The sender keeps the model its receivers hold (`held`), not only the true one. Each
// Advance encodes x = true - held, decodes its own frames exactly as a receiver will, and
// adds them, times a scale, to held; so what one delta lost is in the next one's input
// (nothing is lost, only delayed), and held stays a bit-exact copy of every receiver's
// model: both ends run the same decoder and the same float operations in the same order.
// The scale is the least-squares one, <x, D> / <D, D> for the decoded D: it makes every
// codec contractive (|x - scale D| < |x| unless D is orthogonal to x), which error feedback
// needs; an unbiased codec of high variance (QSGD with 4 bits on buckets of 512) fed back
// unscaled grows its error every version. Each delta carries the
// CRC32C of the model it rebuilds, so a receiver knows when its rebuild is not the
// sender's and falls back to a full download.
//
// The sender keeps the last `window` deltas: a receiver some versions behind catches up by
// the chain of deltas it lacks when that chain is smaller than the full model, and by a
// full download (of `held`, with its version and CRC) otherwise.
//
// Delta bytes on the wire: "FLGB" magic, u8 format version (1), u64 from, u64 to, u32
// model CRC32C, f32 scale, u32 frame count, then each frame as u32 length + the frame's bytes (frames
// carry their own CRC32C). Little-endian. A chain (what one download carries): "FLGC"
// magic, u8 format version (1), u64 to, u32 CRC32C of the model at `to`, u32 delta count
// (0: the receiver is up to date, and checks its model's CRC), then each delta as u32
// length + its bytes.
//
// Thread-safety: a BroadcastEncoder is not thread-safe; ApplyDelta and ParseDelta are pure.
#ifndef FEDLGC_CODECS_BROADCAST_H_
#define FEDLGC_CODECS_BROADCAST_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/codec.h"
#include "codecs/frame.h"

namespace fedlgc::codecs {

// One step of a broadcast: what turns the model at version `from` into the model at `to`.
struct BroadcastDelta {
  uint64_t from = 0;
  uint64_t to = 0;
  uint32_t model_crc = 0;           // ModelCrc of the model it rebuilds
  float scale = 1.0f;               // model += scale x decoded frames (finite, > 0)
  std::vector<std::string> frames;  // frames of the broadcast codec, tiling [0, dim)

  // Bytes of SerializeDelta's output.
  uint64_t wire_bytes() const;
};

std::string SerializeDelta(const BroadcastDelta& delta);
// INVALID_ARGUMENT (kMalformed) for bytes that are not a delta; frames are checked when
// applied.
absl::StatusOr<BroadcastDelta> ParseDelta(std::string_view bytes,
                                          const FrameLimits& limits = FrameLimits{});

// CRC32C of a model's little-endian float bytes.
uint32_t ModelCrc(std::span<const float> model);

// The deltas one download carries to bring a receiver to the model of version `to`.
struct BroadcastChain {
  uint64_t to = 0;
  uint32_t model_crc = 0;  // ModelCrc of the model at `to`
  std::vector<BroadcastDelta> deltas;
};

std::string SerializeChain(uint64_t to, uint32_t model_crc,
                           std::span<const BroadcastDelta* const> deltas);
// INVALID_ARGUMENT (kMalformed) for bytes that are not a chain, deltas that do not follow
// each other or do not end at `to`.
absl::StatusOr<BroadcastChain> ParseChain(std::string_view bytes,
                                          const FrameLimits& limits = FrameLimits{});

struct BroadcastOptions {
  std::string codec = "fp32";  // a stateless codec spec (error feedback is the sender's)
  size_t window = 8;           // deltas kept for receivers that are behind
  uint64_t max_frame_bytes = 0;  // 0: one frame per delta
  // Where each delta's frames must break (EncodeOptions::cuts): a model's buffers, whose
  // scale is not the weights' (core/model.h ScaleCuts).
  std::vector<uint64_t> cuts;
};

class BroadcastEncoder {
 public:
  // `initial` is the model every receiver starts from (a full download), at `version`.
  // INVALID_ARGUMENT for an unknown or stateful codec (ef(...)), a zero window, or an
  // initial model that is not finite.
  static absl::StatusOr<std::unique_ptr<BroadcastEncoder>> Create(
      const BroadcastOptions& options, std::vector<float> initial, uint64_t version);
  // An encoder as SaveState left it (the held model to the bit, and the kept deltas):
  // receivers that held its models before go on from them. INVALID_ARGUMENT (kMalformed)
  // for a state that is not one, or whose deltas do not end at its held model.
  static absl::StatusOr<std::unique_ptr<BroadcastEncoder>> Restore(const BroadcastOptions& options,
                                                                   std::string_view state);
  // "FLGS", u8 format (1), u64 version, u64 dim, the held floats, u32 kept count, each
  // kept delta as u32 length + its bytes.
  std::string SaveState() const;

  // The true model at `version` (greater than version()): encodes true - held (seeded by
  // the version, so the same inputs give the same bytes), updates held, keeps the delta.
  absl::StatusOr<const BroadcastDelta*> Advance(uint64_t version, std::span<const float> model);

  // The model receivers hold at version(), and its CRC.
  std::span<const float> held() const { return held_; }
  uint64_t version() const { return version_; }
  uint32_t held_crc() const { return held_crc_; }
  const Codec& codec() const { return *codec_; }

  // What a receiver at `from` should fetch to reach version(): the chain of kept deltas
  // when it is complete and its wire bytes are fewer than a full model's (4 bytes per
  // coordinate); empty when it is up to date or a full download is cheaper or needed.
  std::vector<const BroadcastDelta*> ChainFrom(uint64_t from) const;
  // The delta that ends at `to`, if kept.
  const BroadcastDelta* DeltaTo(uint64_t to) const;

 private:
  BroadcastEncoder(std::unique_ptr<Codec> codec, BroadcastOptions options,
                   std::vector<float> initial, uint64_t version);

  std::unique_ptr<Codec> codec_;
  const BroadcastOptions options_;
  std::vector<float> held_;
  uint64_t version_;
  uint32_t held_crc_;
  std::deque<BroadcastDelta> kept_;  // oldest first, consecutive versions
};

// The receiver's side: applies `delta` to `model` at `*version`. Refuses (and leaves both
// untouched) a delta from another version, frames of another codec or size, frames that
// do not tile the model, and a rebuild whose CRC differs from the delta's (DATA_LOSS: fetch
// the full model).
absl::Status ApplyDelta(const Codec& codec, const BroadcastDelta& delta, uint64_t* version,
                        std::vector<float>* model);
// Applies every delta of `chain` in order, all or none: on an error `model` and `version`
// are as they were. DATA_LOSS when the result is not the model of the chain's CRC (an
// empty chain checks the model as it is): fetch the full model.
absl::Status ApplyChain(const Codec& codec, const BroadcastChain& chain, uint64_t* version,
                        std::vector<float>* model);

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_BROADCAST_H_
