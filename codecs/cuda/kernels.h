// Raw CUDA kernel launchers (implemented in kernels.cu). Pointers are device pointers;
// the return value is a cudaError_t as int (0 = success).
#ifndef FEDLGC_CODECS_CUDA_KERNELS_H_
#define FEDLGC_CODECS_CUDA_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace fedlgc::codecs::cuda {

// out[i] = (code_i - s) * scales[i / bucket] for n codes of `bits` bits (1..8), each
// bucket's codes starting on a byte boundary; *bad_code is set to 1 when a code exceeds 2s.
int LaunchDequantizeUniform(const uint8_t* codes, const float* scales, size_t n, int bits, int s,
                            uint32_t bucket, float* out, int* bad_code);

}  // namespace fedlgc::codecs::cuda

#endif  // FEDLGC_CODECS_CUDA_KERNELS_H_
