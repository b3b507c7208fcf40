// The RDP accountant of the subsampled Gaussian mechanism (see rdp_accountant.h).
#include "privacy/rdp_accountant.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "base/str.h"

namespace fedlgc::privacy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// log(exp(a) + exp(b)).
double LogAdd(double a, double b) {
  if (a == -kInf) return b;
  if (b == -kInf) return a;
  const double hi = std::max(a, b);
  return hi + std::log1p(std::exp(std::min(a, b) - hi));
}

// log(exp(a) - exp(b)), or nullopt where b reaches a: the series' partial sums are
// positive, so that is rounding gone wrong, and the order's RDP is not to be trusted.
std::optional<double> LogSub(double a, double b) {
  if (b == -kInf) return a;
  if (b >= a) return std::nullopt;
  return a + std::log1p(-std::exp(b - a));
}

// log(erfc(x)), without erfc's underflow past x of about 26.
double LogErfc(double x) {
  if (x < 20) return std::log(std::erfc(x));
  // erfc(x) = exp(-x^2) / (x sqrt(pi)) x (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6) + ...).
  const double r = 1 / (x * x);
  return -x * x - std::log(x) - 0.5 * std::log(M_PI) +
         std::log1p(-0.5 * r + 0.75 * r * r - 1.875 * r * r * r);
}

// log A_alpha at an integer order: A_alpha = sum_k binom(alpha, k) (1 - q)^(alpha - k) q^k
// exp((k^2 - k) / (2 sigma^2)) (Mironov, Talwar and Zhang 2019, section 3.3).
double LogAInteger(double q, double sigma, uint64_t alpha) {
  const double a = static_cast<double>(alpha);
  double log_a = -kInf;
  double log_binom = 0;  // log binom(alpha, k)
  for (uint64_t k = 0; k <= alpha; ++k) {
    const double kd = static_cast<double>(k);
    log_a = LogAdd(log_a, log_binom + kd * std::log(q) + (a - kd) * std::log1p(-q) +
                              (kd * kd - kd) / (2 * sigma * sigma));
    log_binom += std::log(a - kd) - std::log(kd + 1);
  }
  return log_a;
}

// log A_alpha at a fractional order: the integral of mu_0 (mu / mu_0)^alpha, mu_0 = N(0,
// sigma^2) and mu = (1 - q) mu_0 + q N(1, sigma^2), split where q mu_1 = (1 - q) mu_0 (at
// z0) into two binomial series that converge on each side; each term is an exponential
// moment times a Gaussian tail. Terms are summed until both fall below e^-30 of one;
// +infinity where a subtraction would cross zero (rounding), as no bound is then known.
double LogAFractional(double q, double sigma, double alpha) {
  const double s2 = sigma * sigma;
  const double z0 = s2 * std::log(1 / q - 1) + 0.5;
  double log_a0 = -kInf, log_a1 = -kInf;
  double log_coef = 0;  // log |binom(alpha, i)|
  bool positive = true;
  for (uint64_t n = 0; n < 1000000; ++n) {
    const double i = static_cast<double>(n);
    const double j = alpha - i;
    const double log_t0 = log_coef + i * std::log(q) + j * std::log1p(-q);
    const double log_t1 = log_coef + j * std::log(q) + i * std::log1p(-q);
    const double log_e0 = std::log(0.5) + LogErfc((i - z0) / (M_SQRT2 * sigma));
    const double log_e1 = std::log(0.5) + LogErfc((z0 - j) / (M_SQRT2 * sigma));
    const double log_s0 = log_t0 + (i * i - i) / (2 * s2) + log_e0;
    const double log_s1 = log_t1 + (j * j - j) / (2 * s2) + log_e1;
    if (positive) {
      log_a0 = LogAdd(log_a0, log_s0);
      log_a1 = LogAdd(log_a1, log_s1);
    } else {
      const std::optional<double> a0 = LogSub(log_a0, log_s0), a1 = LogSub(log_a1, log_s1);
      // Unsure: +infinity, which leaves this order out of every conversion (never an
      // understatement).
      if (!a0 || !a1) return kInf;
      log_a0 = *a0;
      log_a1 = *a1;
    }
    if (std::max(log_s0, log_s1) < -30) break;
    // binom(alpha, i + 1) = binom(alpha, i) (alpha - i) / (i + 1).
    log_coef += std::log(std::fabs(alpha - i)) - std::log(i + 1);
    if (alpha - i < 0) positive = !positive;
  }
  return LogAdd(log_a0, log_a1);
}

}  // namespace

std::vector<double> DefaultOrders() {
  std::vector<double> orders;
  for (int x = 11; x < 110; ++x) orders.push_back(x / 10.0);
  for (int a = 11; a < 64; ++a) orders.push_back(a);
  for (double a : {128.0, 256.0, 512.0}) orders.push_back(a);
  return orders;
}

