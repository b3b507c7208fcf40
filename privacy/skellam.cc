// The Skellam mechanism: its RDP, sampled, and its noise (see skellam.h).
#include "privacy/skellam.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/str.h"
#include "privacy/keystream.h"

namespace fedlgc::privacy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double LogBinom(double n, double k) {
  return std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1);
}

// Uniform draws in [0, 1) with 53 bits, from a keystream, a block at a time.
class Uniforms {
 public:
  explicit Uniforms(Keystream stream) : stream_(std::move(stream)), words_(4096) {}
  absl::StatusOr<double> Next() {
    if (at_ == words_.size()) {
      if (absl::Status st = stream_.Next(words_); !st.ok()) return st;
      at_ = 0;
    }
    return static_cast<double>(words_[at_++] >> 11) * 0x1.0p-53;
  }

 private:
  Keystream stream_;
  std::vector<uint64_t> words_;
  size_t at_ = words_.size();
};

// A Poisson draw of mean `lambda` (>= 0): by inversion below 10, else by Hormann's PTRS.
absl::StatusOr<int64_t> Poisson(double lambda, Uniforms& u) {
  if (lambda == 0) return 0;
  if (lambda < 10) {
    const double limit = std::exp(-lambda);
    double p = 1;
    int64_t k = -1;
    do {
      auto v = u.Next();
      if (!v.ok()) return v.status();
      p *= *v;
      ++k;
    } while (p > limit);
    return k;
  }
  const double slam = std::sqrt(lambda), loglam = std::log(lambda);
  const double b = 0.931 + 2.53 * slam;
  const double a = -0.059 + 0.02483 * b;
  const double inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
  const double vr = 0.9277 - 3.6224 / (b - 2);
  for (;;) {
    auto uu = u.Next();
    auto vv = u.Next();
    if (!uu.ok()) return uu.status();
    if (!vv.ok()) return vv.status();
    const double U = *uu - 0.5, V = *vv;
    const double us = 0.5 - std::abs(U);
    const double k = std::floor((2 * a / us + b) * U + lambda + 0.43);
    if (us >= 0.07 && V <= vr) return static_cast<int64_t>(k);
    if (k < 0 || (us < 0.013 && V > us)) continue;
    if (std::log(V) + std::log(inv_alpha) - std::log(a / (us * us) + b) <=
        -lambda + k * loglam - std::lgamma(k + 1)) {
      return static_cast<int64_t>(k);
    }
  }
}

}  // namespace

double SkellamStep::Rdp(double alpha) const {
  if (!(variance > 0)) return kInf;
  const double v = variance;
  return alpha * l2 * l2 / (2 * v) +
         std::min(((2 * alpha - 1) * l2 * l2 + 6 * l1) / (4 * v * v), 3 * l1 / (2 * v));
}

SkellamStep RoundedSensitivity(double l2, uint64_t dim) {
  SkellamStep s;
  const double root = std::sqrt(static_cast<double>(dim));
  s.l2 = l2 + root;
  s.l1 = s.l2 * std::min(root, s.l2);
  return s;
}

double PoissonSampledRdp(uint64_t alpha, double q, const std::function<double(uint64_t)>& rdp) {
  const double own = rdp(alpha);
  if (q <= 0) return 0;
  if (q >= 1) return own;
  const double a = static_cast<double>(alpha);
  const double log_q = std::log(q), log_1q = std::log1p(-q);
  // log of the sum, term by term in log space.
  double hi = -kInf;
  std::vector<double> terms;
  terms.push_back((a - 1) * log_1q + std::log(a * q - q + 1));
  terms.push_back(LogBinom(a, 2) + 2 * log_q + (a - 2) * log_1q + rdp(2));
  for (uint64_t l = 3; l <= alpha; ++l) {
    const double ld = static_cast<double>(l);
    terms.push_back(std::log(3.0) + LogBinom(a, ld) + (a - ld) * log_1q + ld * log_q +
                    (ld - 1) * rdp(l));
  }
  for (double t : terms) hi = std::max(hi, t);
  if (hi == kInf) return own;
  double sum = 0;
  for (double t : terms) sum += std::exp(t - hi);
  return std::min(own, (hi + std::log(sum)) / (a - 1));
}

double SampledSkellamRdp(const SkellamStep& step, double q, double alpha) {
  const uint64_t order = static_cast<uint64_t>(std::ceil(std::max(alpha, 2.0)));
  return PoissonSampledRdp(order, q, [&](uint64_t l) { return step.Rdp(static_cast<double>(l)); });
}

absl::Status AddSkellamNoise(double variance, std::span<int64_t> values) {
  Key32 key{};
  if (RAND_bytes(key.data(), static_cast<int>(key.size())) != 1) {
    return absl::InternalError("OpenSSL: RAND_bytes failed");
  }
  return AddSkellamNoise(variance, key, values);
}

absl::Status AddSkellamNoise(double variance, const Key32& key, std::span<int64_t> values) {
  if (!std::isfinite(variance) || variance < 0 || variance > 1e15) {
    return absl::InvalidArgumentError(
        StrCat("Skellam noise of variance ", variance, " (finite, in [0, 1e15])"));
  }
  auto stream = Keystream::Create(key);
  if (!stream.ok()) return stream.status();
  Uniforms u(*std::move(stream));
  for (int64_t& v : values) {
    auto plus = Poisson(variance / 2, u);
    if (!plus.ok()) return plus.status();
    auto minus = Poisson(variance / 2, u);
    if (!minus.ok()) return minus.status();
    v += *plus - *minus;
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::privacy
