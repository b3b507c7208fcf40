// Natural compression, TernGrad, signSGD and the float codecs.
#include <cmath>
#include <random>

#include "codecs/float_codecs.h"
#include "codecs/input_error.h"
#include "codecs/sign.h"
#include "codecs/terngrad.h"
#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

using absl::StatusCode;
using testing::FailsWith;

TEST(Natural, OutputsAreSignedPowersOfTwoAroundTheInput) {
  auto codec = testing::Make("natural");
  auto x = testing::GradientLike(10000, 2);
  x[0] = 0.0f;
  x[1] = 1e-40f;  // subnormal
  x[2] = -3.0f;
  const auto y = testing::RoundTrip(*codec, x, 9);
  for (size_t i = 0; i < x.size(); ++i) {
    if (y[i] == 0) {
      EXPECT_LT(std::fabs(x[i]), std::ldexp(1.0f, -126)) << i;
      continue;
    }
    int e;
    const float m = std::frexp(std::fabs(y[i]), &e);
    EXPECT_EQ(m, 0.5f) << "not a power of two: " << y[i];
    EXPECT_EQ(std::signbit(y[i]), std::signbit(x[i]));
    // |x| lies between the two neighbouring powers of two.
    EXPECT_LE(std::fabs(y[i]) / 2, std::fabs(x[i]));
    EXPECT_GE(std::fabs(y[i]) * 2, std::fabs(x[i]));
  }
  EXPECT_TRUE(y[2] == -2.0f || y[2] == -4.0f);
}

TEST(Natural, SecondMomentWithinNineEighths) {
  // Worst case: |x| = (4/3) 2^a. With |x| = (1+m) 2^a, E[C(x)^2] / x^2 = (1+3m)/(1+m)^2,
  // which peaks at m = 1/3 with value 9/8.
  auto codec = testing::Make("natural");
  std::mt19937 rng(4);
  std::vector<float> x(4096);
  for (float& v : x)
    v = std::ldexp(4.0f / 3.0f, static_cast<int>(rng() % 20) - 10) * ((rng() & 1) ? 1 : -1);
  const double xx = testing::SquaredNorm(x);
  constexpr int kTrials = 400;
  double sum = 0, sumsq = 0;
  for (int t = 0; t < kTrials; ++t) {
    const double r = testing::SquaredNorm(testing::RoundTrip(*codec, x, t)) / xx;
    sum += r;
    sumsq += r * r;
  }
  const double mean = sum / kTrials;
  const double sd = std::sqrt((sumsq / kTrials - mean * mean) / kTrials);
  EXPECT_LE(mean, 9.0 / 8.0 + 5 * sd);
  EXPECT_NEAR(mean, 9.0 / 8.0, 5 * sd);  // the bound is attained here
  // A generic gradient stays below the bound.
  const auto g = testing::GradientLike(4096, 5);
  double gm = 0;
  for (int t = 0; t < 50; ++t) gm += testing::SquaredNorm(testing::RoundTrip(*codec, g, t));
  EXPECT_LE(gm / 50 / testing::SquaredNorm(g), 9.0 / 8.0);
}

TEST(TernGrad, ValuesAreTernaryPerBucket) {
  auto codec = testing::Make("terngrad(bucket=256)");
  const auto x = testing::GradientLike(1024, 3);
  const auto y = testing::RoundTrip(*codec, x, 3);
  for (size_t b = 0; b < 4; ++b) {
    float s = 0;
    for (size_t i = 0; i < 256; ++i) s = std::max(s, std::fabs(y[b * 256 + i]));
    for (size_t i = 0; i < 256; ++i) {
      const float v = y[b * 256 + i];
      EXPECT_TRUE(v == 0 || v == s || v == -s);
      if (v != 0) {
        EXPECT_EQ(std::signbit(v), std::signbit(x[b * 256 + i]));
      }
    }
  }
}

TEST(TernGrad, ClippingBoundsTheScale) {
  auto clipped = testing::Make("terngrad(bucket=1024,clip=2.5)");
  std::vector<float> x(1024, 0.01f);
  for (size_t i = 0; i < 1024; i += 2) x[i] = -0.01f;
  x[5] = 100.0f;  // sigma ~ 100 / sqrt(1024) = 3.1, so the scale is clipped to ~7.8
  const auto& tg = dynamic_cast<const TernGrad&>(*clipped);
  EXPECT_NEAR(tg.LocalScale(x), 2.5f * 100.0f / 32.0f, 0.1f);
  auto unclipped = testing::Make("terngrad(bucket=1024,clip=0)");
  EXPECT_EQ(dynamic_cast<const TernGrad&>(*unclipped).LocalScale(x), 100.0f);
}

