// ALQ and AMQ: the variance objective against brute force, each ALQ sweep not increasing
// V, every coordinate step the exact minimizer, AMQ's p against a fine grid, the fitted
// levels in every frame (the same in every chunk), the measured variance equal to the
// analytic one for those levels, 3-bit ALQ/AMQ below 3-bit QSGD's variance on
// gradient-like data, exact body sizes, and hostile level fields.
#include "codecs/adaptive_levels.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "codecs/input_error.h"
#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

AdaptiveQuantizer& AsAdaptive(std::unique_ptr<Codec>& c) {
  return dynamic_cast<AdaptiveQuantizer&>(*c);
}

std::vector<double> RandomMagnitudes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> e(12.0);
  std::vector<double> r(n);
  for (double& x : r) x = std::min(1.0, e(rng));
  r[0] = 0;
  r[1] = 1;
  return r;
}

double BruteInterval(const std::vector<double>& r, const std::vector<double>& w, double a,
                     double b) {
  double v = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] >= a && r[i] < b) v += w[i] * (r[i] - a) * (b - r[i]);
  }
  return v;
}

// Weights as bucket norms^2 would give: spread over two orders of magnitude.
std::vector<double> RandomWeights(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-2, 2);
  std::vector<double> w(n);
  for (double& x : w) x = std::pow(10.0, u(rng));
  return w;
}

TEST(LevelObjective, MatchesBruteForce) {
  const auto r = RandomMagnitudes(3000, 1);
  const auto w = RandomWeights(3000, 1);
  double total = 0;
  for (double x : w) total += x;
  const LevelObjective f(r, w);
  const std::vector<double> levels = {0, 0.02, 0.07, 0.2, 0.5, 1};
  double brute = 0;
  for (size_t j = 0; j + 1 < levels.size(); ++j) {
    brute += BruteInterval(r, w, levels[j], levels[j + 1]);
  }
  EXPECT_NEAR(f.Variance(levels), brute / total, 1e-12);
  // The slope is the derivative of V in one level.
  const double h = 1e-7, a = 0.02, l = 0.11, b = 0.2;
  auto local = [&](double x) {
    return (BruteInterval(r, w, a, x) + BruteInterval(r, w, x, b)) / total;
  };
  EXPECT_NEAR(f.Slope(a, l, b), (local(l + h) - local(l - h)) / (2 * h), 1e-5);
}

// Repeated samples (magnitudes on a 1/64 grid) leave F flat between equal breakpoints;
// the step must still land on the minimizer.
TEST(LevelObjective, BestLevelWithRepeatedSamples) {
  auto r = RandomMagnitudes(4000, 7);
  for (double& x : r) x = std::round(x * 64) / 64;
  const auto w = RandomWeights(4000, 7);
  const LevelObjective f(r, w);
  for (auto [a, b] : {std::pair{0.0, 0.5}, std::pair{1 / 64.0, 10 / 64.0}, std::pair{0.0, 1.0}}) {
    const double best = f.BestLevel(a, b - 1e-9, b);
    double brute = f.Interval(a, b - 1e-9) + f.Interval(b - 1e-9, b);
    for (double x : r) {
      if (x > a && x < b) brute = std::min(brute, f.Interval(a, x) + f.Interval(x, b));
    }
    EXPECT_NEAR(f.Interval(a, best) + f.Interval(best, b), brute, 1e-9 * (1 + brute))
        << a << "," << b;
  }
}

TEST(LevelObjective, BestLevelIsTheExactMinimizerAndSweepsNeverIncreaseV) {
  const auto r = RandomMagnitudes(2000, 2);
  const LevelObjective f(r, RandomWeights(2000, 2));
  for (auto [a, b] : {std::pair{0.0, 0.3}, std::pair{0.01, 0.05}, std::pair{0.1, 1.0}}) {
    const double best = f.BestLevel(a, (a + b) / 2, b);
    const double fb = f.Interval(a, best) + f.Interval(best, b);
    for (double x : r) {
      if (x > a && x < b) {
        EXPECT_LE(fb, f.Interval(a, x) + f.Interval(x, b) + 1e-12);
      }
    }
  }
  for (int s : {3, 7}) {
    const std::vector<double> uniform = UniformLevels(s);
    std::vector<double> trace;
    const auto l = AlqDescend(f, uniform, 30, &trace);
    ASSERT_FALSE(trace.empty());
    double prev = f.Variance(uniform);
    for (double v : trace) {
      EXPECT_LE(v, prev + 1e-15) << "s=" << s;
      prev = v;
    }
    for (int j = 1; j <= s; ++j) EXPECT_LT(l[j - 1], l[j]);
    // The multi-start fit is no worse than QSGD's and NUQSGD's levels, and better here.
    const double fitted = f.Variance(FitAlq(f, s, 30));
    EXPECT_LE(fitted, trace.back() + 1e-15);
    EXPECT_LT(fitted, 0.9 * f.Variance(uniform));
    EXPECT_LT(fitted, f.Variance(ExponentialLevels(0.5, s)));
  }
}

TEST(LevelObjective, AmqFindsTheBestExponentOnAGrid) {
  const LevelObjective f(RandomMagnitudes(5000, 3));
  for (int s : {3, 7}) {
    const double p = FitAmq(f, s, 40);
    EXPECT_GT(p, 0.0);
    EXPECT_LT(p, 1.0);
    double grid = 1e300;
    for (int i = 1; i < 1000; ++i)
      grid = std::min(grid, f.Variance(ExponentialLevels(i / 1000.0, s)));
    EXPECT_LE(f.Variance(ExponentialLevels(p, s)), grid * 1.01) << "s=" << s << " p=" << p;
  }
}

