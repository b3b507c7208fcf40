// AdaComp: the coordinates each bin sends (the soft-threshold rule against a brute-force
// oracle, at least one per bin), their values (signs times the mean sent magnitude), the
// contraction that makes it safe under error feedback, what it costs on the wire, and
// that error feedback hands it the update alone.
#include "codecs/adacomp.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "codecs/bit_io.h"
#include "codecs/error_feedback.h"
#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

using absl::StatusCode;
using testing::FailsWith;

// The coordinates AdaComp must send, from its definition: per bin, every i with G_i != 0
// and |G_i + g_i| >= max_bin |G| (g empty: H = G), else the bin's first largest |G|, and
// nothing in a bin of zeros.
std::vector<size_t> Oracle(const std::vector<float>& big_g, const std::vector<float>& g,
                           size_t bin) {
  std::vector<size_t> out;
  for (size_t b = 0; b < big_g.size(); b += bin) {
    const size_t e = std::min(big_g.size(), b + bin);
    float gmax = 0;
    size_t arg = b;
    for (size_t i = b; i < e; ++i) {
      if (std::fabs(big_g[i]) > gmax) gmax = std::fabs(big_g[i]), arg = i;
    }
    if (gmax == 0) continue;
    const size_t before = out.size();
    for (size_t i = b; i < e; ++i) {
      const float h = g.empty() ? big_g[i] : big_g[i] + g[i];
      if (big_g[i] != 0 && std::fabs(h) >= gmax) out.push_back(i);
    }
    if (out.size() == before) out.push_back(arg);
  }
  return out;
}

// Every sent value of a group of 64 bins has magnitude the mean |G| of the group's sent
// coordinates, and G's sign.
void ExpectGroupScales(const std::vector<float>& big_g, const std::vector<float>& y,
                       const std::vector<size_t>& sent, size_t bin) {
  const size_t group = bin * AdaComp::kBinsPerScale;
  for (size_t g0 = 0; g0 < big_g.size(); g0 += group) {
    double sum = 0;
    size_t k = 0;
    for (size_t i : sent) {
      if (i >= g0 && i < g0 + group) sum += std::fabs(big_g[i]), ++k;
    }
    for (size_t i : sent) {
      if (i < g0 || i >= g0 + group) continue;
      ASSERT_FLOAT_EQ(std::fabs(y[i]), static_cast<float>(sum / k)) << "bin " << bin << " " << i;
      ASSERT_EQ(std::signbit(y[i]), std::signbit(big_g[i])) << i;
    }
  }
}

std::vector<size_t> Support(const std::vector<float>& y) {
  std::vector<size_t> s;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] != 0) s.push_back(i);
  }
  return s;
}

std::vector<float> EncodeDecode(Codec& codec, const std::vector<float>& x,
                                const std::vector<float>& fresh, size_t* bytes) {
  EncodeOptions opts;
  opts.fresh = fresh;
  // Room for one group of bins per frame: several frames, and the rule holds across them.
  opts.max_frame_bytes = codec.MaxFrameBytes(codec.traits().block);
  std::vector<Frame> frames;
  EXPECT_TRUE(codec.Encode(x, opts, &frames).ok());
  std::vector<float> y(x.size(), -7.0f);
  EXPECT_TRUE(DecodeAll(codec, frames, y).ok());
  *bytes = 0;
  for (const Frame& f : frames) *bytes += f.bytes.size();
  return y;
}

TEST(AdaComp, SendsWhatTheRuleSelectsAsSignsTimesTheMeanMagnitude) {
  for (size_t bin : {2, 7, 50, 500}) {
    auto codec = testing::Make("adacomp(bin=" + std::to_string(bin) + ")");
    const size_t n = 10007;
    const auto big_g = testing::GradientLike(n, bin);
    for (bool with_fresh : {false, true}) {
      const std::vector<float> g =
          with_fresh ? testing::GradientLike(n, 99 + bin) : std::vector<float>();
      size_t bytes = 0;
      const auto y = EncodeDecode(*codec, big_g, g, &bytes);
      const std::vector<size_t> want = Oracle(big_g, g, bin);
      ASSERT_EQ(Support(y), want) << "bin " << bin << " fresh " << with_fresh;
      ExpectGroupScales(big_g, y, want, bin);
      const size_t bins = (n + bin - 1) / bin;
      ASSERT_GE(want.size(), bins);  // at least one per bin
      RecordProperty("bin_" + std::to_string(bin) + (with_fresh ? "_fresh" : "") + "_sent",
                     static_cast<int>(want.size()));
    }
  }
}