TEST(TernGrad, ConstantBucketsAreNotClippedAway) {
  // A bucket with zero variance (here the 1-value tail bucket) has nothing to clip
  // against and must still be sent.
  auto codec = testing::Make("terngrad(bucket=64,clip=2.5)");
  std::vector<float> x(65, 0.5f);
  const auto y = testing::RoundTrip(*codec, x, 1);
  for (float v : y) EXPECT_EQ(v, 0.5f);
}

TEST(TernGrad, SharedScaleMakesCodesIntegerSummable) {
  auto codec = testing::Make("terngrad(bucket=128,clip=0,shared=1)");
  const auto& tg = dynamic_cast<const TernGrad&>(*codec);
  const auto a = testing::GradientLike(1000, 1);
  const auto b = testing::GradientLike(1000, 2);
  const float shared = std::max(tg.LocalScale(a), tg.LocalScale(b));
  EncodeOptions opts;
  opts.shared_scale = shared;
  std::vector<Frame> fa, fb;
  ASSERT_TRUE(codec->Encode(a, opts, &fa).ok());
  opts.seed = 1;
  ASSERT_TRUE(codec->Encode(b, opts, &fb).ok());
  std::vector<float> ya(1000), yb(1000);
  ASSERT_TRUE(DecodeAll(*codec, fa, ya).ok());
  ASSERT_TRUE(DecodeAll(*codec, fb, yb).ok());
  for (size_t i = 0; i < 1000; ++i) {
    const float t = (ya[i] + yb[i]) / shared;  // an integer in {-2..2}
    EXPECT_EQ(t, std::round(t));
    EXPECT_LE(std::fabs(t), 2.0f);
  }
  // Without a shared scale the codec refuses rather than guessing.
  std::vector<Frame> none;
  EXPECT_EQ(codec->Encode(a, EncodeOptions{}, &none).code(), absl::StatusCode::kFailedPrecondition);
}

// The coordinator's decoder of a shared-scale round: nothing before the round's scale is
// set, only frames that carry it in every bucket after; its codes are the decoded values,
// so the weighted sum of the codes decodes to the weighted sum of the decodes.
TEST(TernGrad, ARoundsDecoderTakesOnlyTheRoundsScaleAndSumsCodes) {
  const std::string spec = "terngrad(bucket=128,clip=2.5,shared=1)";
  EXPECT_TRUE(FailsWith(TernGradRoundCodec::Create("terngrad(bucket=128)", 1000),
                        StatusCode::kInvalidArgument));
  auto decoder = TernGradRoundCodec::Create(spec, 1000).value();
  EXPECT_TRUE(decoder->traits().summable);
  auto sender = testing::Make(spec);
  const auto a = testing::GradientLike(1000, 1);
  const auto b = testing::GradientLike(1000, 2);
  const auto& tg = dynamic_cast<const TernGrad&>(*sender);
  const float shared = std::max(tg.LocalScale(a), tg.LocalScale(b));
  EncodeOptions opts;
  opts.shared_scale = shared;
  opts.max_frame_bytes = 200;  // several frames
  std::vector<Frame> fa, fb, other;
  ASSERT_TRUE(sender->Encode(a, opts, &fa).ok());
  opts.seed = 7;
  ASSERT_TRUE(sender->Encode(b, opts, &fb).ok());
  opts.shared_scale = 2 * shared;  // a sender that chose its own
  ASSERT_TRUE(sender->Encode(a, opts, &other).ok());
  ASSERT_GT(fa.size(), 2u);
  std::vector<float> out(1000);
  auto view = [](const Frame& f) { return ParseFrame(f.bytes, FrameLimits()).value(); };
  const FrameView first = view(fa[0]);
  std::span<float> range(out.data() + first.begin, first.length);
  EXPECT_EQ(InputErrorOf(decoder->Decode(first, range)), InputError::kWrongCodec)
      << "refused before the round's scale";
  decoder->SetScale(shared);
  for (const Frame& f : other) {
    const FrameView v = view(f);
    EXPECT_EQ(InputErrorOf(decoder->Decode(v, std::span<float>(out).subspan(v.begin, v.length))),
              InputError::kWrongCodec);
  }
  std::vector<float> sum_codes(decoder->code_size(), 0.0f), sum_values(1000, 0.0f);
  for (const auto* frames : {&fa, &fb}) {
    const float weight = frames == &fa ? 0.25f : 0.75f;
    std::vector<float> values(1000, 0.0f);
    ASSERT_TRUE(DecodeAll(*sender, *frames, values).ok());
    for (const Frame& f : *frames) {
      std::vector<float> code;
      const uint64_t at = decoder->ReadCode(view(f), &code).value();
      for (size_t i = 0; i < code.size(); ++i) {
        const float t = code[i] / shared;  // -1, 0 or 1
        EXPECT_EQ(t, std::round(t));
        sum_codes[at + i] += weight * code[i];
      }
    }
    for (size_t i = 0; i < 1000; ++i) sum_values[i] += weight * values[i];
  }
  std::vector<float> decoded(1000);
  ASSERT_TRUE(decoder->DecodeCode(sum_codes, decoded).ok());
  EXPECT_EQ(decoded, sum_values);
  // What the decoder encodes carries the round's scale.
  std::vector<Frame> mine;
  ASSERT_TRUE(decoder->Encode(a, EncodeOptions{}, &mine).ok());
  for (const Frame& f : mine) {
    const FrameView v = view(f);
    EXPECT_TRUE(decoder->Decode(v, std::span<float>(out).subspan(v.begin, v.length)).ok());
  }
}

