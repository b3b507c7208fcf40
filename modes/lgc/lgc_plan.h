// An LGC job's codec spec and its stages (docs/lgc.md):
//
//   lgc(ratio=0.05, bits=2, ramp=0, entropy=1, zstd=1, train=0, ae_steps=20,
//       ae_optimizer=adam, ae_lr=0.001, latent=qsgd(bits=8,bucket=64), innovation=0.01,
//       ae_wait=0)
//
// One protocol, two-phase rounds with exact error feedback. The round's leader sends
// first, on a support it picks from this round's update (its top-k by magnitude); the
// coordinator pushes what it sent to the other clients (LgcLatent), and each of them sends
// its values on that support as a prediction from the leader's plus a correction. The
// coordinator rebuilds exactly what each client computed (CRC32C-checked), so every client
// keeps what was not sent in its residual: nothing is lost, and as no code makes a miss
// larger, the residual cannot grow.
//
// Stage 2, the compact codes (lgc_codes.h), from the first round: the leader sends its
// support as a set and its values as sign and 3-bit log-magnitude cells, the followers
// their gain against those and their miss in `bits` bits (1, 2 or 4) a value with a step
// per 128. entropy=1 range-codes each body under a learned entropy model (lgc_entropy.h);
// with entropy=0, zstd=1 packs it with Zstandard (codecs/zstd_codec.h ZstdPack). ramp=N:
// the first N rounds send on a wider support, 2^N x ratio, then 2^(N-1) x ratio, ...
//
// Stage 3, the autoencoder (autoencoder.h), only with train=N > 0: the autoencoder trains
// at the coordinator, on a thread of its own, on the first N rounds' rebuilds (`ae_steps`
// steps a round's batch, over the batches of the last 8 rounds), read in the order of the
// leader's decoded values. The first round after those N that finds the training done
// opens stage 3 (the switch, kept in the LGC state before any client hears of it; with
// ae_wait=1 round N + 1 waits for the training instead). From then on the leader sends its support in value order with the latent of its values
// (`latent`: a dense codec of the codec library), each follower decodes it with its own
// decoder (blob "lgc-decoder") into a prediction p of its values v and sends the
// least-squares gain g = <v, p> / |p|^2 and the k * innovation largest entries of v - g p.
// Measured against the cells at equal bytes, the autoencoder codes the leader's values
// about 4x worse (docs/lgc.md), so train=0 (the compact codes throughout) is the default.
//
// --codec-warmup rounds (any codec, stage 1) may come first; none are needed.
#ifndef FEDLGC_MODES_LGC_LGC_PLAN_H_
#define FEDLGC_MODES_LGC_LGC_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fedlgc::lgc {

struct LgcPlan {
  double ratio = 0.05;
  int bits = 2;
  uint32_t ramp = 0;          // the first `ramp` LGC rounds use 2^(ramp - r + 1) x ratio
  bool entropy = true;        // the compact codes' bodies range-coded (lgc_entropy.h)
  bool zstd = true;           // with entropy=0: the bodies through ZstdPack
  uint32_t train_rounds = 0;  // 0: the autoencoder never codes (and does not train)
  uint32_t ae_steps = 20;
  std::string ae_optimizer = "adam";
  double ae_lr = 1e-3;
  std::string latent = "qsgd/1(bits=8,bucket=64,norm=l2,elias=0)";  // canonical spec
  double innovation = 0.01;
  // The autoencoder trains on a thread of its own, and the first round after the training
  // rounds that finds it done codes with it. ae_wait=1: that first round waits for it (a
  // switch on a known round, for runs that must repeat; the training rounds never wait).
  bool ae_wait = false;

  bool autoencoder() const { return train_rounds > 0; }

  // k of LGC round `lgc_round` (1 = the first round after the warm-up; 0 = the plan's k):
  // SupportSize, wider in the ramp.
  uint64_t SupportSizeAt(uint64_t dim, uint64_t lgc_round) const;

  uint64_t SupportSize(uint64_t dim) const;
  uint64_t InnovationSize(uint64_t support) const;
};

// nullopt when `spec` is not an lgc(...) spec; an error when it is one but malformed.
absl::StatusOr<std::optional<LgcPlan>> ParseLgcSpec(std::string_view spec);

// An LGC round's stage; the numbers are the wire's (protos::LgcStage, checked where both
// are seen, modes/lgc/lgc_driver.cc).
enum class LgcStage : uint32_t {
  kWarmUp = 1,       // a FedAvg round with the warm-up codec
  kCells = 2,        // the compact codes: the leader's cells, followers' bit corrections
  kAutoencoder = 3,  // the autoencoder's latent and corrections (train > 0)
};

// Stage of `round` (from 1) with `warmup` warm-up rounds, stage 3 from `switch_round` on
// (0: not yet; it is never below the first round past the training rounds).
inline LgcStage StageOf(const LgcPlan& plan, uint64_t round, uint64_t warmup,
                        uint64_t switch_round) {
  if (round <= warmup) return LgcStage::kWarmUp;
  return plan.autoencoder() && switch_round != 0 && round >= switch_round ? LgcStage::kAutoencoder
                                                                          : LgcStage::kCells;
}
// Whether `round`'s rebuilds train the autoencoder: the first train=N LGC rounds.
inline bool TrainsAutoencoder(const LgcPlan& plan, uint64_t round, uint64_t warmup) {
  return plan.autoencoder() && round > warmup && round <= warmup + plan.train_rounds;
}

// Frame specs of LGC payloads (the frame's range is the whole model). Stage 2 (lgc_codes.h):
// the leader's support set and cells, a follower's bit correction.
inline constexpr std::string_view kLeaderCellsSpec = "lgc-leader/2";
inline constexpr std::string_view kBitCorrectionSpec = "lgc-correction/2";
// Stage 3 (lgc_payload.h): the leader's ordered support and latent, a follower's gain and
// innovation against the round's latent (a leader payload's scale is its gain, and its
// innovation is against its own latent).
inline constexpr std::string_view kLeaderSpec = "lgc-leader/1";
inline constexpr std::string_view kCorrectionSpec = "lgc-correction/1";
inline bool IsLeaderSpec(std::string_view spec) {
  return spec == kLeaderSpec || spec == kLeaderCellsSpec;
}

}  // namespace fedlgc::lgc

#endif  // FEDLGC_MODES_LGC_LGC_PLAN_H_
