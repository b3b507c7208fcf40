// A privacy accountant for user-level differential privacy (DP-FedAvg, McMahan et al. 2018,
// "Learning Differentially Private Recurrent Language Models"): each round the coordinator
// sums updates clipped to norm C from a sample of the clients, each taken with probability
// q, and adds Gaussian noise of standard deviation z x C to the sum. One such round is the
// Poisson-subsampled Gaussian mechanism with noise multiplier z; its Renyi differential
// privacy (Mironov 2017, "Renyi Differential Privacy") at order alpha is computed as in
// Mironov, Talwar and Zhang 2019 ("Renyi Differential Privacy of the Sampled Gaussian
// Mechanism"): exactly by a binomial sum at integer orders, by two converging series at
// fractional ones. RDP composes by addition over rounds, and converts to (epsilon, delta)
// at the best order (docs/privacy.md).
#ifndef FEDLGC_PRIVACY_RDP_ACCOUNTANT_H_
#define FEDLGC_PRIVACY_RDP_ACCOUNTANT_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::privacy {

// The orders the accountant tracks unless told otherwise: 1.1 to 10.9 by 0.1, then 11 to
// 63, then 128, 256 and 512.
std::vector<double> DefaultOrders();

// The RDP at order `alpha` (> 1) of one step of the Gaussian mechanism with noise
// multiplier `sigma` (the noise's standard deviation over the sensitivity) applied to a
// Poisson sample of rate `q` in [0, 1]. +infinity when sigma is 0 and q > 0.
double SubsampledGaussianRdp(double q, double sigma, double alpha);

// How RDP becomes (epsilon, delta):
//   kClassic   epsilon = rdp(alpha) + log(1/delta) / (alpha - 1) (Mironov 2017, Prop. 3)
//   kImproved  epsilon = rdp(alpha) + log((alpha - 1) / alpha)
//                        - (log(delta) + log(alpha)) / (alpha - 1)
//              (Canonne, Kamath and Steinke 2020; Balle et al. 2020): never larger.
enum class Conversion { kClassic, kImproved };

struct PrivacySpent {
  double epsilon = 0;
  double order = 0;  // the order that gave it
};

// The smallest epsilon at `delta` in (0, 1) over `orders`, given the RDP at each; 0 where
// an RDP r has 1 - e^-r <= delta^2 (the total variation is then within delta).
// REQUIRES: orders.size() == rdp.size(), every order > 1.
PrivacySpent EpsilonOf(std::span<const double> orders, std::span<const double> rdp, double delta,
                       Conversion conversion = Conversion::kImproved);

// The RDP a job has spent, order by order. Not thread-safe; copyable (a checkpoint keeps
// rdp()).
class RdpAccountant {
 public:
  explicit RdpAccountant(std::vector<double> orders = DefaultOrders());

  // Adds `steps` steps of the subsampled Gaussian mechanism (q, sigma).
  void Compose(double q, double sigma, uint64_t steps = 1);
  // Adds `steps` steps of a mechanism whose RDP at each order `rdp` gives (the Skellam
  // mechanism's, skellam.h).
  void ComposeRdp(const std::function<double(double order)>& rdp, uint64_t steps = 1);
  // What Spent would say after `steps` more steps of `rdp`, composing nothing.
  PrivacySpent SpentAfterRdp(const std::function<double(double order)>& rdp, uint64_t steps,
                             double delta, Conversion conversion = Conversion::kImproved) const;
  PrivacySpent Spent(double delta, Conversion conversion = Conversion::kImproved) const;
  // What Spent would say after `steps` more steps of (q, sigma), composing nothing.
  PrivacySpent SpentAfter(double q, double sigma, uint64_t steps, double delta,
                          Conversion conversion = Conversion::kImproved) const;

  const std::vector<double>& orders() const { return orders_; }
  const std::vector<double>& rdp() const { return rdp_; }
  // Restores what rdp() said (a checkpoint); INVALID_ARGUMENT unless one finite,
  // non-negative value per order.
  absl::Status Restore(std::span<const double> rdp);

 private:
  std::vector<double> orders_;
  std::vector<double> rdp_;
};

// The smallest noise multiplier (to 0.1%) with which `steps` steps at sampling rate q spend
// at most `epsilon` at `delta`; INVALID_ARGUMENT for arguments out of range or an epsilon no
// multiplier up to 1e4 reaches.
absl::StatusOr<double> NoiseForEpsilon(double q, uint64_t steps, double epsilon, double delta,
                                       Conversion conversion = Conversion::kImproved);

}  // namespace fedlgc::privacy

#endif  // FEDLGC_PRIVACY_RDP_ACCOUNTANT_H_
