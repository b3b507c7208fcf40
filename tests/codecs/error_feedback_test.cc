// Error feedback: exact conservation (sum of sent + residual = sum of inputs), also when
// frames are lost and restored, and the residual persists across a restart.
#include "codecs/error_feedback.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

using absl::StatusCode;
using testing::FailsWith;

// Inputs on a dyadic grid (multiples of 2^-12 in [-1, 1]): every sum and difference the
// decorator and top-k compute is exact in float, so conservation must hold bit for bit.
std::vector<float> Dyadic(size_t n, uint64_t seed) { return testing::Dyadic(n, seed, 12); }

TEST(ErrorFeedback, ConservesExactlyWithTopK) {
  auto codec = testing::Make("ef(topk(ratio=0.05))");
  auto& ef = dynamic_cast<ErrorFeedback&>(*codec);
  const size_t n = 4000;
  std::vector<double> sent_sum(n, 0), input_sum(n, 0);
  for (int step = 0; step < 30; ++step) {
    const auto x = Dyadic(n, step);
    for (size_t i = 0; i < n; ++i) input_sum[i] += x[i];
    const auto y = testing::RoundTrip(*codec, x, step);
    for (size_t i = 0; i < n; ++i) sent_sum[i] += y[i];
  }
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(sent_sum[i] + ef.residual()[i], input_sum[i]) << i;
  }
}

TEST(ErrorFeedback, ConservesWithQuantizedValuesUpToRounding) {
  for (const char* spec : {"ef(topk(ratio=0.01,values=qsgd(bits=8)))", "ef(qsgd(bits=2))",
                           "ef(sign)", "ef(natural)", "ef(adacomp(bin=50))"}) {
    auto codec = testing::Make(spec);
    auto& ef = dynamic_cast<ErrorFeedback&>(*codec);
    const size_t n = 3000;
    std::vector<double> sent_sum(n, 0), input_sum(n, 0);
    double scale = 0;
    for (int step = 0; step < 20; ++step) {
      const auto x = testing::GradientLike(n, step);
      for (size_t i = 0; i < n; ++i) {
        input_sum[i] += x[i];
        scale = std::max(scale, std::fabs(double(x[i])));
      }
      const auto y = testing::RoundTrip(*codec, x, step);
      for (size_t i = 0; i < n; ++i) sent_sum[i] += y[i];
    }
    // Each step rounds x + e once (half an ulp of values up to ~step * scale).
    const double tol = 20 * 20 * scale * std::ldexp(1.0, -23);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(sent_sum[i] + ef.residual()[i], input_sum[i], tol) << spec << " " << i;
    }
  }
}

TEST(ErrorFeedback, LostFramesGoBackIntoTheResidual) {
  auto codec = testing::Make("ef(topk(ratio=0.1))");
  auto& ef = dynamic_cast<ErrorFeedback&>(*codec);
  const size_t n = 5000;
  std::vector<double> counted(n, 0), input_sum(n, 0);
  std::mt19937 rng(5);
  for (int step = 0; step < 10; ++step) {
    const auto x = Dyadic(n, 100 + step);
    for (size_t i = 0; i < n; ++i) input_sum[i] += x[i];
    std::vector<Frame> frames;
    EncodeOptions opts;
    opts.seed = step;
    opts.max_frame_bytes = 600;
    ASSERT_TRUE(codec->Encode(x, opts, &frames).ok());
    ASSERT_GT(frames.size(), 3u);
    for (const Frame& f : frames) {
      if (rng() % 3 == 0) {
        ASSERT_TRUE(ef.Restore(f.bytes).ok());  // lost: the sender takes it back
        continue;
      }
      std::vector<float> out(n, 0.0f);
      ASSERT_TRUE(DecodeFrameInto(*codec, f.bytes, FrameLimits{}, out).ok());
      for (size_t i = 0; i < n; ++i) counted[i] += out[i];
    }
  }
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(counted[i] + ef.residual()[i], input_sum[i]);
}