double SubsampledGaussianRdp(double q, double sigma, double alpha) {
  if (q <= 0) return 0;
  if (sigma <= 0) return kInf;
  if (q >= 1) return alpha / (2 * sigma * sigma);  // the Gaussian mechanism itself
  if (std::isinf(alpha)) return kInf;
  const double log_a = alpha == std::floor(alpha)
                           ? LogAInteger(q, sigma, static_cast<uint64_t>(alpha))
                           : LogAFractional(q, sigma, alpha);
  return log_a / (alpha - 1);
}

PrivacySpent EpsilonOf(std::span<const double> orders, std::span<const double> rdp, double delta,
                       Conversion conversion) {
  PrivacySpent best{kInf, 0};
  for (size_t i = 0; i < orders.size() && i < rdp.size(); ++i) {
    const double a = orders[i], r = rdp[i];
    if (!(a > 1) || std::isinf(r)) continue;
    // RDP bounds the KL divergence, and by the Bretagnolle-Huber inequality the total
    // variation is at most sqrt(1 - e^-r): where that is within delta, epsilon is 0.
    if (delta * delta + std::expm1(-r) >= 0) return {0, a};
    double eps = conversion == Conversion::kClassic
                     ? r + std::log(1 / delta) / (a - 1)
                     : r + std::log1p(-1 / a) - (std::log(delta) + std::log(a)) / (a - 1);
    eps = std::max(eps, 0.0);  // a bound below 0 holds at 0 too
    if (eps < best.epsilon) best = {eps, a};
  }
  return best;
}

RdpAccountant::RdpAccountant(std::vector<double> orders)
    : orders_(std::move(orders)), rdp_(orders_.size(), 0.0) {}

void RdpAccountant::Compose(double q, double sigma, uint64_t steps) {
  for (size_t i = 0; i < orders_.size(); ++i) {
    rdp_[i] += static_cast<double>(steps) * SubsampledGaussianRdp(q, sigma, orders_[i]);
  }
}

void RdpAccountant::ComposeRdp(const std::function<double(double)>& rdp, uint64_t steps) {
  for (size_t i = 0; i < orders_.size(); ++i) {
    rdp_[i] += static_cast<double>(steps) * rdp(orders_[i]);
  }
}

PrivacySpent RdpAccountant::SpentAfterRdp(const std::function<double(double)>& rdp,
                                          uint64_t steps, double delta,
                                          Conversion conversion) const {
  RdpAccountant next = *this;
  next.ComposeRdp(rdp, steps);
  return next.Spent(delta, conversion);
}

PrivacySpent RdpAccountant::Spent(double delta, Conversion conversion) const {
  return EpsilonOf(orders_, rdp_, delta, conversion);
}

PrivacySpent RdpAccountant::SpentAfter(double q, double sigma, uint64_t steps, double delta,
                                       Conversion conversion) const {
  RdpAccountant next = *this;
  next.Compose(q, sigma, steps);
  return next.Spent(delta, conversion);
}

absl::Status RdpAccountant::Restore(std::span<const double> rdp) {
  if (rdp.size() != orders_.size()) {
    return absl::InvalidArgumentError(
        StrCat("privacy accountant: ", rdp.size(), " RDP values for ", orders_.size(), " orders"));
  }
  for (double r : rdp) {
    if (!std::isfinite(r) || r < 0) {
      return absl::InvalidArgumentError(
          StrCat("privacy accountant: an RDP value of ", r, " is not finite and >= 0"));
    }
  }
  rdp_.assign(rdp.begin(), rdp.end());
  return absl::OkStatus();
}

absl::StatusOr<double> NoiseForEpsilon(double q, uint64_t steps, double epsilon, double delta,
                                       Conversion conversion) {
  if (!(q > 0 && q <= 1) || steps == 0 || !(epsilon > 0) || !(delta > 0 && delta < 1)) {
    return absl::InvalidArgumentError(StrCat("noise for a privacy target: sampling rate ", q,
                                             " must be in (0, 1], steps ", steps, " >= 1, epsilon ",
                                             epsilon, " > 0 and delta ", delta, " in (0, 1)"));
  }
  const std::vector<double> orders = DefaultOrders();
  const auto spent = [&](double sigma) {
    RdpAccountant a(orders);
    a.Compose(q, sigma, steps);
    return a.Spent(delta, conversion).epsilon;
  };
  double lo = 1e-2, hi = 1e4;
  if (spent(hi) > epsilon) {
    return absl::InvalidArgumentError(StrCat("no noise multiplier up to ", hi, " keeps ", steps,
                                             " rounds at sampling rate ", q, " within epsilon ",
                                             epsilon, " at delta ", delta));
  }
  if (spent(lo) <= epsilon) return lo;
  // epsilon falls as sigma grows: bisect in log sigma, keeping spent(hi) <= epsilon.
  while (hi / lo > 1.001) {
    const double mid = std::sqrt(lo * hi);
    (spent(mid) <= epsilon ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace fedlgc::privacy
