// Host wrappers of the CUDA kernels, and the device probe. Without FEDLGC_WITH_CUDA the
// build has no GPU path: the probe reports no device and the wrappers refuse.
#include "codecs/cuda/gpu.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "base/str.h"
#include "codecs/level_quantizer.h"
#include "codecs/packing.h"

#if FEDLGC_WITH_CUDA
#include <cuda_runtime.h>

#include "codecs/cuda/kernels.h"
#endif

namespace fedlgc::codecs {

#if FEDLGC_WITH_CUDA

namespace {

// Device buffer owned for one call.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { status_ = cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes); }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  cudaError_t status() const { return status_; }
  template <typename T>
  T* get() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaError_t status_;
};

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(StrCat(what, ": ", cudaGetErrorString(e)));
}

}  // namespace

int GpuDeviceCount() {
  int n = 0;  // left unwritten on error (cudaErrorInsufficientDriver without a driver)
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

absl::Status GpuDecodeUniform(std::span<const uint8_t> body, int bits, int s, uint32_t bucket,
                              std::span<float> out) {
  if (GpuDeviceCount() == 0) return absl::FailedPreconditionError("no CUDA device");
  if (bits < 1 || bits > 8 || s < 1 || 2 * s >= (1 << bits) || bucket == 0) {
    return absl::InvalidArgumentError("GPU decode: invalid bits, s or bucket");
  }
  const size_t n = out.size();
  const size_t nb = (n + bucket - 1) / bucket;
  const size_t code_bytes =
      (n / bucket) * PackedBytes(bucket, bits) + PackedBytes(n % bucket, bits);
  if (body.size() != nb * 4 + code_bytes) {
    return absl::InvalidArgumentError(
        StrCat("GPU decode: body of ", body.size(), " bytes for ", n, " values"));
  }
  // Norms are validated and turned into level steps on the host, exactly as the CPU does.
  std::vector<float> scales(nb);
  for (size_t b = 0; b < nb; ++b) {
    float norm;
    std::memcpy(&norm, body.data() + 4 * b, 4);
    if (!std::isfinite(norm) || norm < 0) {
      return absl::InvalidArgumentError(StrCat("GPU decode: bucket ", b, " has an invalid norm"));
    }
    scales[b] = UniformLevelScale(norm, s);
  }
  DeviceBuffer d_codes(code_bytes), d_scales(nb * sizeof(float)), d_out(n * sizeof(float)),
      d_bad(sizeof(int));
  for (const DeviceBuffer* b : {&d_codes, &d_scales, &d_out, &d_bad}) {
    if (absl::Status st = CudaStatus(b->status(), "cudaMalloc"); !st.ok()) return st;
  }
  cudaError_t e =
      cudaMemcpy(d_codes.get<uint8_t>(), body.data() + nb * 4, code_bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) {
    e = cudaMemcpy(d_scales.get<float>(), scales.data(), nb * sizeof(float),
                   cudaMemcpyHostToDevice);
  }
  if (e == cudaSuccess) e = cudaMemset(d_bad.get<int>(), 0, sizeof(int));
  if (e == cudaSuccess) {
    e = static_cast<cudaError_t>(
        cuda::LaunchDequantizeUniform(d_codes.get<uint8_t>(), d_scales.get<float>(), n, bits, s,
                                      bucket, d_out.get<float>(), d_bad.get<int>()));
  }
  if (e == cudaSuccess) {
    e = cudaMemcpy(out.data(), d_out.get<float>(), n * sizeof(float), cudaMemcpyDeviceToHost);
  }
  int bad = 0;
  if (e == cudaSuccess) e = cudaMemcpy(&bad, d_bad.get<int>(), sizeof(int), cudaMemcpyDeviceToHost);
  if (absl::Status st = CudaStatus(e, "GPU decode"); !st.ok()) return st;
  if (bad) return absl::InvalidArgumentError(StrCat("GPU decode: a code above ", 2 * s));
  return absl::OkStatus();
}

#else  // !FEDLGC_WITH_CUDA

int GpuDeviceCount() { return 0; }

absl::Status GpuDecodeUniform(std::span<const uint8_t>, int, int, uint32_t, std::span<float>) {
  return absl::FailedPreconditionError("this build has no CUDA support (FEDLGC_WITH_CUDA=OFF)");
}

#endif

}  // namespace fedlgc::codecs