TEST(Sign, DecodesToScaledSigns) {
  auto codec = testing::Make("sign(bucket=8)");
  std::vector<float> x = {1, -2, 3, -4, 0, 1, 1, 1, -8};
  const auto y = testing::RoundTrip(*codec, x, 0);
  for (size_t i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(y[i], x[i] < 0 ? -13.0f / 8 : 13.0f / 8);
  EXPECT_FLOAT_EQ(y[8], -8.0f);
}

TEST(Sign, MajorityVoteOfOddWorkersIsPlusMinusOne) {
  std::mt19937 rng(3);
  for (int workers : {1, 3, 5, 7}) {
    std::vector<std::vector<float>> votes(workers, std::vector<float>(500));
    for (auto& v : votes) {
      for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % 5) - 2);
    }
    std::vector<std::span<const float>> spans(votes.begin(), votes.end());
    std::vector<float> out(500);
    SignMajorityVote(spans, out);
    for (size_t i = 0; i < 500; ++i) {
      ASSERT_TRUE(out[i] == 1.0f || out[i] == -1.0f);
      int tally = 0;
      for (const auto& v : votes) tally += v[i] < 0 ? -1 : 1;
      EXPECT_EQ(out[i], tally > 0 ? 1.0f : -1.0f);
    }
  }
  std::vector<float> p = {1}, m = {-1}, out(1);
  std::vector<std::span<const float>> tie = {p, m};
  SignMajorityVote(tie, out);
  EXPECT_EQ(out[0], 0.0f);
}

TEST(FloatCodecs, HalfConversionsAreExactOnRepresentableValues) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00) continue;  // inf / nan
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    const uint16_t back = FloatToHalf(f);
    if ((h & 0x7FFF) == 0) {
      EXPECT_EQ(back & 0x7FFF, 0);
    } else {
      EXPECT_EQ(back, h) << std::hex << h;
    }
  }
  EXPECT_EQ(HalfToFloat(FloatToHalf(1e9f)), 65504.0f);  // saturates
  EXPECT_EQ(HalfToFloat(FloatToHalf(-1e9f)), -65504.0f);
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 2048), FloatToHalf(1.0f));  // tie to even
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(3.0f)), 3.0f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::max())),
            Bf16ToFloat(0x7F7F));  // saturates instead of becoming infinite
}

TEST(FloatCodecs, RelativeErrorBounds) {
  const auto x = testing::GradientLike(20000, 8);
  for (auto [spec, eps] : {std::pair{"fp16", 1.0 / 2048}, std::pair{"bf16", 1.0 / 256}}) {
    auto codec = testing::Make(spec);
    const auto y = testing::RoundTrip(*codec, x, 0);
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::fabs(x[i]) > 1e-4) {
        EXPECT_LE(std::fabs(y[i] - x[i]), eps * std::fabs(x[i])) << spec;
      }
    }
  }
}

}  // namespace
}  // namespace fedlgc::codecs
