// How models mix in the decentralised modes, the parts both ends share.
//
// LSGD (Teng et al. 2019; docs/modes.md): a worker is pulled towards its
// leader, x <- (1 - c) x + c x_leader.
//
// Push-sum gossip (SGP, Assran et al. 2019; docs/modes.md): the parts both
// ends of the relay share: the time-varying directed exponential graph, and the one
// function that turns a decoded share into the vector both its sender and its receiver
// use, so that what the sender gives up is bit for bit what the receiver gets.
//
// A node holds (x, w) and trains on z = x / w. Each round it keeps p (x, w) and pushes
// p (x, w) to its out-peer, p = 1 / (out-peers + 1). With a lossy codec the share sent is
// C(p (x - w m)) plus the exact p w m, where m is a reference both ends hold (the round's
// network mean, or zero): the sender subtracts exactly the share that was delivered, so
// the sum of x over the nodes (and of w) never changes, whatever the codec loses.
#ifndef FEDLGC_CORE_MIXING_H_
#define FEDLGC_CORE_MIXING_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::codecs {
class Codec;
struct EncodeOptions;
}  // namespace fedlgc::codecs

namespace fedlgc::core {

// x <- (1 - c) x + c leader, so that x - leader shrinks by exactly (1 - c).
void Pull(std::span<float> x, std::span<const float> leader, double c);

// Out-peer of node `index` (of n, in a fixed order) in round `round` (1-based) of the
// forward directed exponential graph: index + 2^j mod n, with j = (round - 1) mod
// (floor(log2(n - 1)) + 1). Every round is a permutation, so each node also receives
// exactly one share. Returns `index` itself when n < 2 (no peer).
size_t ExponentialPeer(size_t index, size_t n, uint64_t round);
// Rounds after which mixing with no gradients gives every node the exact average when
// n is a power of two: log2(n).
int ExponentialHops(size_t n);

// out = decoded + pw * reference (reference empty: zero). Compiled without FMA
// contraction so that every caller on one architecture gets the same bits.
void ReconstructShare(std::span<const float> decoded, double pw, std::span<const float> reference,
                      std::span<float> out);
// What the sender encodes: p x - p w reference (reference empty: p x).
void ShareResidual(std::span<const float> x, double p, double w, std::span<const float> reference,
                   std::span<float> out);

// A lossy message of `target`: its frames and, per frame, the scale that brings the decoded
// frame closest to the target, <D, v> / |D|^2 (least squares; 1 when D is zero). An
// unbiased codec's decoding D = v + noise overshoots on average by the noise; scaled, the
// error |v - s D|^2 = |v|^2 (1 - cos^2(v, D)) never exceeds |v|^2, so a receiver that adds
// s D comes closer to v than with D or with nothing, whatever the codec (for top-k, s = 1).
// `decoded` holds the scaled decoding, as a receiver computes it.
struct ScaledFrames {
  std::vector<std::string> frames;
  std::vector<float> scales;  // one per frame
  std::vector<float> decoded;
};
absl::StatusOr<ScaledFrames> EncodeScaled(std::span<const float> target, codecs::Codec& codec,
                                          const codecs::EncodeOptions& opts);
// The one multiply both ends use to scale a decoded frame.
void ScaleInPlace(std::span<float> values, float scale);

// One push-sum share: its frames (the wire chunks) with their scales, its push-sum weight
// p w, and `full`, the vector the receiver adds and the sender gives up.
struct Share {
  double pw = 0;
  std::vector<std::string> frames;
  std::vector<float> scales;
  std::vector<float> full;
};

// Encodes p (x - w reference) with `codec` (no error feedback: the sender keeps what the
// codec loses), scaled per frame (EncodeScaled), and decodes the frames back, as the relay
// will, into `full`.
absl::StatusOr<Share> MakeShare(std::span<const float> x, double w, double p,
                                std::span<const float> reference, codecs::Codec& codec,
                                const codecs::EncodeOptions& opts);
// Decodes frames of a dim-coordinate vector into `out` (zero where no frame covers), each
// frame times its scale (`scales` empty: 1).
absl::Status DecodeFrames(const codecs::Codec& codec, const std::vector<std::string>& frames,
                          std::span<const float> scales, std::span<float> out);

// z = x / w.
std::vector<float> Debias(std::span<const float> x, double w);

// sqrt(mean_i ||z_i - zbar||^2) with zbar = sum x_i / sum w_i over the given nodes' de-biased
// models z_i = x_i / w_i. 0 for fewer than two nodes.
double ConsensusDistance(const std::vector<std::span<const float>>& x,
                         const std::vector<double>& w);

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_MIXING_H_
