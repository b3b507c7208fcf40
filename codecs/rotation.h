// A random rotation of R^d that every party of a round can make from one public seed: a
// random permutation, random signs, and a normalized Walsh-Hadamard transform over the
// first m = 2^floor(log2 d) coordinates, then other random signs and a second one over the
// last m (for d not a power of two), so that every output coordinate mixes at least d/2
// inputs and no padding is needed. The map is orthogonal (each step is), so norms are
// kept and the inverse is the same steps backwards.
//
// Why: after it, each coordinate of a vector x is close to N(0, ||x||^2 / d) however the
// mass of x was spread (Suresh et al. 2017, "Distributed Mean Estimation with Limited
// Communication"; Kairouz et al. 2021, "The Distributed Discrete Gaussian Mechanism"), so
// a grid whose span is fixed in advance from a norm bound fits every coordinate with high
// probability: secure aggregation's shared grid (sum_code.h) relies on it.
//
// Thread-safety: immutable after Create; Apply and Invert may run concurrently.
#ifndef FEDLGC_CODECS_ROTATION_H_
#define FEDLGC_CODECS_ROTATION_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::codecs {

class Rotation {
 public:
  // INVALID_ARGUMENT for dim 0 or above 2^31.
  static absl::StatusOr<Rotation> Create(uint64_t dim, uint64_t seed);

  uint64_t dim() const { return perm_.size(); }
  // x <- R x. REQUIRES: x.size() == dim().
  void Apply(std::span<double> x) const;
  // x <- R^T x (the inverse). REQUIRES: x.size() == dim().
  void Invert(std::span<double> x) const;

 private:
  Rotation(std::vector<uint32_t> perm, uint64_t seed);
  // The sign of coordinate i in pass `pass` (0 or 1): +1 or -1.
  double Sign(int pass, uint64_t i) const;

  std::vector<uint32_t> perm_;  // output i takes input perm_[i]
  uint64_t window_;             // m: the Hadamard transforms' size
  uint32_t keys_[2];
};

// The normalized Walsh-Hadamard transform of x in place (its own inverse).
// REQUIRES: x.size() is a power of two.
void WalshHadamard(std::span<double> x);

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_ROTATION_H_
