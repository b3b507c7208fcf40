// Host wrappers of the CUDA kernels, and the device probe. Without FEDLGC_WITH_CUDA the
// build has no GPU path: the probe reports no device and the wrappers refuse.
#include "codecs/cuda/gpu.h"

#include "codecs/packing.h"
#include "codecs/str.h"

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
  const size_t n = out.size();
  const size_t nb = (n + bucket - 1) / bucket;
  const size_t code_bytes = (n / bucket) * PackedBytes(bucket, bits) + PackedBytes(n % bucket, bits);
  if (bits < 1 || bits > 8 || body.size() != nb * 4 + code_bytes) {
    return absl::InvalidArgumentError(StrCat("GPU decode: body of ", body.size(), " bytes for ", n,
                                             " values"));
  }
  DeviceBuffer d_body(body.size()), d_out(n * sizeof(float)), d_bad(sizeof(int));
  for (const DeviceBuffer* b : {&d_body, &d_out, &d_bad}) {
    if (absl::Status st = CudaStatus(b->status(), "cudaMalloc"); !st.ok()) return st;
  }
  if (absl::Status st = CudaStatus(
          cudaMemcpy(d_body.get<uint8_t>(), body.data(), body.size(), cudaMemcpyHostToDevice),
          "cudaMemcpy");
      !st.ok()) {
    return st;
  }
  cudaMemset(d_bad.get<int>(), 0, sizeof(int));
  const int launched = cuda::LaunchDequantizeUniform(
      d_body.get<uint8_t>() + nb * 4, reinterpret_cast<const float*>(d_body.get<uint8_t>()), n,
      bits, s, bucket, d_out.get<float>(), d_bad.get<int>());
  if (absl::Status st = CudaStatus(static_cast<cudaError_t>(launched), "kernel launch"); !st.ok()) {
    return st;
  }
  int bad = 0;
  if (absl::Status st = CudaStatus(
          cudaMemcpy(out.data(), d_out.get<float>(), n * sizeof(float), cudaMemcpyDeviceToHost),
          "cudaMemcpy");
      !st.ok()) {
    return st;
  }
  cudaMemcpy(&bad, d_bad.get<int>(), sizeof(int), cudaMemcpyDeviceToHost);
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
