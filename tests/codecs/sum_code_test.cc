// Secure aggregation's integer code (codecs/sum_code.h), its rotation (rotation.h) and its
// frames in Z_(2^b) (zmod_frame.h): the rotation is orthogonal and undone exactly, and it
// spreads a vector whose mass sits in one coordinate; the code is unbiased by Monte Carlo
// within 5 standard errors, its sum decodes to the sum of what each code decodes to, an
// update past the clip is cut, and which codecs give a level count; zmod frames round-trip
// at every width and refuse another width, a short body and padding bits set.
#include "codecs/sum_code.h"

#include <cmath>
#include <functional>
#include <random>

#include "codecs/input_error.h"
#include "codecs/zmod_frame.h"
#include "gtest/gtest.h"

namespace fedlgc::codecs {
namespace {

std::vector<float> Gaussian(size_t n, uint64_t seed, double sd = 1) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0, sd);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(g(rng));
  return v;
}

// Of the coordinates of x, how many a Monte Carlo mean of `trials` decodes of codes (the
// code of trial t: `code(t)`, with its encode seed t) misses by more than 5 standard
// errors.
int OutsideFiveStandardErrors(const std::vector<float>& x, int trials,
                              const std::function<SumCode(int)>& code) {
  const size_t d = x.size();
  std::vector<double> mean(d, 0), sq(d, 0);
  std::vector<float> out(d);
  for (int t = 0; t < trials; ++t) {
    const SumCode c = code(t);
    auto e = c.Encode(x, 1000 + t);
    EXPECT_TRUE(e.ok());
    EXPECT_FALSE(e->clipped);
    EXPECT_EQ(e->code.size(), c.code_size());
    const std::vector<int64_t> one(e->code.begin(), e->code.end());
    EXPECT_TRUE(c.DecodeSum(one, 1, out).ok());
    for (size_t i = 0; i < d; ++i) {
      mean[i] += out[i] / trials;
      sq[i] += static_cast<double>(out[i]) * out[i] / trials;
    }
  }
  int outside = 0;
  for (size_t i = 0; i < d; ++i) {
    const double se = std::sqrt(std::max(sq[i] - mean[i] * mean[i], 1e-12) / trials);
    if (std::abs(mean[i] - x[i]) > 5 * se) ++outside;
  }
  return outside;
}

TEST(Rotation, IsOrthogonalAndUndoneExactly) {
  for (uint64_t d : {1, 2, 7, 64, 1000, 4099}) {
    const Rotation r = Rotation::Create(d, 11).value();
    const std::vector<float> f = Gaussian(d, d);
    std::vector<double> x(f.begin(), f.end()), y = x;
    r.Apply(y);
    double nx = 0, ny = 0;
    for (size_t i = 0; i < d; ++i) {
      nx += x[i] * x[i];
      ny += y[i] * y[i];
    }
    EXPECT_NEAR(ny, nx, 1e-9 * nx) << d;
    r.Invert(y);
    for (size_t i = 0; i < d; ++i) ASSERT_NEAR(y[i], x[i], 1e-12) << d << " at " << i;
  }
  EXPECT_FALSE(Rotation::Create(0, 1).ok());
}

TEST(Rotation, SpreadsAVectorWhoseMassSitsInOneCoordinate) {
  const uint64_t d = 215370;  // the CNN: two windows of 2^17
  const Rotation r = Rotation::Create(d, 3).value();
  for (uint64_t hot : {uint64_t{0}, uint64_t{100000}, d - 1}) {
    std::vector<double> x(d, 0.0);
    x[hot] = 1;
    r.Apply(x);
    double largest = 0;
    for (double v : x) largest = std::max(largest, std::abs(v));
    // A window spreads it over 2^17 coordinates (1 / 362 each); where the two windows
    // overlap, the second mixes what the first spread once more, as Gaussian-like sums
    // whose largest of 2^17 is a few times 1 / 362 (against 1 unrotated).
    EXPECT_LE(largest, 5.0 / std::sqrt(131072.0)) << hot;
  }
  EXPECT_EQ(Rotation::Create(d, 3).value().dim(), d);
}

