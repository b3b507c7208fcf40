// Shamir's secret sharing (Shamir 1979, "How to Share a Secret") byte by byte over GF(2^8)
// (the AES field, x^8 + x^4 + x^3 + x + 1): a secret of any length splits into n shares,
// any t of which rebuild it while t - 1 reveal nothing of it. Secure aggregation shares each
// client's mask seed and key among its neighbours this way, so that the masks of a client
// who drops after masking can still be removed (SecAgg, Bonawitz et al. 2017). At most 255
// shares (the field's non-zero points).
#ifndef FEDLGC_PRIVACY_SHAMIR_H_
#define FEDLGC_PRIVACY_SHAMIR_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::privacy {

struct Share {
  uint8_t x = 0;           // the point, 1 to 255
  std::vector<uint8_t> y;  // the polynomials' values there, one per byte of the secret
  bool operator==(const Share&) const = default;
};

// n shares of `secret` (points 1 to n), any t of which rebuild it; the polynomials'
// coefficients come from OpenSSL's generator. INVALID_ARGUMENT unless 1 <= t <= n <= 255.
absl::StatusOr<std::vector<Share>> SplitSecret(std::span<const uint8_t> secret, int t, int n);

// The secret of the polynomial through `shares` (Lagrange at 0). Given at least t shares of
// one split it is the secret; given fewer, a value that says nothing of it. INVALID_ARGUMENT
// for no shares, a point 0 or twice, or shares of different lengths.
absl::StatusOr<std::vector<uint8_t>> CombineShares(std::span<const Share> shares);
// The value at point x of the polynomial through `shares` (CombineShares is x = 0): with
// t shares of a split, the share of point x that split dealt, so that any other share can
// be checked against them. The same errors as CombineShares.
absl::StatusOr<std::vector<uint8_t>> InterpolateAt(std::span<const Share> shares, uint8_t x);

}  // namespace fedlgc::privacy

#endif  // FEDLGC_PRIVACY_SHAMIR_H_
