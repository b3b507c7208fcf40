// Unbiasedness E[C(x)] = x by Monte Carlo for every codec that claims it
// (traits().unbiased), with a tolerance derived from the observed variance.
//
// Coordinates are pooled into 16 groups (sign x magnitude octile); for each trial the
// group sums of C(x) - x are near-normal (a sum of many independent roundings), so
// z_g = mean_g / sqrt(var_g / T) is standard normal under the null and sum z_g^2 is
// chi-square with 16 degrees of freedom (mean 16, sd 5.7). A rounding bias that depends
// on sign or magnitude (the usual bug: always rounding down) moves some z_g by
// sqrt(T) * bias / sd, i.e. tens of units here.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "codecs/registry.h"
#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

constexpr int kGroups = 16;
constexpr int kTrials = 2000;
constexpr size_t kN = 2048;

class Unbiased : public ::testing::TestWithParam<std::string> {};

TEST_P(Unbiased, MonteCarloMeanMatchesInput) {
  auto codec = testing::Make(GetParam());
  ASSERT_TRUE(codec->traits().unbiased) << GetParam();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(kN);
  for (float& v : x) v = u(rng);

  // Group of each coordinate: sign (2) x magnitude octile (8).
  std::vector<float> mags(kN);
  for (size_t i = 0; i < kN; ++i) mags[i] = std::fabs(x[i]);
  std::vector<float> sorted = mags;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> group(kN);
  for (size_t i = 0; i < kN; ++i) {
    const int oct = static_cast<int>(
        (std::lower_bound(sorted.begin(), sorted.end(), mags[i]) - sorted.begin()) * 8 / kN);
    group[i] = (x[i] < 0 ? 8 : 0) + std::min(oct, 7);
  }

  std::vector<double> sum(kGroups, 0), sumsq(kGroups, 0);
  std::vector<double> trial(kGroups);
  for (int t = 0; t < kTrials; ++t) {
    const auto y = testing::RoundTrip(*codec, x, 1000 + t);
    std::fill(trial.begin(), trial.end(), 0.0);
    for (size_t i = 0; i < kN; ++i) trial[group[i]] += double(y[i]) - x[i];
    for (int g = 0; g < kGroups; ++g) {
      sum[g] += trial[g];
      sumsq[g] += trial[g] * trial[g];
    }
  }
  double chi2 = 0;
  for (int g = 0; g < kGroups; ++g) {
    const double mean = sum[g] / kTrials;
    const double var = sumsq[g] / kTrials - mean * mean;
    if (var <= 0) {
      // Never varied: a deterministic codec, unbiased only if exact (fp32).
      EXPECT_EQ(mean, 0.0) << GetParam() << " group " << g << " is deterministic and biased";
      continue;
    }
    const double z = mean / std::sqrt(var / kTrials);
    EXPECT_LT(std::fabs(z), 5.0) << GetParam() << " group " << g << " mean error " << mean;
    chi2 += z * z;
  }
  // chi-square(16): P(> 16 + 7 sd = 56) < 1e-6.
  EXPECT_LT(chi2, 56.0) << GetParam();
}

// Every registry example whose codec claims unbiasedness, but random-k with a fixed shared
// seed=S: it keeps the same set whatever EncodeOptions::seed, so its mean is x only over S,
// which a job draws anew each round (seed=round).
INSTANTIATE_TEST_SUITE_P(Codecs, Unbiased,
                         ::testing::ValuesIn(testing::RegistryExampleSpecs([](const Codec& c) {
                           return c.traits().unbiased &&
                                  c.spec().find(",seed=") == std::string::npos;
                         })),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing::SpecTestName(info.param);
                         });

TEST(Biased, SignAndTopKAreReportedBiased) {
  for (const char* spec : {"sign", "topk(ratio=0.1)", "terngrad", "fp16", "ef(qsgd(bits=4))"}) {
    EXPECT_FALSE(testing::Make(spec)->traits().unbiased) << spec;
  }
}

}  // namespace
}  // namespace fedlgc::codecs
