// Counter-based randomness for stochastic rounding. A value depends only on
// (seed, block, i), never on what was drawn before, so an encoder produces identical
// bits whether it encodes a vector whole or in chunks, and loops over i vectorize.
#ifndef FEDLGC_CODECS_RNG_H_
#define FEDLGC_CODECS_RNG_H_

#include <cstdint>

namespace fedlgc::codecs {

// SplitMix64 finalizer: a bijective 64-bit mixer.
constexpr uint64_t Mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Key for block `block` of a stream encoded with `seed`.
constexpr uint32_t BlockKey(uint64_t seed, uint64_t block) {
  return static_cast<uint32_t>(Mix64(seed ^ Mix64(block + 0x632BE59BD9B4E019ull)) >> 32);
}

// 32 random bits for element i of the block with key `key` (murmur3's fmix32 of a
// Weyl sequence). Passes the statistical checks the codec tests make; not crypto.
inline uint32_t HashBits(uint32_t key, uint32_t i) {
  uint32_t h = key ^ (i * 0x9E3779B9u);
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

// Uniform in [0, 1) with 24 random bits.
inline float HashUniform(uint32_t key, uint32_t i) {
  return static_cast<float>(HashBits(key, i) >> 8) * (1.0f / 16777216.0f);
}

// Sequential generator (xoshiro-like SplitMix64 stream) for non-vectorized uses such as
// sampling index sets. Not thread-safe.
class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0 (Lemire's multiply-shift; the bias is below 2^-32 for n < 2^32).
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_RNG_H_
