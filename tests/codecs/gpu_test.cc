// GPU kernels against the CPU decoders. Skips where there is no CUDA device (this
// machine has none; the device machine runs it).
#include "codecs/cuda/gpu.h"

#include <vector>

#include "codecs/frame.h"
#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

TEST(Gpu, UniformDecodeMatchesTheCpuBitForBit) {
  if (GpuDeviceCount() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  struct Case {
    const char* spec;
    int bits, s;
    uint32_t bucket;
  } cases[] = {{"qsgd(bits=4,bucket=512)", 4, 7, 512},
               {"qsgd(bits=8,bucket=128)", 8, 127, 128},
               {"qsgd(s=3,bucket=64)", 3, 3, 64}};
  for (const Case& c : cases) {
    auto codec = testing::Make(c.spec);
    const auto x = testing::GradientLike(100003, 5);
    std::vector<Frame> frames;
    const auto cpu = testing::RoundTrip(*codec, x, 9, 0, &frames);
    auto view = ParseFrame(frames[0].bytes, FrameLimits{});
    ASSERT_TRUE(view.ok()) << view.status();
    std::vector<float> gpu(x.size());
    ASSERT_TRUE(GpuDecodeUniform(view->body, c.bits, c.s, c.bucket, gpu).ok());
    EXPECT_EQ(gpu, cpu) << c.spec;
  }
}

TEST(Gpu, ProbeIsSafeWithoutADriverAndTheDecoderSaysSo) {
  const int n = GpuDeviceCount();
  if (n > 0) GTEST_SKIP() << n << " GPU(s): Gpu.UniformDecodeMatchesTheCpuBitForBit covers them";
  // No GPU (or no driver): the probe answers 0 again rather than failing, and a decode is
  // refused with FAILED_PRECONDITION, not a crash.
  EXPECT_EQ(GpuDeviceCount(), 0);
  std::vector<float> out(8);
  std::vector<uint8_t> body(8 + 4, 0);
  EXPECT_EQ(GpuDecodeUniform(body, 4, 7, 8, out).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace fedlgc::codecs
