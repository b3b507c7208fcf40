// Index selection for sparsification: exact top-k by magnitude, top-k accelerated by a
// sampled threshold (Lin et al., "Deep Gradient Compression", ICLR 2018), and uniform
// random-k. All return indices sorted ascending.
#ifndef FEDLGC_CODECS_TOPK_H_
#define FEDLGC_CODECS_TOPK_H_

#include <cstdint>
#include <span>
#include <vector>

namespace fedlgc::codecs {

// The k coordinates of largest |x|; among equal magnitudes the lower indices win.
// Uses std::nth_element over all magnitudes (O(d), one d-sized copy).
void TopKExact(std::span<const float> x, size_t k, std::vector<uint32_t>* idx);

// Same result as TopKExact, found faster: a strided sample of max(1024, fraction*d)
// magnitudes (runs of 16 from a seeded random offset) gives a threshold a little below the k-th
// largest, one pass over x keeps the candidates above it (about 1.2k of them), and an exact
// selection among the candidates cuts them to k. Falls back to TopKExact if the threshold was too
// high several times in a row. `stats_passes`, when set, receives the number of passes.
void TopKSampled(std::span<const float> x, size_t k, double fraction, uint64_t seed,
                 std::vector<uint32_t>* idx, int* stats_passes = nullptr);

// k distinct indices of [0, d), uniformly (Floyd's algorithm).
void RandomK(size_t d, size_t k, uint64_t seed, std::vector<uint32_t>* idx);

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_TOPK_H_
