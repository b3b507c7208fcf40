// Distributed differential privacy on secure aggregation's integer codes: the Skellam
// mechanism (Agarwal, Kairouz and Liu 2021, "The Skellam Mechanism for Differentially
// Private Federated Learning"). Each client adds Skellam noise (a Poisson variable minus
// another of the same mean) of variance v / n to each coordinate of its integer code, so
// that the sum of n clients' codes carries Skellam noise of variance v (the family is
// closed under sums) and the coordinator never sees a sum without it.
//
// Its Renyi DP at order alpha, for integer codes whose neighbouring sums differ by at most
// l1 in L1 norm and l2 in L2 norm (Agarwal et al., Theorem 3.5, in integer units):
//   alpha l2^2 / (2 v) + min(((2 alpha - 1) l2^2 + 6 l1) / (4 v^2), 3 l1 / (2 v)).
// Over a Poisson sample of rate q its RDP at integer orders is bounded by Zhu and Wang
// 2019's general upper bound ("Poisson Subsampled Renyi Differential Privacy", Theorem 5):
//   1/(alpha - 1) log((1 - q)^(alpha-1) (alpha q - q + 1)
//                     + binom(alpha, 2) q^2 (1 - q)^(alpha-2) e^eps(2)
//                     + 3 sum_{l=3..alpha} binom(alpha, l) (1 - q)^(alpha-l) q^l e^((l-1) eps(l))),
// and by the unsampled RDP: the smaller is taken. RDP grows with the order, so a fractional
// order's is bounded by the next integer's.
//
// The noise comes from a cryptographic keystream (keystream.h) with a fresh key from
// OpenSSL's generator: exact Poisson draws by inversion below a mean of 10 and by Hormann's
// transformed rejection (PTRS, 1993) above.
#ifndef FEDLGC_PRIVACY_SKELLAM_H_
#define FEDLGC_PRIVACY_SKELLAM_H_

#include <cstdint>
#include <functional>
#include <span>

#include "absl/status/status.h"
#include "privacy/key_agreement.h"

namespace fedlgc::privacy {

// One step of the Skellam mechanism in integer units: sensitivities and the sum's noise
// variance.
struct SkellamStep {
  double l1 = 0;        // L1 sensitivity
  double l2 = 0;        // L2 sensitivity
  double variance = 0;  // of the noise on each coordinate of the sum

  // Its RDP at order alpha > 1 (+infinity for no noise).
  double Rdp(double alpha) const;
};

// The sensitivities of integer codes of vectors of L2 norm at most `l2` (in grid units)
// rounded stochastically, coordinate by coordinate, over `dim` coordinates: rounding moves
// each coordinate by less than 1, so the L2 norm grows by at most sqrt(dim), and an
// integer vector's L1 norm is at most min(sqrt(dim) L2, L2^2).
SkellamStep RoundedSensitivity(double l2, uint64_t dim);

// Zhu and Wang's bound on the RDP at integer order `alpha` >= 2 of `rdp` (the RDP of the
// mechanism at each integer order >= 2) over a Poisson sample of rate q in [0, 1], no more
// than `rdp(alpha)` itself.
double PoissonSampledRdp(uint64_t alpha, double q, const std::function<double(uint64_t)>& rdp);

// The sampled Skellam mechanism's RDP at any order > 1 (the next integer's for a
// fractional one).
double SampledSkellamRdp(const SkellamStep& step, double q, double alpha);

// values[i] += Skellam noise of variance `variance` (Poisson(v/2) - Poisson(v/2)) from a
// fresh key; INVALID_ARGUMENT for a variance that is not finite and >= 0 or above 1e15.
absl::Status AddSkellamNoise(double variance, std::span<int64_t> values);
// The same from `key`: reproducible, for tests.
absl::Status AddSkellamNoise(double variance, const Key32& key, std::span<int64_t> values);

}  // namespace fedlgc::privacy

#endif  // FEDLGC_PRIVACY_SKELLAM_H_
