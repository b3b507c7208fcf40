// Shamir's secret sharing over GF(2^8) (see shamir.h).
#include "privacy/shamir.h"

#include <openssl/rand.h>

#include <array>
#include <set>

#include "base/str.h"

namespace fedlgc::privacy {
namespace {

// GF(2^8) with the AES polynomial: logarithms and powers of the generator 3.
struct Field {
  std::array<uint8_t, 512> exp{};
  std::array<uint8_t, 256> log{};
  Field() {
    unsigned v = 1;
    for (int i = 0; i < 255; ++i) {
      exp[i] = static_cast<uint8_t>(v);
      log[v] = static_cast<uint8_t>(i);
      v ^= v << 1;  // times 3 = times (x + 1)
      if (v & 0x100) v ^= 0x11b;
    }
    for (int i = 255; i < 512; ++i) exp[i] = exp[i - 255];
  }
  uint8_t Mul(uint8_t a, uint8_t b) const { return a == 0 || b == 0 ? 0 : exp[log[a] + log[b]]; }
  // a / b, b != 0.
  uint8_t Div(uint8_t a, uint8_t b) const { return a == 0 ? 0 : exp[log[a] + 255 - log[b]]; }
};

const Field& F() {
  static const Field field;
  return field;
}

}  // namespace

absl::StatusOr<std::vector<Share>> SplitSecret(std::span<const uint8_t> secret, int t, int n) {
  if (!(t >= 1 && t <= n && n <= 255)) {
    return absl::InvalidArgumentError(
        StrCat("secret sharing: ", t, " of ", n, " shares (1 <= t <= n <= 255)"));
  }
  // Per byte of the secret, a polynomial of degree t - 1 whose constant is that byte.
  std::vector<uint8_t> coef(secret.size() * static_cast<size_t>(t - 1));
  if (!coef.empty() && RAND_bytes(coef.data(), static_cast<int>(coef.size())) != 1) {
    return absl::InternalError("OpenSSL: RAND_bytes failed");
  }
  const Field& f = F();
  std::vector<Share> shares(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    Share& s = shares[static_cast<size_t>(i)];
    s.x = static_cast<uint8_t>(i + 1);
    s.y.resize(secret.size());
    for (size_t b = 0; b < secret.size(); ++b) {
      // Horner from the highest coefficient down to the secret byte.
      uint8_t acc = 0;
      for (int k = t - 2; k >= 0; --k) {
        acc = f.Mul(acc, s.x) ^ coef[b * static_cast<size_t>(t - 1) + static_cast<size_t>(k)];
      }
      s.y[b] = f.Mul(acc, s.x) ^ secret[b];
    }
  }
  return shares;
}

absl::StatusOr<std::vector<uint8_t>> CombineShares(std::span<const Share> shares) {
  return InterpolateAt(shares, 0);
}

absl::StatusOr<std::vector<uint8_t>> InterpolateAt(std::span<const Share> shares, uint8_t x) {
  if (shares.empty()) return absl::InvalidArgumentError("secret sharing: no shares to combine");
  std::set<uint8_t> points;
  for (const Share& s : shares) {
    if (s.x == 0 || !points.insert(s.x).second) {
      return absl::InvalidArgumentError(
          StrCat("secret sharing: share point ", static_cast<int>(s.x), " is 0 or given twice"));
    }
    if (s.y.size() != shares[0].y.size()) {
      return absl::InvalidArgumentError(
          StrCat("secret sharing: shares of ", s.y.size(), " and ", shares[0].y.size(), " bytes"));
    }
  }
  const Field& f = F();
  // Lagrange at x: sum_i y_i prod_{j != i} (x - x_j) / (x_i - x_j); minus is xor here.
  std::vector<uint8_t> value(shares[0].y.size(), 0);
  for (size_t i = 0; i < shares.size(); ++i) {
    if (shares[i].x == x) return shares[i].y;
    uint8_t basis = 1;
    for (size_t j = 0; j < shares.size(); ++j) {
      if (j != i) basis = f.Mul(basis, f.Div(x ^ shares[j].x, shares[i].x ^ shares[j].x));
    }
    for (size_t b = 0; b < value.size(); ++b) value[b] ^= f.Mul(shares[i].y[b], basis);
  }
  return value;
}

}  // namespace fedlgc::privacy