TEST(SumCode, LevelsComeFromQsgdAndTernGradAndOthersAreRefused) {
  EXPECT_EQ(SumCode::LevelsOf("qsgd(bits=4)").value(), 7);
  EXPECT_EQ(SumCode::LevelsOf("qsgd(bits=8,bucket=128)").value(), 127);
  EXPECT_EQ(SumCode::LevelsOf("qsgd(s=3)").value(), 3);
  EXPECT_EQ(SumCode::LevelsOf("terngrad(bucket=64)").value(), 1);
  for (const char* spec : {"qsgd(bits=4,elias=1)", "topk(ratio=0.01)", "fp32",
                           "zstd(qsgd(bits=4))", "nuqsgd(bits=4)", "natural",
                           "randk(ratio=0.1,values=qsgd(bits=4,elias=1),seed=round)"}) {
    auto s = SumCode::LevelsOf(spec);
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << spec;
  }
  EXPECT_EQ(SumCode::SumBits(7, 1), 4);   // -7..7
  EXPECT_EQ(SumCode::SumBits(7, 4), 6);   // -28..28
  EXPECT_EQ(SumCode::SumBits(7, 100), 11);
  EXPECT_EQ(SumCode::SumBits(1, 1), 2);
}

TEST(SumCode, RandKWithASharedSeedKeepsTheSameKCoordinatesAndIsUnbiased) {
  EXPECT_EQ(SumCode::LevelsOf("randk(ratio=0.1,values=qsgd(bits=4),seed=round)").value(), 7);
  EXPECT_EQ(SumCode::KeptOf("randk(ratio=0.1,values=qsgd(bits=4),seed=round)", 1000).value(),
            100u);
  EXPECT_EQ(SumCode::KeptOf("randk(k=64,values=terngrad,seed=7)", 1000).value(), 64u);
  EXPECT_EQ(SumCode::KeptOf("qsgd(bits=4)", 1000).value(), 1000u);
  EXPECT_FALSE(SumCode::LevelsOf("randk(ratio=0.1,values=qsgd(bits=4))").ok()) << "no seed";
  EXPECT_FALSE(SumCode::LevelsOf("randk(ratio=0.1,seed=3)").ok()) << "float values";
  // The same round's codes of two clients cover the same k coordinates, so they add up;
  // over rounds (rotation seeds) the decode is unbiased, within 5 standard errors.
  const uint64_t d = 256, k = 64;
  const std::vector<float> x = Gaussian(d, 2, 0.1);
  EXPECT_EQ(OutsideFiveStandardErrors(x, 3000,
                                      [&](int t) {
                                        return SumCode::Create(d, 7, 10, 4, 100 + t, k).value();
                                      }),
            0);
  EXPECT_FALSE(SumCode::Create(d, 7, 10, 4, 1, d + 1).ok());
}

TEST(SumCode, NormBinsAreHalfOctavesWithOpenEnds) {
  EXPECT_EQ(SumCode::NormBin(1.0), 40);
  EXPECT_EQ(SumCode::NormBin(1.4), 40);
  EXPECT_EQ(SumCode::NormBin(1.5), 41);
  EXPECT_EQ(SumCode::NormBin(0.7), 38);
  EXPECT_EQ(SumCode::NormBin(0), 0);
  EXPECT_EQ(SumCode::NormBin(1e-30), 0);
  EXPECT_EQ(SumCode::NormBin(1e30), SumCode::kNormBins - 1);
  for (double n : {0.001, 0.3, 1.0, 7.0, 500.0}) {
    const int b = SumCode::NormBin(n);
    EXPECT_LT(n, SumCode::NormBinTop(b)) << n;
    EXPECT_GE(n, SumCode::NormBinTop(b - 1)) << n;
  }
}

TEST(SumCode, IsUnbiasedOnTheGridWithinFiveStandardErrors) {
  const uint64_t d = 512;
  const SumCode code = SumCode::Create(d, 7, /*clip=*/10, /*kappa=*/4, 5).value();
  const std::vector<float> x = Gaussian(d, 1, 0.2);  // norm about 4.5: not cut
  EXPECT_EQ(OutsideFiveStandardErrors(x, 4000, [&](int) { return code; }), 0);
}

