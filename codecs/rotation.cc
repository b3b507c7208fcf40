// A public random rotation (see rotation.h).
#include "codecs/rotation.h"

#include <bit>
#include <cmath>
#include <numeric>

#include "base/str.h"
#include "codecs/rng.h"

namespace fedlgc::codecs {

void WalshHadamard(std::span<double> x) {
  const size_t n = x.size();
  for (size_t h = 1; h < n; h *= 2) {
    for (size_t i = 0; i < n; i += 2 * h) {
      for (size_t j = i; j < i + h; ++j) {
        const double a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const double norm = 1.0 / std::sqrt(static_cast<double>(n));
  for (double& v : x) v *= norm;
}

absl::StatusOr<Rotation> Rotation::Create(uint64_t dim, uint64_t seed) {
  if (dim == 0 || dim > (uint64_t{1} << 31)) {
    return absl::InvalidArgumentError(StrCat("a rotation of ", dim, " coordinates"));
  }
  std::vector<uint32_t> perm(dim);
  std::iota(perm.begin(), perm.end(), 0u);
  SplitMix rng(Mix64(seed ^ 0x5EC0A661E5ull));
  for (uint64_t i = dim - 1; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);
  return Rotation(std::move(perm), seed);
}

Rotation::Rotation(std::vector<uint32_t> perm, uint64_t seed)
    : perm_(std::move(perm)), window_(std::bit_floor(perm_.size())) {
  keys_[0] = BlockKey(seed, 0x51);
  keys_[1] = BlockKey(seed, 0x52);
}

double Rotation::Sign(int pass, uint64_t i) const {
  return (HashBits(keys_[pass], static_cast<uint32_t>(i)) & 1) ? -1.0 : 1.0;
}

void Rotation::Apply(std::span<double> x) const {
  const uint64_t d = dim();
  std::vector<double> y(d);
  for (uint64_t i = 0; i < d; ++i) y[i] = x[perm_[i]] * Sign(0, i);
  WalshHadamard(std::span<double>(y).first(window_));
  if (window_ < d) {
    for (uint64_t i = 0; i < d; ++i) y[i] *= Sign(1, i);
    WalshHadamard(std::span<double>(y).last(window_));
  }
  std::copy(y.begin(), y.end(), x.begin());
}

void Rotation::Invert(std::span<double> x) const {
  const uint64_t d = dim();
  if (window_ < d) {
    WalshHadamard(x.last(window_));
    for (uint64_t i = 0; i < d; ++i) x[i] *= Sign(1, i);
  }
  WalshHadamard(x.first(window_));
  std::vector<double> y(d);
  for (uint64_t i = 0; i < d; ++i) y[perm_[i]] = x[i] * Sign(0, i);
  std::copy(y.begin(), y.end(), x.begin());
}

}  // namespace fedlgc::codecs