TEST(AdaComp, TheScaleOf64BinsIsTheirMeanSentMagnitudeAndContracts) {
  auto codec = testing::Make("adacomp(bin=50)");
  const auto x = testing::GradientLike(50 * AdaComp::kBinsPerScale, 5);  // one scale
  const auto y = testing::RoundTrip(*codec, x, 0);
  double sum = 0;
  size_t k = 0;
  for (size_t i : Support(y)) sum += std::fabs(x[i]), ++k;
  ASSERT_GT(k, 0u);
  for (size_t i : Support(y)) ASSERT_FLOAT_EQ(std::fabs(y[i]), static_cast<float>(sum / k));
  // ||x - C(x)||^2 = ||x||^2 - k s^2 < ||x||^2 (s the mean sent magnitude).
  double err = 0;
  for (size_t i = 0; i < x.size(); ++i) err += (x[i] - y[i]) * double(x[i] - y[i]);
  const double s = sum / k;
  EXPECT_NEAR(err, testing::SquaredNorm(x) - k * s * s, 1e-6 * testing::SquaredNorm(x));
  EXPECT_LT(err, testing::SquaredNorm(x));
}

TEST(AdaComp, ErrorFeedbackPassesTheUpdateAlone) {
  // Inside ef(...) the codec sees G = e + g and g: the selection follows the oracle with
  // the update, which differs from the one without it.
  auto codec = testing::Make("ef(adacomp(bin=50))");
  auto& ef = dynamic_cast<ErrorFeedback&>(*codec);
  auto solo = testing::Make("adacomp(bin=50)");
  const size_t n = 5000;
  size_t differs = 0;
  for (int step = 0; step < 5; ++step) {
    const auto g = testing::GradientLike(n, 200 + step);
    std::vector<float> big_g(n);
    const std::vector<float> e(ef.residual().begin(), ef.residual().end());
    for (size_t i = 0; i < n; ++i) big_g[i] = g[i] + (e.empty() ? 0.0f : e[i]);
    const auto y = testing::RoundTrip(*codec, g, step);
    ASSERT_EQ(Support(y), Oracle(big_g, g, 50)) << "step " << step;
    differs += Support(y) != Oracle(big_g, {}, 50) ? 1 : 0;
  }
  EXPECT_GT(differs, 0u);  // after the first step the residual makes H differ from G
}

TEST(AdaComp, BytesOnGradientLikeInput) {
  // Bin 50 sends a few coordinates per bin at about 7 bits each (count, positions, sign)
  // plus a mode bit: far under float32's 32 bits per coordinate.
  auto codec = testing::Make("ef(adacomp(bin=50))");
  const size_t n = 215000;
  size_t bytes = 0, sent = 0;
  for (int step = 0; step < 3; ++step) {
    std::vector<Frame> frames;
    const auto g = testing::GradientLike(n, 300 + step);
    EncodeOptions opts;
    opts.max_frame_bytes = 256 << 10;
    ASSERT_TRUE(codec->Encode(g, opts, &frames).ok());
    std::vector<float> y(n);
    ASSERT_TRUE(DecodeAll(*codec, frames, y).ok());
    bytes = 0;
    for (const Frame& f : frames) bytes += f.bytes.size();
    sent = Support(y).size();
  }
  const double ratio = 4.0 * n / bytes;
  RecordProperty("ratio_vs_fp32", std::to_string(ratio));
  RecordProperty("sent_per_bin", std::to_string(sent / (n / 50.0)));
  EXPECT_GT(ratio, 25.0);
}

TEST(AdaComp, ZerosAreNeverSentAndABinOfZerosSendsNothing) {
  auto codec = testing::Make("adacomp(bin=50)");
  auto x = testing::GradientLike(50 * 64 * 2 + 30, 8);
  for (size_t i = 0; i < 50 * 64; ++i) x[i] = 0;                    // a whole group of zeros
  for (size_t i = 50 * 64; i < x.size(); i += 3) x[i] = 0;          // zeros among the rest
  for (size_t i = 50 * 64 + 100; i < 50 * 64 + 150; ++i) x[i] = 0;  // a bin of zeros
  const std::vector<float> g = testing::GradientLike(x.size(), 9);  // pushes zeros too
  size_t bytes = 0;
  const auto y = EncodeDecode(*codec, x, g, &bytes);
  const std::vector<size_t> want = Oracle(x, g, 50);
  ASSERT_EQ(Support(y), want);
  for (size_t i : want) ASSERT_NE(x[i], 0.0f) << i;
  for (size_t i = 0; i < 50 * 64; ++i) ASSERT_EQ(y[i], 0.0f);
  ExpectGroupScales(x, y, want, 50);
}

// A body for one group of two bins of 50 (n = 100), written bit by bit.
struct Body {
  std::string bytes;
  BitWriter w{&bytes};
  explicit Body(float scale) { w.Write(std::bit_cast<uint32_t>(scale), 32); }
  Body& List(std::vector<uint32_t> pos, bool neg = false) {
    w.WriteBit(false);
    w.Write(pos.size(), 6);  // bit_width(50)
    for (uint32_t p : pos) w.Write(p, 6);
    for (size_t i = 0; i < pos.size(); ++i) w.WriteBit(neg);
    return *this;
  }
  std::vector<uint8_t> Done() {
    w.Flush();
    return std::vector<uint8_t>(bytes.begin(), bytes.end());
  }
};

