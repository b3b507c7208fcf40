// QSGD / NUQSGD / natural dithering: exact variance, the QSGD variance bound, levels,
// and equality of the bit-packed and Elias-coded forms.
#include "codecs/level_quantizer.h"

#include <cmath>
#include <limits>
#include <random>

#include "codecs/registry.h"
#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

// Sum over coordinates of norm^2 (r - l_j)(l_{j+1} - r): the exact variance of Q(v).
double AnalyticVariance(const LevelQuantizer& q, const std::vector<float>& v) {
  const auto& lv = q.levels();
  double norm = 0;
  if (q.norm() == NormKind::kL2) {
    for (float x : v) norm += double(x) * x;
    norm = std::sqrt(norm);
  } else {
    for (float x : v) norm = std::max(norm, double(std::fabs(x)));
  }
  double var = 0;
  for (float x : v) {
    const double r = std::fabs(x) / norm;
    for (size_t j = 0; j + 1 < lv.size(); ++j) {
      if (r >= lv[j] && r <= lv[j + 1]) {
        var += norm * norm * (r - lv[j]) * (lv[j + 1] - r);
        break;
      }
    }
  }
  return var;
}

struct VarCase {
  const char* spec;
  size_t d;
};

class QuantizerVariance : public ::testing::TestWithParam<VarCase> {};

TEST_P(QuantizerVariance, EmpiricalMatchesAnalyticAndQsgdBound) {
  const VarCase c = GetParam();
  auto codec = testing::Make(c.spec);
  const auto& q = dynamic_cast<const LevelQuantizer&>(*codec);
  ASSERT_GE(q.bucket(), c.d) << "one bucket: the bound is per bucket";
  const auto v = testing::GradientLike(c.d, 3);
  const double analytic = AnalyticVariance(q, v);
  constexpr int kTrials = 3000;
  double sum = 0, sumsq = 0;
  for (int t = 0; t < kTrials; ++t) {
    const auto y = testing::RoundTrip(*codec, v, t);
    double e = 0;
    for (size_t i = 0; i < c.d; ++i) e += (double(y[i]) - v[i]) * (double(y[i]) - v[i]);
    sum += e;
    sumsq += e * e;
  }
  const double mean = sum / kTrials;
  const double sd_of_mean = std::sqrt((sumsq / kTrials - mean * mean) / kTrials);
  EXPECT_NEAR(mean, analytic, 5 * sd_of_mean + 1e-6 * analytic) << c.spec;
  if (std::string(c.spec).rfind("qsgd", 0) == 0 && q.norm() == NormKind::kL2) {
    const double s = q.s();
    const double d = static_cast<double>(c.d);
    const double bound = std::min(d / (s * s), std::sqrt(d) / s) * testing::SquaredNorm(v);
    EXPECT_LE(analytic, bound) << c.spec;
    EXPECT_LE(mean, bound + 5 * sd_of_mean) << c.spec;
  }
}

INSTANTIATE_TEST_SUITE_P(Specs, QuantizerVariance,
                         ::testing::Values(VarCase{"qsgd(bits=4,bucket=512)", 512},
                                           VarCase{"qsgd(bits=2,bucket=1024)", 1000},
                                           VarCase{"qsgd(bits=8,bucket=64)", 64},
                                           VarCase{"qsgd(s=1,bucket=4096)", 4096},
                                           VarCase{"qsgd(bits=3,norm=linf,bucket=256)", 256},
                                           VarCase{"nuqsgd(bits=3,bucket=512)", 512},
                                           VarCase{"nuqsgd(s=4,p=0.25,bucket=128)", 128},
                                           VarCase{"natdither(s=6,bucket=512)", 300}));

TEST(LevelQuantizer, LevelsAreSortedInUnitInterval) {
  for (const char* spec : {"qsgd(bits=4)", "nuqsgd(s=7,p=0.6)", "natdither(s=10)"}) {
    auto codec = testing::Make(spec);
    const auto& lv = dynamic_cast<const LevelQuantizer&>(*codec).levels();
    EXPECT_EQ(lv.front(), 0.0f);
    EXPECT_EQ(lv.back(), 1.0f);
    for (size_t j = 1; j < lv.size(); ++j) EXPECT_LT(lv[j - 1], lv[j]) << spec;
  }
  auto nd = testing::Make("natdither(s=4)");
  const auto& lv = dynamic_cast<const LevelQuantizer&>(*nd).levels();
  EXPECT_EQ(lv, (std::vector<float>{0, 0.125f, 0.25f, 0.5f, 1}));
}

TEST(LevelQuantizer, EliasAndPackedFormsDecodeIdentically) {
  const auto v = testing::GradientLike(5000, 11);
  for (const char* base : {"qsgd(bits=4", "qsgd(s=2", "nuqsgd(bits=3", "natdither(s=5"}) {
    auto packed = testing::Make(std::string(base) + ",elias=0)");
    auto elias = testing::Make(std::string(base) + ",elias=1)");
    std::vector<Frame> fp, fe;
    const auto a = testing::RoundTrip(*packed, v, 5, 0, &fp);
    const auto b = testing::RoundTrip(*elias, v, 5, 0, &fe);
    EXPECT_EQ(a, b) << base;
    if (std::string(base) == "qsgd(s=2") {
      // With few levels most coordinates quantize to 0 and Elias coding wins.
      EXPECT_LT(fe[0].bytes.size(), fp[0].bytes.size());
    }
  }
}

