// CUDA kernels of the codec library (C++17, no libtorch).
#include <cuda_runtime.h>

#include "codecs/cuda/kernels.h"

namespace fedlgc::codecs::cuda {
namespace {

__global__ void DequantizeUniformKernel(const uint8_t* __restrict__ codes,
                                        const float* __restrict__ scales, size_t n, int bits, int s,
                                        uint32_t bucket, float* __restrict__ out, int* bad_code) {
  const size_t bucket_bytes = (static_cast<size_t>(bucket) * bits + 7) / 8;
  const float fs = static_cast<float>(s);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t b = i / bucket;
    const size_t j = i - b * bucket;
    const size_t bit = j * bits;
    const uint8_t* p = codes + b * bucket_bytes + bit / 8;
    // A code spans at most two bytes; read the second only when it is needed.
    uint32_t word = p[0];
    if ((bit % 8) + bits > 8) word |= static_cast<uint32_t>(p[1]) << 8;
    const int code = static_cast<int>((word >> (bit % 8)) & ((1u << bits) - 1));
    if (code > 2 * s) *bad_code = 1;
    out[i] = (static_cast<float>(code) - fs) * scales[b];
  }
}

}  // namespace

int LaunchDequantizeUniform(const uint8_t* codes, const float* scales, size_t n, int bits, int s,
                            uint32_t bucket, float* out, int* bad_code) {
  if (n == 0) return 0;
  const int threads = 256;
  const size_t want = (n + threads - 1) / threads;
  const int blocks = static_cast<int>(want < 65535 * 8 ? want : 65535 * 8);
  DequantizeUniformKernel<<<blocks, threads>>>(codes, scales, n, bits, s, bucket, out, bad_code);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace fedlgc::codecs::cuda
