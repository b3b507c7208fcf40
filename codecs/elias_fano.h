// Elias-Fano coding of a strictly increasing index set {i_0 < ... < i_{k-1}} in [0, u):
// each index splits into l = floor(log2(u/k)) low bits, written verbatim, and a high part
// whose gaps are written in unary. Size k*l + k + ((u-1) >> l) bits, within about
// 2 bits per index of the information bound log2 C(u, k).
#ifndef FEDLGC_CODECS_ELIAS_FANO_H_
#define FEDLGC_CODECS_ELIAS_FANO_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace fedlgc::codecs {

// Exact encoded size in bytes of k indices in [0, u).
uint64_t EliasFanoBytes(uint64_t k, uint64_t u);

// Appends the code of `idx` (strictly increasing, all < u) to *out.
void EliasFanoEncode(std::span<const uint32_t> idx, uint64_t u, std::string* out);

// Decodes exactly k indices in [0, u) from `in`, which must be EliasFanoBytes(k, u) long.
// Rejects indices out of range or not strictly increasing.
absl::Status EliasFanoDecode(std::span<const uint8_t> in, uint64_t k, uint64_t u,
                             std::vector<uint32_t>* idx);

// log2 of the binomial coefficient C(u, k): the information bound of a k-subset.
double Log2Binomial(uint64_t u, uint64_t k);

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_ELIAS_FANO_H_