TEST(LevelQuantizer, ValuesAreNormTimesSignedLevels) {
  auto codec = testing::Make("qsgd(bits=3,bucket=8)");
  std::vector<float> v = {3, -4, 0, 0, 0, 0, 0, 0};  // norm 5
  const auto y = testing::RoundTrip(*codec, v, 1);
  for (float x : y) {
    const double level = std::fabs(x) / 5.0 * 3.0;  // s = 3
    EXPECT_NEAR(level, std::round(level), 1e-6);
  }
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_GE(y[0], 0.0f);
  EXPECT_LE(y[1], 0.0f);
}

TEST(LevelQuantizer, ZeroBucketAndHugeValues) {
  auto codec = testing::Make("qsgd(bits=4,bucket=16)");
  std::vector<float> zeros(40, 0.0f);
  EXPECT_EQ(testing::RoundTrip(*codec, zeros, 1), zeros);
  // Finite values whose squares overflow float still encode (norm computed in double).
  std::vector<float> big(16, 0.0f);
  big[3] = 1e20f;
  big[7] = -1e20f;  // norm sqrt(2) * 1e20 although 1e40 overflows float
  const auto y = testing::RoundTrip(*codec, big, 1);
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_TRUE(std::isfinite(y[i]));
    if (big[i] == 0) {
      EXPECT_EQ(y[i], 0.0f);
    }
  }
  EXPECT_GT(y[3], 0.0f);
  EXPECT_LT(y[7], 0.0f);
}

}  // namespace
}  // namespace fedlgc::codecs

namespace fedlgc::codecs {
namespace {

TEST(LevelQuantizerEdges, LargestNormDecodesFinite) {
  // norm / s * s rounds above FLT_MAX for s = 127 unless the step is rounded down.
  for (const char* spec :
       {"qsgd(bits=8,bucket=8)", "qsgd(s=49,bucket=8)", "qsgd(bits=8,bucket=8,elias=1)"}) {
    auto codec = testing::Make(spec);
    const std::vector<float> x = {std::numeric_limits<float>::max(), 0, 0, 0, 0, 0, 0, 0};
    const auto y = testing::RoundTrip(*codec, x, 1);
    EXPECT_TRUE(std::isfinite(y[0])) << spec;
    EXPECT_GT(y[0], 0.99f * std::numeric_limits<float>::max()) << spec;
  }
  for (int s = 1; s <= 127; ++s) {
    const float m = std::numeric_limits<float>::max();
    EXPECT_LE(UniformLevelScale(m, s) * static_cast<float>(s), m) << s;
  }
}

TEST(LevelQuantizerEdges, TinyNormsStayUnbiased) {
  // Norms so small that s / norm or 1 / norm overflow, and L2 sums that underflow float.
  for (const char* spec : {"qsgd(bits=4,bucket=8,norm=linf)", "qsgd(bits=4,bucket=8)",
                           "natdither(s=6,bucket=8,norm=linf)", "nuqsgd(bits=3,bucket=8)"}) {
    auto codec = testing::Make(spec);
    const std::vector<float> x = {1e-38f, 0, -3e-39f, 2e-39f, 0, 0, 5e-39f, -1e-38f};
    std::vector<double> mean(8, 0.0);
    constexpr int kTrials = 4000;
    for (int t = 0; t < kTrials; ++t) {
      const auto y = testing::RoundTrip(*codec, x, t);
      for (size_t i = 0; i < 8; ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << spec;
        if (x[i] == 0) {
          ASSERT_EQ(y[i], 0.0f) << spec;
        }
        mean[i] += y[i] / double(kTrials);
      }
    }
    for (size_t i = 0; i < 8; ++i) {
      // Each coordinate is a two-point variable within [0, 2.3e-38]: sd of the mean <= 2e-40.
      EXPECT_NEAR(mean[i], x[i], 1e-39) << spec << " " << i;
    }
  }
}

TEST(LevelQuantizerEdges, ManyExponentialLevels) {
  // s up to 127 makes 2^(s-1) * 2^24 overflow float; the small-value path must not.
  for (const char* spec : {"natdither(s=127,bucket=64)", "nuqsgd(bits=8,bucket=64)"}) {
    auto codec = testing::Make(spec);
    auto x = testing::GradientLike(64, 2);
    x[0] = 1e-30f;  // far below 2^(1-s) * norm for s = 8, inside the levels for s = 127
    const auto y = testing::RoundTrip(*codec, x, 3);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y[i]));
      // With 127 levels down to 2^-126 every value lies within a factor 2 of its input.
      if (std::fabs(x[i]) > 1e-35f) {
        EXPECT_LE(std::fabs(y[i]), 2.0f * std::fabs(x[i]) + 1e-37f) << spec << " " << i;
        EXPECT_GE(std::fabs(y[i]), 0.5f * std::fabs(x[i])) << spec << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace fedlgc::codecs
