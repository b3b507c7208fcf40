// The RDP accountant (privacy/rdp_accountant.h): the Gaussian mechanism's closed form, the
// binomial sum and the fractional series against a numerical integral of the same
// divergence, the two paths meeting at integer orders, composition, the conversions, the
// noise solver, and values published by other accountants.
#include "privacy/rdp_accountant.h"

#include <cmath>
#include <tuple>

#include "gtest/gtest.h"

namespace fedlgc::privacy {
namespace {

// log A_alpha = log of the integral of mu_0(z) ((1 - q) + q mu_1(z) / mu_0(z))^alpha dz, with
// mu_0 = N(0, sigma^2) and mu_1 = N(1, sigma^2), by the trapezoid rule in log space: a
// definition of what the accountant computes that shares none of its series.
double LogAByIntegral(double q, double sigma, double alpha) {
  const double s2 = sigma * sigma;
  const double lo = -20 * sigma, hi = alpha + 20 * sigma, h = sigma / 200;
  double m = -INFINITY;
  std::vector<double> logs;
  for (double z = lo; z <= hi; z += h) {
    const double u = (2 * z - 1) / (2 * s2);  // log mu_1(z) / mu_0(z)
    const double a = std::log1p(-q), b = std::log(q) + u;
    const double log_mix = std::max(a, b) + std::log1p(std::exp(-std::fabs(a - b)));
    const double f = -z * z / (2 * s2) - std::log(sigma * std::sqrt(2 * M_PI)) + alpha * log_mix;
    logs.push_back(f);
    m = std::max(m, f);
  }
  double sum = 0;
  for (size_t i = 0; i < logs.size(); ++i) {
    sum += (i == 0 || i + 1 == logs.size() ? 0.5 : 1.0) * std::exp(logs[i] - m);
  }
  return m + std::log(sum * h);
}

TEST(RdpAccountant, WithoutSamplingItIsTheGaussianMechanism) {
  for (double sigma : {0.5, 1.0, 4.0}) {
    for (double alpha : {1.5, 2.0, 32.0}) {
      EXPECT_DOUBLE_EQ(SubsampledGaussianRdp(1.0, sigma, alpha), alpha / (2 * sigma * sigma));
    }
  }
  EXPECT_EQ(SubsampledGaussianRdp(0.0, 1.0, 2.0), 0.0);
  EXPECT_TRUE(std::isinf(SubsampledGaussianRdp(0.1, 0.0, 2.0)));
}

// Integer orders by the binomial sum, fractional ones by the two series: both against the
// integral they expand, to 1e-6 of the RDP.
TEST(RdpAccountant, BothPathsEqualTheDivergenceTheyExpand) {
  for (auto [q, sigma] :
       {std::tuple{0.01, 1.0}, {0.05, 0.8}, {0.2, 2.0}, {0.5, 1.5}, {0.001, 0.6}}) {
    for (double alpha : {1.5, 2.0, 2.75, 4.0, 7.3, 12.0, 20.5}) {
      const double want = LogAByIntegral(q, sigma, alpha) / (alpha - 1);
      const double got = SubsampledGaussianRdp(q, sigma, alpha);
      EXPECT_NEAR(got, want, 1e-6 * std::max(1.0, std::fabs(want)))
          << "q " << q << " sigma " << sigma << " alpha " << alpha;
    }
  }
}

TEST(RdpAccountant, TheFractionalSeriesMeetsTheBinomialSumAtIntegerOrders) {
  for (auto [q, sigma] : {std::tuple{0.01, 1.1}, {0.1, 0.7}, {0.3, 3.0}}) {
    for (double alpha : {2.0, 3.0, 10.0, 40.0}) {
      const double exact = SubsampledGaussianRdp(q, sigma, alpha);
      EXPECT_NEAR(SubsampledGaussianRdp(q, sigma, alpha + 1e-9), exact, 1e-6 * exact + 1e-12)
          << q << " " << sigma << " " << alpha;
      EXPECT_LT(SubsampledGaussianRdp(q, sigma, alpha - 0.5), exact);  // grows with the order
    }
  }
}

TEST(RdpAccountant, ComposesByAdditionAndConvertsAtTheBestOrder) {
  RdpAccountant one, many;
  one.Compose(0.02, 1.2);
  many.Compose(0.02, 1.2, 500);
  for (size_t i = 0; i < one.rdp().size(); ++i) {
    EXPECT_NEAR(many.rdp()[i], 500 * one.rdp()[i], 1e-9 * many.rdp()[i]);
  }
  const PrivacySpent classic = many.Spent(1e-5, Conversion::kClassic);
  const PrivacySpent improved = many.Spent(1e-5);
  EXPECT_LT(improved.epsilon, classic.epsilon);
  // The best order is the minimum over the orders, each converted by its formula.
  for (size_t i = 0; i < many.orders().size(); ++i) {
    const double a = many.orders()[i], r = many.rdp()[i];
    EXPECT_LE(classic.epsilon, r + std::log(1e5) / (a - 1) + 1e-12);
  }
  EXPECT_EQ(many.SpentAfter(0.02, 1.2, 500, 1e-5).epsilon, [&] {
    RdpAccountant twice = many;
    twice.Compose(0.02, 1.2, 500);
    return twice.Spent(1e-5).epsilon;
  }());
  EXPECT_EQ(RdpAccountant().Spent(1e-5).epsilon, 0);
}

TEST(RdpAccountant, TheNoiseSolverFindsTheSmallestMultiplierThatKeepsTheTarget) {
  for (auto [q, rounds, eps] : {std::tuple{0.1, 100, 8.0}, {0.01, 1000, 2.0}, {0.05, 50, 1.0}}) {
    const double sigma = NoiseForEpsilon(q, rounds, eps, 1e-5).value();
    RdpAccountant at, below;
    at.Compose(q, sigma, rounds);
    below.Compose(q, sigma / 1.002, rounds);
    EXPECT_LE(at.Spent(1e-5).epsilon, eps) << q;
    EXPECT_GT(below.Spent(1e-5).epsilon, eps) << q;
  }
  EXPECT_TRUE(absl::IsInvalidArgument(NoiseForEpsilon(0, 10, 1, 1e-5).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(NoiseForEpsilon(0.1, 10, 1, 1.5).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(NoiseForEpsilon(1.0, 1, 1e-9, 1e-5).status()));
}

// The orders other accountants use, so that their published values can be checked to
// the digits they print.
std::vector<double> Range(double from, double to) {  // from, from + 1, ..., to
  std::vector<double> out;
  for (double a = from; a <= to; ++a) out.push_back(a);
  return out;
}
std::vector<double> Concat(std::vector<double> a, const std::vector<double>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
// 1.1 to 10.9 by 0.1, then 12 to 63: Opacus's DEFAULT_ALPHAS and the TensorFlow Privacy
// MNIST tutorial's orders.
std::vector<double> OpacusOrders() {
  std::vector<double> out;
  for (int x = 1; x < 100; ++x) out.push_back(1 + x / 10.0);
  return Concat(out, Range(12, 63));
}
// TensorFlow Privacy's compute_dp_sgd_privacy orders.
std::vector<double> TfpOrders() {
  return Concat(Concat({1.25, 1.5, 1.75, 2, 2.25, 2.5, 3, 3.5, 4, 4.5}, Range(5, 63)),
                {128, 256, 512});
}

double EpsilonWith(const std::vector<double>& orders,
                   const std::vector<std::tuple<double, double, uint64_t>>& steps, double delta,
                   Conversion conversion, double* order = nullptr) {
  RdpAccountant a(orders);
  for (auto [q, sigma, n] : steps) a.Compose(q, sigma, n);
  const PrivacySpent spent = a.Spent(delta, conversion);
  if (order != nullptr) *order = spent.order;
  return spent.epsilon;
}

// Values that TensorFlow Privacy (tensorflow/privacy), Opacus (pytorch/opacus) and their
// tests publish for the same mechanism, each with the orders and conversion it used.
TEST(RdpAccountant, AgreesWithThePublishedValuesOfOtherAccountants) {
  double order = 0;
  // TensorFlow Privacy's rdp_accountant_test (before its conversion changed, Dec 2020):
  // Abadi et al. 2016's q = 0.01, sigma = 4, 10,000 steps, orders 2 to 32: 1.258575 at 20.
  EXPECT_NEAR(EpsilonWith(Range(2, 32), {{0.01, 4, 10000}}, 1e-5, Conversion::kClassic, &order),
              1.258575, 1e-5);
  EXPECT_EQ(order, 20);
  // Its composition of two mechanisms: 8.509656 at order 2.5.
  const std::vector<double> mixed = {1.25, 1.5, 1.75, 2,  2.5, 3,  4,  5,  6,  7,  8,
                                     10,   12,  14,   16, 20,  24, 28, 32, 64, 256};
  EXPECT_NEAR(
      EpsilonWith(mixed, {{1e-4, 0.4, 40000}, {0.1, 2, 100}}, 1e-5, Conversion::kClassic, &order),
      8.509656, 1e-5);
  EXPECT_EQ(order, 2.5);
  // The MNIST DP-SGD tutorial's table (n = 60,000, batch 256, 234 steps an epoch, classic
  // conversion, printed to two decimals): sigma 1.1 for 60 epochs 3.01, 1.3 for 15 1.19,
  // 0.7 for 45 7.10.
  for (auto [sigma, epochs, eps] : {std::tuple{1.1, 60, 3.01}, {1.3, 15, 1.19}, {0.7, 45, 7.10}}) {
    EXPECT_NEAR(EpsilonWith(OpacusOrders(), {{256.0 / 60000, sigma, 234ull * epochs}}, 1e-5,
                            Conversion::kClassic),
                eps, 0.01 * eps)
        << sigma;
  }
  // compute_dp_sgd_privacy_test with the improved conversion: (n 60,000, batch 150, sigma
  // 1.3, 15 epochs, delta 1e-5) 0.7242234026109595 at 19; (100,000, 100, 1.0, 30, 1e-7)
  // 1.4154988495444845 at 13.
  EXPECT_NEAR(
      EpsilonWith(TfpOrders(), {{150.0 / 60000, 1.3, 6000}}, 1e-5, Conversion::kImproved, &order),
      0.7242234026109595, 1e-8);
  EXPECT_EQ(order, 19);
  EXPECT_NEAR(
      EpsilonWith(TfpOrders(), {{100.0 / 100000, 1.0, 30000}}, 1e-7, Conversion::kImproved, &order),
      1.4154988495444845, 1e-8);
  EXPECT_EQ(order, 13);
  // Opacus's accountants_test: sigma 1.5, q 0.04, 2,250 steps, its default orders: 7.32911117143.
  EXPECT_NEAR(EpsilonWith(OpacusOrders(), {{0.04, 1.5, 2250}}, 1e-5, Conversion::kImproved),
              7.32911117143, 1e-7);
  // The default orders hold both optima, so they give the same (docs/privacy.md's table).
  EXPECT_NEAR(EpsilonWith(DefaultOrders(), {{0.04, 1.5, 2250}}, 1e-5, Conversion::kImproved),
              7.32911117143, 1e-7);
  EXPECT_NEAR(EpsilonWith(DefaultOrders(), {{0.0025, 1.3, 6000}}, 1e-5, Conversion::kImproved),
              0.7242234026109595, 1e-8);
  // The docstring of Opacus's rdp.py: two mechanisms composed, orders 2 to 32: 0.336 at 23.
  EXPECT_NEAR(EpsilonWith(Range(2, 32), {{1e-5, 1.0, 10}, {1e-4, 3.0, 4}}, 1e-5,
                          Conversion::kImproved, &order),
              0.336, 0.0005);
  EXPECT_EQ(order, 23);
}

// RDP values themselves: TensorFlow Privacy's test of compute_rdp(0.01, 2.5, 50, ...) (to
// 1e-4 relative; its fractional series keeps each term's sign, as this one does) and
// compute_rdp(0.1, 2, 10, 5) = 0.07737.
TEST(RdpAccountant, AgreesWithPublishedRdpValues) {
  const std::vector<std::pair<double, double>> want = {
      {1.5, 6.5007e-04}, {2.5, 1.0854e-03}, {5, 2.1808e-03}, {50, 2.3846e-02}, {100, 1.6742e+02}};
  for (auto [alpha, rdp] : want) {
    EXPECT_NEAR(50 * SubsampledGaussianRdp(0.01, 2.5, alpha), rdp, 1e-4 * rdp) << alpha;
  }
  EXPECT_NEAR(10 * SubsampledGaussianRdp(0.1, 2, 5), 0.07737, 5e-6);
  // The conversion alone: RDP 1.1 at every order 2 to 32, delta 1e-5: 1.32783806176 at 32.
  const std::vector<double> orders = Range(2, 32);
  const std::vector<double> flat(orders.size(), 1.1);
  const PrivacySpent spent = EpsilonOf(orders, flat, 1e-5);
  EXPECT_NEAR(spent.epsilon, 1.32783806176, 1e-10);
  EXPECT_EQ(spent.order, 32);
}

TEST(RdpAccountant, RestoresWhatItSavedAndRefusesWhatItCannotHave) {
  RdpAccountant a;
  a.Compose(0.1, 1.0, 7);
  RdpAccountant b;
  ASSERT_TRUE(b.Restore(a.rdp()).ok());
  EXPECT_EQ(b.Spent(1e-6).epsilon, a.Spent(1e-6).epsilon);
  std::vector<double> bad = a.rdp();
  EXPECT_TRUE(absl::IsInvalidArgument(b.Restore(std::span(bad).first(3))));
  bad[2] = -1;
  EXPECT_TRUE(absl::IsInvalidArgument(b.Restore(bad)));
  bad[2] = NAN;
  EXPECT_TRUE(absl::IsInvalidArgument(b.Restore(bad)));
}

}  // namespace
}  // namespace fedlgc::privacy
