// The Skellam mechanism (privacy/skellam.h): its RDP bound against the Renyi divergence of
// two shifted Skellam distributions computed from their probabilities (never below it,
// and close to it where the noise is wide); Zhu and Wang's sampled bound against the
// exact sampled Gaussian (accountant's binomial sum, itself checked against TensorFlow
// Privacy) and never above the unsampled RDP; the noise's mean and variance by Monte Carlo,
// and the Poisson draws against their probabilities by chi-square.
#include "privacy/skellam.h"

#include <cmath>
#include <map>

#include "gtest/gtest.h"
#include "privacy/rdp_accountant.h"

namespace fedlgc::privacy {
namespace {

// log P(Skellam of variance v = k): e^-v I_k(v), the two Poissons' mean v / 2 each; by
// the Bessel function's asymptotic scaling, log I_k(v) - v, through the series.
double LogSkellamPmf(int64_t k, double v) {
  // I_k(v) = sum_m (v/2)^(2m+k) / (m! (m+k)!), summed in log space.
  const double ak = std::abs(static_cast<double>(k));
  double hi = -INFINITY, sum = 0;
  std::vector<double> terms;
  for (int m = 0; m < 20000; ++m) {
    const double t = (2 * m + ak) * std::log(v / 2) - std::lgamma(m + 1.0) - std::lgamma(m + ak + 1);
    terms.push_back(t);
    hi = std::max(hi, t);
    if (m > v && t < hi - 50) break;
  }
  for (double t : terms) sum += std::exp(t - hi);
  return hi + std::log(sum) - v;
}

// D_alpha(Sk + shift || Sk) in one dimension, from the probabilities.
double ExactDivergence(double v, int shift, double alpha) {
  const int64_t span = static_cast<int64_t>(12 * std::sqrt(v)) + 40;
  double hi = -INFINITY;
  std::vector<double> terms;
  for (int64_t k = -span; k <= span; ++k) {
    const double t = alpha * LogSkellamPmf(k - shift, v) + (1 - alpha) * LogSkellamPmf(k, v);
    terms.push_back(t);
    hi = std::max(hi, t);
  }
  double sum = 0;
  for (double t : terms) sum += std::exp(t - hi);
  return (hi + std::log(sum)) / (alpha - 1);
}

TEST(Skellam, TheRdpBoundHoldsAndIsCloseToTheExactDivergence) {
  for (double v : {20.0, 200.0}) {
    for (int shift : {1, 3}) {
      for (double alpha : {2.0, 4.0, 10.0}) {
        const SkellamStep step{static_cast<double>(shift), static_cast<double>(shift), v};
        const double exact = ExactDivergence(v, shift, alpha);
        const double bound = step.Rdp(alpha);
        EXPECT_GE(bound, exact * (1 - 1e-9)) << v << " " << shift << " " << alpha;
        // Wide noise: within 5% (at a variance of 20 and order 10 the bound is 1.34x).
        if (v == 200.0) {
          EXPECT_LE(bound, exact * 1.05) << shift << " " << alpha;
        }
        // The Gaussian's alpha l2^2 / (2v) is its leading term.
        EXPECT_GE(bound, alpha * shift * shift / (2 * v));
      }
    }
  }
  EXPECT_TRUE(std::isinf(SkellamStep{1, 1, 0}.Rdp(2)));
}

TEST(Skellam, ZhuWangsSampledBoundHoldsOverTheExactSampledGaussian) {
  for (double q : {0.01, 0.1}) {
    for (double sigma : {1.0, 2.0}) {
      for (uint64_t alpha : {2, 4, 8, 16, 32}) {
        const auto gauss = [&](uint64_t l) { return l / (2 * sigma * sigma); };
        const double bound = PoissonSampledRdp(alpha, q, gauss);
        const double exact = SubsampledGaussianRdp(q, sigma, static_cast<double>(alpha));
        EXPECT_GE(bound, exact * (1 - 1e-9)) << q << " " << sigma << " " << alpha;
        EXPECT_LE(bound, gauss(alpha) + 1e-12) << "never above the unsampled RDP";
        // A general bound: exact at order 2, at most 2.7x the Gaussian's own over these.
        EXPECT_LE(bound, exact * 3) << q << " " << sigma << " " << alpha;
        if (alpha == 2) {
          EXPECT_NEAR(bound, exact, exact * 1e-9);
        }
      }
    }
  }
  EXPECT_EQ(PoissonSampledRdp(8, 0, [](uint64_t) { return 5.0; }), 0);
  EXPECT_EQ(PoissonSampledRdp(8, 1, [](uint64_t) { return 5.0; }), 5.0);
}

// Values of Google's reference implementation (google-research/federated,
// distributed_dp/accounting_utils.py at a5af8c4: _skellam_rdp with scale 1, and
// _compute_rdp_subsampled with upper_bound=True), run with Debian's scipy 1.10.1.
TEST(Skellam, ReproducesTheReferenceImplementationsValues) {
  struct Row {
    double l1, l2, var, alpha, rdp;
  };
  for (const Row& r : {Row{50, 10, 1000, 2, 0.10015}, Row{50, 10, 1000, 8, 0.40045},
                       Row{50, 10, 1000, 32, 1.60165}, Row{5000, 70.71, 5e4, 4, 0.2000026639},
                       Row{5000, 70.71, 5e4, 20, 1.00000332}, Row{3, 3, 9, 2, 1.138888889},
                       Row{3, 3, 9, 5, 2.805555556}}) {
    const SkellamStep step{r.l1, r.l2, r.var};
    EXPECT_NEAR(step.Rdp(r.alpha), r.rdp, r.rdp * 1e-8) << r.alpha;
  }
  struct Sampled {
    double q, l1, l2, var;
    uint64_t alpha;
    double rdp;
  };
  for (const Sampled& r :
       {Sampled{0.1, 50, 10, 1000, 2, 0.00105281266}, Sampled{0.1, 50, 10, 1000, 8, 0.01875921023},
        Sampled{0.1, 50, 10, 1000, 32, 0.05673383527},
        Sampled{0.01, 5000, 70.71, 5e4, 4, 2.465560776e-05},
        Sampled{0.01, 5000, 70.71, 5e4, 20, 0.0002516273412},
        Sampled{0.3, 3, 3, 9, 5, 1.611823331}}) {
    const SkellamStep step{r.l1, r.l2, r.var};
    EXPECT_NEAR(SampledSkellamRdp(step, r.q, static_cast<double>(r.alpha)), r.rdp, r.rdp * 1e-8)
        << r.q << " " << r.alpha;
  }
  struct Gauss {
    double q, sigma;
    uint64_t alpha;
    double rdp;
  };
  for (const Gauss& r : {Gauss{0.01, 1.0, 2, 0.0001718134221}, Gauss{0.01, 1.0, 16, 3.161091603},
                         Gauss{0.1, 2.0, 8, 0.03684076683}, Gauss{0.05, 0.8, 32, 21.94307031}}) {
    const auto gauss = [&](uint64_t l) { return l / (2 * r.sigma * r.sigma); };
    EXPECT_NEAR(PoissonSampledRdp(r.alpha, r.q, gauss), r.rdp, r.rdp * 1e-8) << r.alpha;
  }
}

TEST(Skellam, RoundingInflatesTheSensitivityBySqrtDim) {
  const SkellamStep s = RoundedSensitivity(100, 10000);
  EXPECT_DOUBLE_EQ(s.l2, 200);
  EXPECT_DOUBLE_EQ(s.l1, 200 * 100);
  EXPECT_DOUBLE_EQ(RoundedSensitivity(1, 10000).l1, 101 * 100);
  // A fractional order takes the next integer's.
  const SkellamStep step{20000, 200, 1e6};
  EXPECT_EQ(SampledSkellamRdp(step, 0.1, 3.4), SampledSkellamRdp(step, 0.1, 4));
}

TEST(Skellam, NoiseHasMeanZeroAndItsVarianceWithinFiveStandardErrors) {
  Key32 key{};
  for (double v : {3.0, 40.0, 1e4, 2e6}) {
    key[0] = static_cast<uint8_t>(static_cast<int64_t>(v));  // modulo 256, defined
    std::vector<int64_t> x(200000, 0);
    ASSERT_TRUE(AddSkellamNoise(v, key, x).ok());
    double mean = 0, sq = 0, fourth = 0;
    for (int64_t a : x) mean += static_cast<double>(a) / x.size();
    for (int64_t a : x) {
      const double d = static_cast<double>(a) - mean;
      sq += d * d / x.size();
      fourth += d * d * d * d / x.size();
    }
    const double se_mean = std::sqrt(v / x.size());
    const double se_var = std::sqrt((fourth - sq * sq) / x.size());
    EXPECT_LT(std::abs(mean), 5 * se_mean) << v;
    EXPECT_LT(std::abs(sq - v), 5 * se_var) << v;
  }
  std::vector<int64_t> y(3, 0);
  EXPECT_FALSE(AddSkellamNoise(-1, y).ok());
  EXPECT_FALSE(AddSkellamNoise(NAN, y).ok());
  ASSERT_TRUE(AddSkellamNoise(0, y).ok());
  EXPECT_EQ(y, std::vector<int64_t>(3, 0));
}

TEST(Skellam, TheNoiseMatchesTheSkellamDistributionByChiSquare) {
  // Both samplers' paths: a Poisson mean of 2 (inversion) and of 30 (transformed rejection).
  for (double v : {4.0, 60.0}) {
    Key32 key{};
    key[1] = static_cast<uint8_t>(v);
    const size_t n = 400000;
    std::vector<int64_t> x(n, 0);
    ASSERT_TRUE(AddSkellamNoise(v, key, x).ok());
    std::map<int64_t, double> count;
    for (int64_t a : x) count[a] += 1;
    // Bins with an expected count of at least 20; the tails pooled into the last bin.
    double chi2 = 0, rest_obs = n, rest_exp = n;
    int bins = 0;
    const int64_t span = static_cast<int64_t>(6 * std::sqrt(v)) + 3;
    for (int64_t k = -span; k <= span; ++k) {
      const double expected = n * std::exp(LogSkellamPmf(k, v));
      if (expected < 20) continue;
      const double observed = count.count(k) ? count[k] : 0;
      chi2 += (observed - expected) * (observed - expected) / expected;
      rest_obs -= observed;
      rest_exp -= expected;
      ++bins;
    }
    if (rest_exp >= 20) {
      chi2 += (rest_obs - rest_exp) * (rest_obs - rest_exp) / rest_exp;
      ++bins;
    }
    // The 99.9% point of chi-square with k degrees of freedom is below k + 3.1 sqrt(2k) + 10.
    const double df = bins - 1;
    EXPECT_LT(chi2, df + 3.1 * std::sqrt(2 * df) + 10) << "variance " << v << ", " << bins
                                                        << " bins";
  }
}

}  // namespace
}  // namespace fedlgc::privacy
