// DP noise (privacy/gaussian_noise.h): a million draws have the normal's mean, variance,
// kurtosis and two-sigma tail (tolerances 5 standard errors), a key reproduces its noise,
// fresh keys do not repeat, and bad deviations are refused.
#include "privacy/gaussian_noise.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace fedlgc::privacy {
namespace {

TEST(GaussianNoise, AMillionDrawsAreNormalWithTheDeviationAsked) {
  constexpr size_t kN = 1000001;  // odd: the last draw is a pair's first half
  constexpr double kSd = 2.0;
  std::vector<float> v(kN, 0.0f);
  ASSERT_TRUE(AddGaussianNoise(kSd, v).ok());
  double sum = 0, sum2 = 0, sum4 = 0;
  size_t beyond = 0;
  for (float x : v) {
    sum += x;
    sum2 += double{x} * x;
    sum4 += double{x} * x * x * x;
    beyond += std::fabs(x) > 2 * kSd;
  }
  const double n = kN, mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean, 0, 5 * kSd / std::sqrt(n));
  EXPECT_NEAR(var / (kSd * kSd), 1, 5 * std::sqrt(2 / n));
  EXPECT_NEAR(sum4 / n / (var * var), 3, 5 * std::sqrt(24 / n));
  const double tail = 0.0455003;  // P(|Z| > 2)
  EXPECT_NEAR(beyond / n, tail, 5 * std::sqrt(tail * (1 - tail) / n));
  EXPECT_NE(v[kN - 1], 0.0f);
}

TEST(GaussianNoise, AKeyReproducesItsNoiseAndFreshKeysDoNot) {
  Key32 key{};
  key[3] = 5;
  std::vector<float> a(1000, 1.0f), b(1000, 1.0f), c(1000, 1.0f), d(1000, 1.0f);
  ASSERT_TRUE(AddGaussianNoise(0.5, key, a).ok());
  ASSERT_TRUE(AddGaussianNoise(0.5, key, b).ok());
  EXPECT_EQ(a, b);
  ASSERT_TRUE(AddGaussianNoise(0.5, c).ok());
  ASSERT_TRUE(AddGaussianNoise(0.5, d).ok());
  EXPECT_NE(c, d);
  EXPECT_NE(a, c);
  std::vector<float> same(10, 3.0f);
  ASSERT_TRUE(AddGaussianNoise(0, same).ok());
  EXPECT_EQ(same, std::vector<float>(10, 3.0f));
  EXPECT_TRUE(absl::IsInvalidArgument(AddGaussianNoise(-1, same)));
  EXPECT_TRUE(absl::IsInvalidArgument(AddGaussianNoise(NAN, same)));
}

}  // namespace
}  // namespace fedlgc::privacy