TEST(ErrorFeedback, ResidualSurvivesARestartAndChecksDimensions) {
  auto a = testing::Make("ef(topk(ratio=0.1))");
  auto& efa = dynamic_cast<ErrorFeedback&>(*a);
  const auto x = Dyadic(1000, 1);
  testing::RoundTrip(*a, x, 1);
  const std::vector<float> saved(efa.residual().begin(), efa.residual().end());
  auto b = testing::Make("ef(topk(ratio=0.1))");
  auto& efb = dynamic_cast<ErrorFeedback&>(*b);
  efb.SetResidual(saved);
  std::vector<Frame> fa, fb;
  testing::RoundTrip(*a, x, 2, 0, &fa);
  testing::RoundTrip(*b, x, 2, 0, &fb);
  EXPECT_EQ(fa[0].bytes, fb[0].bytes);
  std::vector<Frame> bad;
  EXPECT_TRUE(FailsWith(a->Encode(std::vector<float>(999, 1.0f), EncodeOptions{}, &bad),
                        StatusCode::kInvalidArgument));
  // A frame from another codec is not restorable.
  auto other = testing::Make("topk(ratio=0.5)");
  std::vector<Frame> of;
  testing::RoundTrip(*other, x, 1, 0, &of);
  EXPECT_TRUE(FailsWith(efa.Restore(of[0].bytes), InputError::kMalformed));
  // RestoreAny takes it (a frame from before a codec switch) and adds exactly what it
  // decodes to; a frame of another dimension is still refused.
  std::vector<float> before(efa.residual().begin(), efa.residual().end());
  ASSERT_TRUE(efa.RestoreAny(of[0].bytes).ok());
  std::vector<float> decoded(x.size(), 0.0f);
  ASSERT_TRUE(DecodeAll(*other, of, decoded).ok());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(efa.residual()[i], before[i] + decoded[i]) << i;
  std::vector<Frame> small;
  testing::RoundTrip(*other, Dyadic(500, 3), 1, 0, &small);
  EXPECT_TRUE(FailsWith(efa.RestoreAny(small[0].bytes), InputError::kMalformed));
  EXPECT_TRUE(efa.RestoreAny(fa[0].bytes).ok());  // its own frames as with Restore
}

}  // namespace
}  // namespace fedlgc::codecs

namespace fedlgc::codecs {
namespace {

TEST(ErrorFeedbackModes, ErrorFreeModeKeepsOnlyRestoredFrames) {
  auto codec = testing::Make("ef(qsgd(bits=4,bucket=64),error=0)");
  EXPECT_EQ(codec->spec(), "ef/1(qsgd/1(bits=4,bucket=64,norm=l2,elias=0),error=0)");
  auto& ef = dynamic_cast<ErrorFeedback&>(*codec);
  const auto x = testing::GradientLike(1000, 1);
  std::vector<Frame> frames;
  const auto sent = testing::RoundTrip(*codec, x, 1, 300, &frames);
  for (float e : ef.residual()) ASSERT_EQ(e, 0.0f);  // the compression error is not kept
  ASSERT_GE(frames.size(), 2u);
  ASSERT_TRUE(ef.Restore(frames[1].bytes).ok());  // a lost chunk comes back whole
  for (size_t i = 0; i < x.size(); ++i) {
    const bool in_lost = i >= frames[1].begin && i < frames[1].begin + frames[1].length;
    ASSERT_EQ(ef.residual()[i], in_lost ? sent[i] : 0.0f) << i;
  }
}

TEST(ErrorFeedbackModes, FeedingBackANonContractiveErrorGrows) {
  // QSGD with one level (ternary) on a bucket of 512 has E||Q(v) - v||^2 up to
  // sqrt(512)/1 = 22x ||v||^2: not contractive, so e <- v + e - Q(v + e) blows up. This
  // is why edge clients use error=0 around unbiased codecs.
  auto full = testing::Make("ef(qsgd(s=1,bucket=512))");
  auto kept = testing::Make("ef(qsgd(s=1,bucket=512),error=0)");
  const auto x = testing::GradientLike(4096, 3);
  for (int t = 0; t < 30; ++t) {
    testing::RoundTrip(*full, x, t);
    testing::RoundTrip(*kept, x, t);
  }
  auto norm2 = [](std::span<const float> v) {
    double s = 0;
    for (float f : v) s += double(f) * f;
    return s;
  };
  EXPECT_GT(norm2(dynamic_cast<ErrorFeedback&>(*full).residual()), 10 * testing::SquaredNorm(x));
  EXPECT_EQ(norm2(dynamic_cast<ErrorFeedback&>(*kept).residual()), 0.0);
}

}  // namespace
}  // namespace fedlgc::codecs
