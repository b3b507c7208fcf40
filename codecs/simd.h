// Function multi-versioning for the hot loops: GCC and clang emit an AVX2 clone and a
// baseline clone and pick one at load time, so one binary runs everywhere and uses AVX2
// where the CPU has it.
#ifndef FEDLGC_CODECS_SIMD_H_
#define FEDLGC_CODECS_SIMD_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#if defined(__x86_64__) && !defined(FEDLGC_NO_MULTIVERSION)
#define FEDLGC_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define FEDLGC_MULTIVERSION
#endif

namespace fedlgc::codecs {

inline uint32_t FloatBits(float f) { return std::bit_cast<uint32_t>(f); }
inline float BitsFloat(uint32_t u) { return std::bit_cast<float>(u); }

// Index of the first non-finite value in x, or x.size() when all are finite.
size_t FindNonFinite(std::span<const float> x);

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_SIMD_H_
