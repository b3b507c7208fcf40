// Shamir's secret sharing over GF(2^8) (privacy/shamir.h): any t shares rebuild the
// secret, t - 1 say nothing of it (one share of a 2-of-n split is uniform whatever the
// secret, by a chi-square test), and malformed share sets are refused.
#include "privacy/shamir.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "gtest/gtest.h"

namespace fedlgc::privacy {
namespace {

TEST(Shamir, AnyTSharesRebuildTheSecret) {
  const std::vector<uint8_t> secret = {0, 1, 2, 0xff, 0x80, 42, 7, 7, 7, 0x5a, 0xa5, 0x33};
  std::mt19937 rng(1);
  for (auto [t, n] : {std::pair{1, 1}, {1, 5}, {2, 2}, {3, 5}, {5, 5}, {7, 20}, {128, 255}}) {
    std::vector<Share> shares = SplitSecret(secret, t, n).value();
    ASSERT_EQ(shares.size(), static_cast<size_t>(n));
    for (int trial = 0; trial < 5; ++trial) {
      std::shuffle(shares.begin(), shares.end(), rng);
      EXPECT_EQ(CombineShares(std::span(shares).first(static_cast<size_t>(t))).value(), secret)
          << t << " of " << n;
    }
    EXPECT_EQ(CombineShares(shares).value(), secret);  // more than t: the same polynomial
    if (t > 1) {
      // t - 1 shares give a value, not the secret (but for a 256^-12 chance).
      EXPECT_NE(CombineShares(std::span(shares).first(static_cast<size_t>(t - 1))).value(), secret);
    }
  }
}

// One share of a 2-of-n split is the secret plus a uniform coefficient: whatever the
// secret byte, its value is uniform over the 256 bytes (chi-square, 255 degrees of freedom:
// mean 255, sd 22.6; the bound is 6 sd above).
TEST(Shamir, FewerThanTSharesAreUniformWhateverTheSecret) {
  for (uint8_t byte : {uint8_t{0}, uint8_t{0xc3}}) {
    const std::vector<uint8_t> secret(1, byte);
    std::vector<int> counts(256, 0);
    constexpr int kSplits = 25600;
    for (int i = 0; i < kSplits; ++i) ++counts[SplitSecret(secret, 2, 3).value()[1].y[0]];
    double chi2 = 0;
    for (int c : counts) chi2 += (c - 100.0) * (c - 100.0) / 100.0;
    EXPECT_LT(chi2, 255 + 6 * 22.6) << static_cast<int>(byte);
  }
}

TEST(Shamir, RefusesWhatIsNotASetOfShares) {
  const std::vector<uint8_t> secret = {1, 2, 3};
  for (auto [t, n] : {std::pair{0, 3}, {4, 3}, {2, 256}}) {
    EXPECT_TRUE(absl::IsInvalidArgument(SplitSecret(secret, t, n).status())) << t << " " << n;
  }
  std::vector<Share> shares = SplitSecret(secret, 2, 3).value();
  EXPECT_TRUE(absl::IsInvalidArgument(CombineShares({}).status()));
  std::vector<Share> twice = {shares[0], shares[0]};
  EXPECT_TRUE(absl::IsInvalidArgument(CombineShares(twice).status()));
  std::vector<Share> zero = {shares[0], {0, shares[1].y}};
  EXPECT_TRUE(absl::IsInvalidArgument(CombineShares(zero).status()));
  std::vector<Share> ragged = {shares[0], shares[1]};
  ragged[1].y.pop_back();
  EXPECT_TRUE(absl::IsInvalidArgument(CombineShares(ragged).status()));
}

}  // namespace
}  // namespace fedlgc::privacy
