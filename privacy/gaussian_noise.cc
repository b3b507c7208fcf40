// Gaussian noise from AES-256-CTR (see gaussian_noise.h).
#include "privacy/gaussian_noise.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/str.h"
#include "privacy/keystream.h"

namespace fedlgc::privacy {

absl::Status AddGaussianNoise(double sd, std::span<float> values) {
  Key32 key{};
  if (RAND_bytes(key.data(), static_cast<int>(key.size())) != 1) {
    return absl::InternalError("OpenSSL: RAND_bytes failed");
  }
  return AddGaussianNoise(sd, key, values);
}

absl::Status AddGaussianNoise(double sd, const Key32& key, std::span<float> values) {
  if (!(sd >= 0) || !std::isfinite(sd)) {
    return absl::InvalidArgumentError(StrCat("Gaussian noise: standard deviation ", sd));
  }
  if (sd == 0 || values.empty()) return absl::OkStatus();
  auto stream = Keystream::Create(key);
  if (!stream.ok()) return stream.status();
  // Two words of the stream per pair of draws.
  constexpr size_t kPairs = 4096;
  std::vector<uint64_t> words(2 * kPairs);
  for (size_t at = 0; at < values.size(); at += 2 * kPairs) {
    const size_t n = std::min(2 * kPairs, values.size() - at);
    if (absl::Status st = stream->Next(std::span(words).first(n + n % 2)); !st.ok()) return st;
    for (size_t i = 0; i < n; i += 2) {
      // Uniforms: u1 in (0, 1] (the top 53 bits, plus one, over 2^53), u2 in [0, 1).
      const double u1 = (static_cast<double>(words[i] >> 11) + 1) * 0x1p-53;
      const double u2 = static_cast<double>(words[i + 1] >> 11) * 0x1p-53;
      const double r = sd * std::sqrt(-2 * std::log(u1));
      values[at + i] += static_cast<float>(r * std::cos(2 * M_PI * u2));
      if (i + 1 < n) values[at + i + 1] += static_cast<float>(r * std::sin(2 * M_PI * u2));
    }
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::privacy
