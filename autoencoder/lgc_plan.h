// An LGC job's codec spec and its stages (docs/lgc.md):
//
//   lgc(ratio=0.01, innovation=0.01, latent=qsgd(bits=8,bucket=64), train=5,
//       ae_steps=20, ae_optimizer=adam, ae_lr=0.001, echo=0, predict=0, code=fp32, bits=1,
//       ramp=0)
//
// ratio: support size k = ceil(ratio * dim); innovation: k_inn = ceil(innovation * k);
// latent: a dense codec of the codec library for the latent; train: rounds of stage 2;
// ae_steps: autoencoder steps per training round, over the batches of the last 8 rounds
// (newest first): with a few dozen rounds, one step per round would leave it untrained.
// echo=1: in stage 3 each client fetches the coordinator's reconstruction of its values
// (blob "lgc-echo", k floats of downlink) and logs its relative error |v - echo| / |v| (a
// diagnostic: error feedback stays the paper's rule, the support counts as sent).
// predict=1: the paper's two-phase rounds, with predictive coding and exact error feedback
// in stage 3. The leader sends first, on a support it picks from this round's update (its
// top-k: the ascending, monotone signal the autoencoder is made for); the coordinator
// pushes that support and, in stage 3, the leader's latent to the other clients (LgcLatent).
// Stage 2: they send their values on it. Stage 3: each decodes the latent with its own
// decoder (blob "lgc-decoder", once per job) into a prediction p of its values v, and sends
// the least-squares gain g = <v, p> / |p|^2 and its innovation against it: the k_inn
// largest entries of v - g p. The coordinator rebuilds g p + innovation, exactly what the
// client computed, so the client keeps v - g p - innovation in its residual: nothing is
// lost, and as |v - g p| <= |v| the residual cannot grow through the autoencoder (as it did
// when the paper's feedback was made exact with the one-phase protocol). The decoder
// reads no innovation (zeros, in training too). Cost: everyone trains at once, but the
// followers send only after the leader's upload (a few KB) has arrived.
// Stage 1 is the job's --codec-warmup rounds (any codec), stage 2 the next `train`
// rounds (every client sends its values on the support; the coordinator averages them
// and takes `ae_steps` autoencoder steps), stage 3 the rest (the leader sends the latent of its
// values, everyone their innovation; the coordinator decodes each client).
//
// code=cells (predict=1 only): stage 2 is compressed too (lgc_codes.h): the leader sends
// its support as a set and its values as sign and 3-bit log-magnitude cells, the followers
// their miss against those in `bits` bits (1, 2 or 4) a value with a step per 128; the
// autoencoder trains at the coordinator on what it rebuilds. ramp=N (code=cells): the
// first N LGC rounds send on a wider support, 2^N x ratio, then 2^(N-1) x ratio, ...
// (DGC's warm-up, in the compact codes); the autoencoder trains only on rounds of the
// plan's k. code=fp32: stage 2 sends
// float32 values on an ordered support.
//
// predict=0: the support of a round is the leader's top-k from the round before (sent
// back with its payload); after the warm-up rounds, the top-k of their aggregate; when no
// leader payload arrived, the round's support again. One round of lag buys single-phase
// rounds: no client waits for the leader. It costs accuracy (docs/results.md): the
// support misses much of the round's update.
#ifndef FEDLGC_AUTOENCODER_LGC_PLAN_H_
#define FEDLGC_AUTOENCODER_LGC_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fedlgc::autoencoder {

struct LgcPlan {
  double ratio = 0.01;
  double innovation = 0.01;
  std::string latent = "qsgd/1(bits=8,bucket=64,norm=l2,elias=0)";  // canonical spec
  uint32_t train_rounds = 5;
  uint32_t ae_steps = 20;
  std::string ae_optimizer = "adam";
  double ae_lr = 1e-3;
  bool echo = false;
  bool predict = false;
  bool cells = false;  // code=cells
  int bits = 1;
  uint32_t ramp = 0;  // code=cells: the first `ramp` LGC rounds use 2^(ramp - r + 1) x ratio

  // k of LGC round `lgc_round` (1 = the first round after the warm-up; 0 = the plan's k):
  // SupportSize, wider in the ramp.
  uint64_t SupportSizeAt(uint64_t dim, uint64_t lgc_round) const;

  uint64_t SupportSize(uint64_t dim) const;
  uint64_t InnovationSize(uint64_t support) const;
};

// nullopt when `spec` is not an lgc(...) spec; an error when it is one but malformed.
absl::StatusOr<std::optional<LgcPlan>> ParseLgcSpec(std::string_view spec);

// Stage of `round` (from 1) with `warmup` warm-up rounds: 1, 2 or 3.
inline int LgcStage(const LgcPlan& plan, uint64_t round, uint64_t warmup) {
  if (round <= warmup) return 1;
  return round <= warmup + plan.train_rounds ? 2 : 3;
}

// Frame specs of LGC payloads (the frame's range is the whole model).
inline constexpr std::string_view kLeaderSpec = "lgc-leader/1";
inline constexpr std::string_view kValuesSpec = "lgc-values/1";
inline constexpr std::string_view kInnovationSpec = "lgc-innovation/1";
// predict=1: a follower's gain and innovation against the round's latent (lgc_payload.h).
// A leader payload's scale is its gain then, and its innovation is against its own latent.
inline constexpr std::string_view kCorrectionSpec = "lgc-correction/1";
// code=cells, stage 2 (lgc_codes.h): the leader's support set and cells, a follower's
// bit correction.
inline constexpr std::string_view kLeaderCellsSpec = "lgc-leader/2";
inline constexpr std::string_view kBitCorrectionSpec = "lgc-correction/2";
inline bool IsLeaderSpec(std::string_view spec) {
  return spec == kLeaderSpec || spec == kLeaderCellsSpec;
}

}  // namespace fedlgc::autoencoder

#endif  // FEDLGC_AUTOENCODER_LGC_PLAN_H_
