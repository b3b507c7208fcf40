// Top-k and random-k selection (see topk.h).
#include "codecs/topk.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>

#include "codecs/rng.h"
#include "codecs/simd.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace fedlgc::codecs {
namespace {

// Keeps, in index order, every i with |x_i| > tau and the first (k - #greater) with
// |x_i| == tau. `order` lists the positions to consider (ascending); empty = all of x.
void TakeAtThreshold(std::span<const float> x, const std::vector<uint32_t>* order, float tau,
                     size_t k, std::vector<uint32_t>* idx) {
  size_t greater = 0;
  auto visit = [&](auto&& fn) {
    if (order == nullptr) {
      for (size_t i = 0; i < x.size(); ++i) fn(static_cast<uint32_t>(i));
    } else {
      for (uint32_t i : *order) fn(i);
    }
  };
  visit([&](uint32_t i) { greater += std::fabs(x[i]) > tau; });
  size_t equal_quota = k - std::min(k, greater);
  idx->clear();
  idx->reserve(k);
  visit([&](uint32_t i) {
    const float a = std::fabs(x[i]);
    if (a > tau) {
      idx->push_back(i);
    } else if (a == tau && equal_quota > 0) {
      idx->push_back(i);
      --equal_quota;
    }
  });
}

// Indices i in [0, len) of block `p` with |p_i| >= tau, written to out; returns their
// count. Four lanes at a time are compared and reduced to a bit mask, so the scan runs
// near memory speed; only the (rare) set bits are written out.
size_t CollectBlock(const float* p, size_t len, float tau, uint32_t base, uint32_t* out) {
  size_t c = 0;
  size_t i = 0;
#if defined(__SSE2__)
  const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7FFFFFFF));
  const __m128 t = _mm_set1_ps(tau);
  for (; i + 16 <= len; i += 16) {
    const int m0 = _mm_movemask_ps(_mm_cmpge_ps(_mm_and_ps(_mm_loadu_ps(p + i), abs_mask), t));
    const int m1 = _mm_movemask_ps(_mm_cmpge_ps(_mm_and_ps(_mm_loadu_ps(p + i + 4), abs_mask), t));
    const int m2 = _mm_movemask_ps(_mm_cmpge_ps(_mm_and_ps(_mm_loadu_ps(p + i + 8), abs_mask), t));
    const int m3 = _mm_movemask_ps(_mm_cmpge_ps(_mm_and_ps(_mm_loadu_ps(p + i + 12), abs_mask), t));
    unsigned mask = static_cast<unsigned>(m0 | (m1 << 4) | (m2 << 8) | (m3 << 12));
    while (mask != 0) {
      out[c++] = base + static_cast<uint32_t>(i) + static_cast<uint32_t>(__builtin_ctz(mask));
      mask &= mask - 1;
    }
  }
#endif
  for (; i < len; ++i) {
    out[c] = base + static_cast<uint32_t>(i);
    c += std::fabs(p[i]) >= tau ? 1 : 0;
  }
  return c;
}

// Appends to *out (cleared first) every i with |x_i| >= tau, in order.
void CollectAtLeast(std::span<const float> x, float tau, std::vector<uint32_t>* out) {
  constexpr size_t kBlock = 4096;
  uint32_t local[kBlock];
  out->clear();
  for (size_t b = 0; b < x.size(); b += kBlock) {
    const size_t len = std::min(kBlock, x.size() - b);
    const size_t c = CollectBlock(x.data() + b, len, tau, static_cast<uint32_t>(b), local);
    out->insert(out->end(), local, local + c);
  }
}

void AllIndices(size_t d, std::vector<uint32_t>* idx) {
  idx->resize(d);
  for (size_t i = 0; i < d; ++i) (*idx)[i] = static_cast<uint32_t>(i);
}

}  // namespace

