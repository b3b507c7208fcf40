// fedlgc-bench-gpu-decode: the GPU decoder of uniform-level bodies (codecs/cuda/gpu.h)
// against the CPU decoder of the same frame and against memcpy of the decoded bytes, in one
// run on the same input, host memory to host memory (the GPU time includes copying the
// body in and the floats out). Checks that both decoders give the same floats, bit for
// bit. Without a CUDA device it says so and exits 0.
//
//   fedlgc-bench-gpu-decode [--reps 9] [n ...]     (default n: 1e5, 1e6, 1e7, 5e7)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/median_seconds.h"
#include "codecs/codec.h"
#include "codecs/cuda/gpu.h"
#include "codecs/frame.h"
#include "codecs/registry.h"

namespace {

namespace codecs = fedlgc::codecs;

using fedlgc::bench::MedianSeconds;

}  // namespace

int main(int argc, char** argv) {
  int reps = 9;
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      sizes.push_back(static_cast<size_t>(std::atof(argv[i])));
    }
  }
  if (sizes.empty()) sizes = {100000, 1000000, 10000000, 50000000};
  const int devices = codecs::GpuDeviceCount();
  if (devices == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  std::printf("%d CUDA device(s); median of %d, host to host\n\n", devices, reps);
  std::printf("| spec | n | CPU decode GB/s | GPU decode GB/s | GPU / CPU | memcpy GB/s | bit-exact |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  struct Case {
    const char* spec;
    int bits, s;
    uint32_t bucket;
  };
  for (const Case c : {Case{"qsgd(bits=4,bucket=512)", 4, 7, 512},
                       Case{"qsgd(bits=8,bucket=128)", 8, 127, 128}}) {
    auto codec = codecs::MakeCodec(c.spec);
    if (!codec.ok()) return 1;
    for (size_t n : sizes) {
      std::mt19937 rng(5);
      std::normal_distribution<float> g(0.0f, 1e-3f);
      std::vector<float> x(n);
      for (float& v : x) v = g(rng);
      std::vector<codecs::Frame> frames;
      codecs::EncodeOptions eo;
      eo.seed = 9;
      if (!(*codec)->Encode(x, eo, &frames).ok() || frames.size() != 1) return 1;
      auto view = codecs::ParseFrame(frames[0].bytes, codecs::FrameLimits{});
      if (!view.ok()) return 1;
      std::vector<float> cpu(n), gpu(n), copy(n);
      const double t_cpu = MedianSeconds(reps, [&] { (void)(*codec)->Decode(*view, cpu); });
      bool ok = true;
      const double t_gpu = MedianSeconds(reps, [&] {
        ok = ok && codecs::GpuDecodeUniform(view->body, c.bits, c.s, c.bucket, gpu).ok();
      });
      const double t_copy =
          MedianSeconds(reps, [&] { std::memcpy(copy.data(), x.data(), n * sizeof(float)); });
      const bool exact = ok && std::memcmp(cpu.data(), gpu.data(), n * sizeof(float)) == 0;
      const double bytes = static_cast<double>(n) * sizeof(float);
      std::printf("| `%s` | %zu | %.2f | %.2f | %.2fx | %.2f | %s |\n", c.spec, n,
                  bytes / t_cpu / 1e9, bytes / t_gpu / 1e9, t_cpu / t_gpu, bytes / t_copy / 1e9,
                  exact ? "yes" : "NO");
      if (!exact) return 2;
    }
  }
  return 0;
}
