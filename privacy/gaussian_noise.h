// Gaussian noise for differential privacy: independent N(0, sd^2) draws from a
// cryptographic generator (keystream.h, from a fresh key from OpenSSL's generator), 53-bit uniforms
// turned normal by the Box-Muller transform. The noise of a DP round must be unpredictable: a
// seeded generator would let whoever knows the seed take it back out. (Floating-point noise leaks
// through its low bits in theory, Mironov 2012; distributed DP's integer noise will not have that
// issue.)
#ifndef FEDLGC_PRIVACY_GAUSSIAN_NOISE_H_
#define FEDLGC_PRIVACY_GAUSSIAN_NOISE_H_

#include <span>

#include "absl/status/status.h"
#include "privacy/key_agreement.h"

namespace fedlgc::privacy {

// values[i] += N(0, sd^2), from a fresh random key. INVALID_ARGUMENT for sd < 0 or not
// finite; INTERNAL if OpenSSL fails.
absl::Status AddGaussianNoise(double sd, std::span<float> values);
// The same from `key`: reproducible, for tests.
absl::Status AddGaussianNoise(double sd, const Key32& key, std::span<float> values);

}  // namespace fedlgc::privacy

#endif  // FEDLGC_PRIVACY_GAUSSIAN_NOISE_H_