TEST(AdaptiveQuantizer, SpecsLevelsInTheFrameAndExactSizes) {
  auto alq = testing::Make("alq");
  ASSERT_NE(alq, nullptr);
  EXPECT_EQ(alq->spec(), "alq/1(bits=3,sweeps=30,sample=65536,bucket=512,norm=l2,elias=0)");
  EXPECT_EQ(alq->wire_spec(), "alq/1(bits=3,bucket=512,norm=l2,elias=0)");
  auto amq = testing::Make("amq(bits=4)");
  EXPECT_EQ(amq->wire_spec(), "amq/1(bits=4,bucket=512,norm=l2,elias=0)");
  EXPECT_TRUE(alq->traits().unbiased);
  EXPECT_FALSE(alq->traits().stateful);
  const auto x = testing::GradientLike(10000, 4);
  const std::vector<float> levels = AsAdaptive(alq).FitLevels(x);
  ASSERT_EQ(levels.size(), 4u);
  EXPECT_EQ(levels[0], 0.0f);
  EXPECT_EQ(levels[3], 1.0f);
  // One 3-bit frame: 2 levels, 20 bucket norms, 3 bits per coordinate.
  std::vector<Frame> whole, cut;
  testing::RoundTrip(*alq, x, 1, 0, &whole);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].bytes.size(), FrameOverhead(alq->wire_spec().size()) + 8 + 20 * 4 + 3750);
  EXPECT_EQ(whole[0].bytes.size(), alq->MaxFrameBytes(10000));
  // Chunks fit once: every frame carries the levels of the whole input, and together they
  // decode like the whole.
  const auto joined = testing::RoundTrip(*alq, x, 1, 1000, &cut);
  ASSERT_GT(cut.size(), 3u);
  for (const Frame& f : cut) {
    const auto view = ParseFrame(f.bytes, FrameLimits{}).value();
    float l[2];
    std::memcpy(l, view.body.data(), 8);
    EXPECT_EQ(l[0], levels[1]);
    EXPECT_EQ(l[1], levels[2]);
  }
  EXPECT_EQ(joined, testing::RoundTrip(*alq, x, 1));
}

// Monte Carlo over seeds: the mean squared error equals sum ||v||^2 (r - l_j)(l_{j+1} - r)
// for the levels the frame carries, and at 3 bits ALQ and AMQ beat QSGD's uniform levels.
TEST(AdaptiveQuantizer, MeasuredVarianceIsTheAnalyticOneAndBelowQsgd) {
  const size_t n = 4096;
  const auto x = testing::GradientLike(n, 5);
  auto mse = [&](Codec& c, int trials) {
    double total = 0;
    for (int t = 0; t < trials; ++t) {
      const auto y = testing::RoundTrip(c, x, 100 + t);
      for (size_t i = 0; i < n; ++i) total += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
    }
    return total / trials;
  };
  auto analytic = [&](const std::vector<float>& lv, uint32_t bucket) {
    double var = 0;
    for (size_t b = 0; b < n; b += bucket) {
      double norm = 0;
      for (size_t i = b; i < b + bucket; ++i) norm += double(x[i]) * x[i];
      norm = std::sqrt(norm);
      for (size_t i = b; i < b + bucket; ++i) {
        const double r = std::fabs(x[i]) / norm;
        for (size_t j = 0; j + 1 < lv.size(); ++j) {
          if (r >= lv[j] && r < lv[j + 1]) var += norm * norm * (r - lv[j]) * (lv[j + 1] - r);
        }
      }
    }
    return var;
  };
  auto qsgd = testing::Make("qsgd(bits=3,bucket=512)");
  const double q = mse(*qsgd, 400);
  for (const char* spec : {"alq(bits=3)", "amq(bits=3)"}) {
    auto c = testing::Make(spec);
    const double expected = analytic(AsAdaptive(c).FitLevels(x), 512);
    const double measured = mse(*c, 400);
    EXPECT_NEAR(measured, expected, 0.05 * expected) << spec;
    EXPECT_LT(measured, 0.8 * q) << spec << " vs qsgd(bits=3) " << q;
  }
}

TEST(AdaptiveQuantizer, RefusesBadLevelFields) {
  auto c = testing::Make("alq(bits=3,bucket=64)");
  const auto x = testing::GradientLike(640, 6);
  std::vector<Frame> frames;
  testing::RoundTrip(*c, x, 1, 0, &frames);
  const size_t body = testing::BodyOffset(frames[0].bytes);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (auto [at, v] : {std::pair{0, nan}, std::pair{0, 0.0f}, std::pair{0, -0.1f},
                       std::pair{4, 1.0f}, std::pair{4, 1e-9f}, std::pair{4, 2.0f}}) {
    std::string f = frames[0].bytes;
    std::memcpy(f.data() + body + at, &v, 4);
    testing::FixCrc(&f);
    std::vector<float> out(640);
    const absl::Status st = DecodeFrameInto(*c, f, FrameLimits{}, out);
    EXPECT_EQ(InputErrorOf(st), InputError::kNonFinite) << at << " " << v << ": " << st;
  }
  // Non-finite input is refused with its position, nothing encoded.
  auto bad = x;
  bad[77] = std::numeric_limits<float>::infinity();
  std::vector<Frame> none;
  const absl::Status st = c->Encode(bad, EncodeOptions{}, &none);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace fedlgc::codecs