TEST(SumCode, TheSumOfCodesDecodesToTheSumOfTheirDecodesAndACutUpdateToTheClip) {
  const uint64_t d = 3000;
  const SumCode code = SumCode::Create(d, 7, 1.0, 4, 9).value();
  std::vector<int64_t> sum(d, 0);
  std::vector<double> each(d, 0);
  std::vector<int64_t> one(d);
  std::vector<float> out(d);
  for (int c = 0; c < 5; ++c) {
    const std::vector<float> x = Gaussian(d, 20 + c, 0.05);  // norm about 2.7: cut to 1
    auto e = code.Encode(x, c);
    ASSERT_TRUE(e.ok());
    EXPECT_TRUE(e->clipped);
    EXPECT_NEAR(e->norm, 0.05 * std::sqrt(3000.0), 0.2);
    for (size_t i = 0; i < d; ++i) {
      sum[i] += e->code[i];
      one[i] = e->code[i];
      EXPECT_LE(std::abs(e->code[i]), 7);
    }
    ASSERT_TRUE(code.DecodeSum(one, 1, out).ok());
    double norm = 0;
    for (size_t i = 0; i < d; ++i) {
      each[i] += out[i];
      norm += static_cast<double>(out[i]) * out[i];
    }
    // The cut update has norm 1; the grid's rounding adds at most step^2 / 4 a coordinate.
    EXPECT_NEAR(std::sqrt(norm), 1.0, 0.35);
    EXPECT_LT(e->saturated, d / 1000 + 2) << "4 standard deviations hold nearly every coordinate";
  }
  ASSERT_TRUE(code.DecodeSum(sum, 5, out).ok());
  for (size_t i = 0; i < d; ++i) ASSERT_NEAR(out[i], each[i] / 5, 1e-6);
  EXPECT_FALSE(code.DecodeSum(sum, 0, out).ok());
  std::vector<float> bad(d, 0.0f);
  bad[7] = std::nanf("");
  EXPECT_EQ(InputErrorOf(code.Encode(bad, 1).status()), InputError::kNonFinite);
}

TEST(ZmodFrames, RoundTripAtEveryWidthAndRefuseOtherWidthsAndDirtyPadding) {
  std::mt19937_64 rng(4);
  for (int bits = 1; bits <= kMaxZmodBits; ++bits) {
    std::vector<uint64_t> words(1001);
    for (uint64_t& w : words) w = rng() & ((uint64_t{1} << bits) - 1);
    std::vector<Frame> frames;
    ASSERT_TRUE(EncodeZmod(words, bits, 200, &frames).ok()) << bits;
    uint64_t covered = 0;
    for (const Frame& f : frames) {
      ASSERT_LE(f.bytes.size(), 200u);
      auto view = ParseFrame(f.bytes, FrameLimits());
      ASSERT_TRUE(view.ok());
      std::vector<uint32_t> got;
      ASSERT_TRUE(ReadZmod(*view, bits, words.size(), &got).ok());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], words[view->begin + i]);
      covered += got.size();
      EXPECT_EQ(InputErrorOf(ReadZmod(*view, bits + 1, words.size(), &got)),
                InputError::kWrongCodec);
      EXPECT_EQ(InputErrorOf(ReadZmod(*view, bits, words.size() + 1, &got)),
                InputError::kWrongCodec);
    }
    EXPECT_EQ(covered, words.size());
  }
  // A body whose padding bits are set, and one a byte short (CRCs made good again).
  std::vector<uint64_t> three = {5, 6, 7};
  std::vector<Frame> frames;
  ASSERT_TRUE(EncodeZmod(three, 3, 0, &frames).ok());
  const std::string spec = ZmodSpec(3);
  const auto remake = [&](std::string body) {
    std::string out;
    const size_t at = BeginFrame(spec, 3, 0, 3, &out);
    out += body;
    FinishFrame(at, &out);
    return out;
  };
  auto view = ParseFrame(frames[0].bytes, FrameLimits()).value();
  std::string body(reinterpret_cast<const char*>(view.body.data()), view.body.size());
  std::vector<uint32_t> got;
  std::string dirty = body;
  dirty.back() = static_cast<char>(dirty.back() | 0x80);
  const std::string d1 = remake(dirty), d2 = remake(body.substr(0, 1));
  EXPECT_FALSE(ReadZmod(ParseFrame(d1, FrameLimits()).value(), 3, 3, &got).ok());
  EXPECT_FALSE(ReadZmod(ParseFrame(d2, FrameLimits()).value(), 3, 3, &got).ok());
  EXPECT_FALSE(EncodeZmod(three, 0, 0, &frames).ok());
  EXPECT_FALSE(EncodeZmod(three, 33, 0, &frames).ok());
  EXPECT_FALSE(EncodeZmod(three, 8, 20, &frames).ok()) << "no room for one word";
}

}  // namespace
}  // namespace fedlgc::codecs