void TopKExact(std::span<const float> x, size_t k, std::vector<uint32_t>* idx) {
  if (k >= x.size()) return AllIndices(x.size(), idx);
  idx->clear();
  if (k == 0) return;
  std::vector<float> mag(x.size());
  for (size_t i = 0; i < x.size(); ++i) mag[i] = std::fabs(x[i]);
  std::nth_element(mag.begin(), mag.begin() + static_cast<ptrdiff_t>(k - 1), mag.end(),
                   std::greater<float>());
  TakeAtThreshold(x, nullptr, mag[k - 1], k, idx);
}

void TopKSampled(std::span<const float> x, size_t k, double fraction, uint64_t seed,
                 std::vector<uint32_t>* idx, int* stats_passes) {
  const size_t d = x.size();
  if (stats_passes) *stats_passes = 0;
  if (k >= d) return AllIndices(d, idx);
  idx->clear();
  if (k == 0) return;
  size_t samples = std::min(d, std::max<size_t>(1024, static_cast<size_t>(fraction * d)));
  // Strided sample of runs of 16 consecutive values (one cache line each) from a random
  // offset: as informative as scattered picks for a threshold, and ~16x fewer misses.
  constexpr size_t kRun = 16;
  const size_t runs = (samples + kRun - 1) / kRun;
  const size_t stride = std::max<size_t>(kRun, d / runs);
  SplitMix rng(seed ^ 0x5EED5A3D1Eull);
  const size_t offset = rng.Below(stride);
  std::vector<float> sample;
  sample.reserve(runs * kRun);
  for (size_t r = 0; r < runs; ++r) {
    const size_t start = (offset + r * stride) % d;
    for (size_t j = 0; j < kRun && start + j < d; ++j) sample.push_back(std::fabs(x[start + j]));
  }
  samples = sample.size();
  // Expected rank of the k-th largest inside the sample, plus a margin of 20% and
  // four standard deviations of the binomial count.
  const double expect = static_cast<double>(k) * samples / d;
  double rank = expect * 1.2 + 4.0 * std::sqrt(expect) + 2.0;
  std::vector<uint32_t> cand;
  for (int pass = 0; pass < 4; ++pass) {
    if (stats_passes) ++*stats_passes;
    const size_t r = std::min(samples - 1, static_cast<size_t>(rank));
    std::nth_element(sample.begin(), sample.begin() + static_cast<ptrdiff_t>(r), sample.end(),
                     std::greater<float>());
    const float tau = sample[r];
    CollectAtLeast(x, tau, &cand);
    if (cand.size() >= k) {
      std::vector<float> mag(cand.size());
      for (size_t j = 0; j < cand.size(); ++j) mag[j] = std::fabs(x[cand[j]]);
      std::nth_element(mag.begin(), mag.begin() + static_cast<ptrdiff_t>(k - 1), mag.end(),
                       std::greater<float>());
      TakeAtThreshold(x, &cand, mag[k - 1], k, idx);
      return;
    }
    if (r == samples - 1) break;  // the threshold is already the sample minimum
    rank *= 2;
  }
  TopKExact(x, k, idx);
}

void RandomK(size_t d, size_t k, uint64_t seed, std::vector<uint32_t>* idx) {
  if (k >= d) return AllIndices(d, idx);
  std::vector<uint64_t> bits((d + 63) / 64, 0);
  SplitMix rng(seed ^ 0x4A4D0C5Bull);
  for (size_t j = d - k; j < d; ++j) {
    const size_t t = rng.Below(j + 1);
    const size_t pick = (bits[t / 64] >> (t % 64)) & 1 ? j : t;
    bits[pick / 64] |= uint64_t{1} << (pick % 64);
  }
  idx->clear();
  idx->reserve(k);
  for (size_t w = 0; w < bits.size(); ++w) {
    for (uint64_t b = bits[w]; b != 0; b &= b - 1) {
      idx->push_back(static_cast<uint32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(b))));
    }
  }
}

}  // namespace fedlgc::codecs