TEST(AdaComp, RefusesEveryBodyTheEncoderCouldNotHaveWritten) {
  auto codec = testing::Make("adacomp(bin=50)");
  const auto& ada = dynamic_cast<const AdaComp&>(*codec);
  std::vector<float> out(100);
  auto decode = [&](std::vector<uint8_t> b) { return ada.DecodeBody(b, out); };
  ASSERT_TRUE(decode(Body(0.5f).List({3}).List({7, 9}).Done()).ok());
  EXPECT_EQ(out[3], 0.5f);
  EXPECT_EQ(out[50 + 9], 0.5f);  // the second bin starts at 50
  EXPECT_EQ(out[9], 0.0f);
  ASSERT_TRUE(decode(Body(0.0f).List({}).List({}).Done()).ok());        // nothing sent, scale +0
  auto malformed = [&](std::vector<uint8_t> b) {
    return FailsWith(decode(std::move(b)), InputError::kMalformed);
  };
  // Only the code for a sign-bit scale: it comes back tagged malformed, where a quantizer's
  // negative norm is kNonFinite (input_error.h: "out of its bounds").
  auto invalid = [&](std::vector<uint8_t> b) {
    return FailsWith(decode(std::move(b)), StatusCode::kInvalidArgument);
  };
  EXPECT_TRUE(malformed(Body(0.5f).List({7, 3}).List({1}).Done()));  // out of order
  EXPECT_TRUE(malformed(Body(0.5f).List({3, 3}).List({1}).Done()));  // repeated
  EXPECT_TRUE(malformed(Body(0.5f).List({50}).List({1}).Done()));    // out of range
  EXPECT_TRUE(invalid(Body(-0.5f).List({3}).List({1}).Done()));      // negative scale
  EXPECT_TRUE(invalid(Body(-0.0f).List({}).List({}).Done()));        // -0
  EXPECT_TRUE(malformed(Body(0.0f).List({3}).List({}).Done()));      // sent, scale 0
  EXPECT_TRUE(malformed(Body(0.5f).List({}).List({}).Done()));       // nothing, scale
  EXPECT_TRUE(
      FailsWith(decode(Body(std::nanf("")).List({3}).List({}).Done()), InputError::kNonFinite));
  // Nine positions cost 6 + 54 bits, more than a bitmap of 50: the list is refused.
  EXPECT_TRUE(malformed(Body(0.5f).List({0, 1, 2, 3, 4, 5, 6, 7, 8}).List({}).Done()));
  {  // a bitmap of one position, which a list codes shorter
    Body b(0.5f);
    b.w.WriteBit(true);
    for (int i = 0; i < 50; ++i) b.w.WriteBit(i == 4);
    b.w.WriteBit(false);
    b.List({});
    EXPECT_TRUE(malformed(b.Done()));
  }
  {  // a count over the bin
    Body b(0.5f);
    b.w.WriteBit(false);
    b.w.Write(51, 6);
    EXPECT_TRUE(malformed(b.Done()));
  }
  auto good = Body(0.5f).List({3}).List({7}).Done();
  good.push_back(0);  // a byte after the last bin
  EXPECT_TRUE(malformed(good));
  good.pop_back();
  good.back() |= 0x80;  // a padding bit set
  EXPECT_TRUE(malformed(good));
  good.resize(good.size() - 1);  // cut short
  EXPECT_TRUE(malformed(good));
}

TEST(AdaComp, RefusesBadBinsAndMismatchedUpdates) {
  EXPECT_TRUE(FailsWith(MakeCodec("adacomp(bin=1)"), StatusCode::kInvalidArgument));
  EXPECT_TRUE(FailsWith(MakeCodec("adacomp(bin=70000)"), StatusCode::kInvalidArgument));
  EXPECT_TRUE(FailsWith(MakeCodec("adacomp(bins=50)"), StatusCode::kInvalidArgument));
  auto codec = testing::Make("adacomp(bin=50)");
  const auto x = testing::GradientLike(100, 1);
  const std::vector<float> short_fresh(99, 0.0f);
  EncodeOptions opts;
  opts.fresh = short_fresh;
  std::vector<Frame> frames;
  EXPECT_TRUE(FailsWith(codec->Encode(x, opts, &frames), StatusCode::kInvalidArgument));
  std::vector<float> nan = x;
  nan[3] = std::nanf("");
  EXPECT_TRUE(FailsWith(codec->Encode(nan, EncodeOptions{}, &frames), InputError::kNonFinite));
}

}  // namespace
}  // namespace fedlgc::codecs
