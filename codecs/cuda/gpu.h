// GPU side of the codec library. Kernels take raw device pointers and sizes (no
// libtorch, no abseil in .cu files); host wrappers here return absl::Status. Every entry
// point works on a machine without a GPU or driver: GpuDeviceCount() is then 0 and the
// wrappers return FailedPrecondition.
#ifndef FEDLGC_CODECS_CUDA_GPU_H_
#define FEDLGC_CODECS_CUDA_GPU_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace fedlgc::codecs {

// Number of usable CUDA devices; 0 when the build has no CUDA, there is no driver
// (cudaErrorInsufficientDriver) or no device.
int GpuDeviceCount();

// Decodes a packed uniform-level body (qsgd(bits=b, bucket=B), elias=0) on the GPU into
// `out` (host memory): norms (one float per bucket) then b-bit codes per bucket, code
// value (c - s) * norm / s. Bit-identical to the CPU decoder. Validates codes like it.
absl::Status GpuDecodeUniform(std::span<const uint8_t> body, int bits, int s, uint32_t bucket,
                              std::span<float> out);

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_CUDA_GPU_H_
