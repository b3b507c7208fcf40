// Top-k + natural dithering (Beznosikov et al., "On Biased Compression for Distributed
// Learning"), the composed spec topk(ratio, values=natdither(s, bucket)): the kept set is
// exactly the top-k of |x|; each kept value decodes to sign(x_i) times its bucket's norm
// (over the kept values) times 0 or a power of two 2^(j-s), one of the two levels around
// |x_i| / norm; conditioned on the kept set it is unbiased (Monte Carlo, with the exact
// per-coordinate variance); under error feedback the sum is conserved; and a frame holds
// exactly the header, the count, the Elias-Fano offsets and 1 + ceil(log2(s + 1)) bits per
// kept value plus a norm per bucket.
#include <algorithm>
#include <cmath>
#include <vector>

#include "codecs/elias_fano.h"
#include "codecs/error_feedback.h"
#include "codecs/frame.h"
#include "codecs/level_quantizer.h"
#include "codecs/sparse_codec.h"
#include "codecs/topk.h"
#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

constexpr char kSpec[] = "topk(ratio=0.02,values=natdither(s=6,bucket=64))";
constexpr int kS = 6;
constexpr size_t kBucket = 64;

// The kept coordinates (ascending) and, per kept coordinate, its bucket's L2 norm over the
// kept values in that order.
struct Kept {
  std::vector<uint32_t> idx;
  std::vector<double> norm;
};

Kept KeptOf(const std::vector<float>& x, size_t k) {
  Kept kept;
  TopKExact(x, k, &kept.idx);
  kept.norm.resize(kept.idx.size());
  for (size_t b = 0; b < kept.idx.size(); b += kBucket) {
    const size_t e = std::min(kept.idx.size(), b + kBucket);
    double sq = 0;
    for (size_t j = b; j < e; ++j) sq += double(x[kept.idx[j]]) * x[kept.idx[j]];
    for (size_t j = b; j < e; ++j) kept.norm[j] = std::sqrt(sq);
  }
  return kept;
}

// The two levels of {0, 2^(1-s), ..., 1/2, 1} around r in [0, 1].
std::pair<double, double> Around(double r) {
  double lo = 0, hi = std::ldexp(1.0, 1 - kS);
  while (r > hi && hi < 1) lo = hi, hi *= 2;
  return {lo, hi};
}

TEST(TopKNatDither, KeepsTheTopKAsSignedPowersOfTwoAroundEachValue) {
  const size_t n = 20000;
  auto c = testing::Make(kSpec);
  const size_t k = dynamic_cast<SparseCodec&>(*c).KeptCount(n);
  ASSERT_EQ(k, 400u);
  for (uint64_t seed = 0; seed < 5; ++seed) {
    const auto x = testing::GradientLike(n, seed);
    const Kept kept = KeptOf(x, k);
    const auto y = testing::RoundTrip(*c, x, seed);
    std::vector<bool> in(n, false);
    for (uint32_t i : kept.idx) in[i] = true;
    for (size_t i = 0; i < n; ++i) {
      if (!in[i]) {
        ASSERT_EQ(y[i], 0.0f) << "not in the top-k: " << i;
      }
    }
    for (size_t j = 0; j < kept.idx.size(); ++j) {
      const uint32_t i = kept.idx[j];
      const double norm = kept.norm[j];
      const double level = std::fabs(double(y[i])) / norm;
      const auto [lo, hi] = Around(std::fabs(double(x[i])) / norm);
      ASSERT_TRUE(std::fabs(level - lo) < 1e-6 || std::fabs(level - hi) < 1e-6)
          << "coordinate " << i << " decoded to level " << level << ", not " << lo << " or " << hi;
      if (y[i] != 0) {
        ASSERT_EQ(std::signbit(y[i]), std::signbit(x[i])) << i;
        const double l2 = std::log2(level);
        ASSERT_NEAR(l2, std::round(l2), 1e-5) << "not a power of two: " << level;
      }
    }
  }
}

TEST(TopKNatDither, UnbiasedOnTheKeptSetByMonteCarlo) {
  const size_t n = 20000;
  const int seeds = 2000;
  auto c = testing::Make(kSpec);
  const size_t k = dynamic_cast<SparseCodec&>(*c).KeptCount(n);
  const auto x = testing::GradientLike(n, 77);
  const Kept kept = KeptOf(x, k);
  std::vector<double> sum(kept.idx.size(), 0);
  for (int s = 0; s < seeds; ++s) {
    const auto y = testing::RoundTrip(*c, x, 1000 + s);
    for (size_t j = 0; j < kept.idx.size(); ++j) sum[j] += y[kept.idx[j]];
  }
  // Each decoded value is norm * (lo or hi), so its variance is norm^2 (r - lo)(hi - r).
  double chi2 = 0;
  size_t random = 0;
  for (size_t j = 0; j < kept.idx.size(); ++j) {
    const double norm = kept.norm[j];
    const double xv = x[kept.idx[j]];
    const double r = std::fabs(xv) / norm;
    const auto [lo, hi] = Around(r);
    const double var = norm * norm * (r - lo) * (hi - r);
    const double mean = sum[j] / seeds;
    if (var < 1e-20) {
      ASSERT_NEAR(mean, xv, 1e-6 * norm) << "a value on a level is exact";
      continue;
    }
    const double z = (mean - xv) / std::sqrt(var / seeds);
    EXPECT_LT(std::fabs(z), 5.0) << "kept coordinate " << kept.idx[j];
    chi2 += z * z;
    ++random;
  }
  ASSERT_GT(random, 300u);
  // Sum of `random` squared z-scores: chi-squared with that many degrees of freedom
  // (mean r, sd sqrt(2r)); 6 sd above the mean fails.
  EXPECT_LT(chi2, random + 6 * std::sqrt(2.0 * random));
}

TEST(TopKNatDither, ErrorFeedbackConservesTheSum) {
  const size_t n = 6000;
  auto codec = testing::Make(std::string("ef(") + kSpec + ")");
  auto& ef = dynamic_cast<ErrorFeedback&>(*codec);
  std::vector<double> sent(n, 0), input(n, 0);
  double scale = 0;
  for (int step = 0; step < 25; ++step) {
    const auto x = testing::GradientLike(n, 300 + step);
    for (size_t i = 0; i < n; ++i) {
      input[i] += x[i];
      scale = std::max(scale, std::fabs(double(x[i])));
    }
    const auto y = testing::RoundTrip(*codec, x, step);
    for (size_t i = 0; i < n; ++i) sent[i] += y[i];
  }
  const double tol = 25 * 25 * scale * std::ldexp(1.0, -23);
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(sent[i] + ef.residual()[i], input[i], tol) << i;
}

TEST(TopKNatDither, FrameBytesAreExact) {
  auto c = testing::Make(kSpec);
  const size_t n = 20000, k = 400;
  std::vector<Frame> frames;
  testing::RoundTrip(*c, testing::GradientLike(n, 5), 5, 0, &frames);
  ASSERT_EQ(frames.size(), 1u);
  // natdither(s=6): 13 signed levels in 4 bits, packed; a float32 norm per bucket of 64.
  const uint64_t values = (k * 4 + 7) / 8 + 4 * ((k + kBucket - 1) / kBucket);
  const uint64_t want = FrameOverhead(c->wire_spec().size()) + 4 + EliasFanoBytes(k, n) + values;
  EXPECT_EQ(frames[0].bytes.size(), want);
  EXPECT_EQ(frames[0].bytes.size(), c->MaxFrameBytes(n));
}

}  // namespace
}  // namespace fedlgc::codecs
