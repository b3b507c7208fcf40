// User-level differential privacy for FedAvg (DP-FedAvg, McMahan et al. 2018, "Learning
// Differentially Private Recurrent Language Models"; docs/privacy.md): each round asks
// every connected client with probability q (--fraction), independently (Poisson
// sampling), clips each update that arrives to norm C, sums them with weight one each,
// adds Gaussian noise of standard deviation z x C to the sum (privacy/gaussian_noise.h)
// and divides by a fixed denominator, q x N, N the clients connected at the job's first
// round (treated as public: it says nothing of any one client's data). One
// round is the subsampled Gaussian mechanism with noise multiplier z, and the privacy
// accountant (privacy/rdp_accountant.h) composes the job's rounds into epsilon at
// --dp-delta. The job stops before a round that would spend more than --dp-max-epsilon.
// What the rounds spent is saved beside each checkpoint (<state_dir>/dp-<round>.bin) with
// the job's delta, limit and N: a restart goes on from it, a DP job never restarts without
// it nor with another delta or limit, and a job whose checkpoint has one never restarts
// without --dp (FedAvgDriver::Create).
#ifndef FEDLGC_MODES_FEDAVG_DP_ROUNDS_H_
#define FEDLGC_MODES_FEDAVG_DP_ROUNDS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/robust.h"
#include "coordinator/round_driver.h"
#include "privacy/keystream.h"
#include "privacy/rdp_accountant.h"
#include "privacy/skellam.h"

namespace prometheus {
class Gauge;
}

namespace fedlgc::modes {

// Where the noise comes from: the coordinator adds Gaussian noise to the clipped sum it
// decoded (central), or each client of a secure aggregation round adds Skellam noise to
// its integer code (distributed: privacy/skellam.h), so that the coordinator only ever
// sees a noised sum.
enum class DpMechanism { kGaussian, kSkellam };

struct DpOptions {
  DpMechanism mechanism = DpMechanism::kGaussian;
  double noise = 0;        // z; 0: solved from `epsilon` over the job's rounds
  double clip = 0;         // C: every update's norm is cut to it
  double epsilon = 0;      // --dp-epsilon: the job's target (with noise 0)
  double delta = 1e-5;     // --dp-delta
  double max_epsilon = 0;  // --dp-max-epsilon; 0: the target, or no limit without one

  // The stop: max_epsilon, else the target, else +infinity.
  double Limit() const;
  bool operator==(const DpOptions&) const = default;
};

// --dp "gaussian(noise=Z, clip=C)" or "gaussian(clip=C)" with --dp-epsilon E (the noise
// that spends E over the job), or the same with "skellam" (with --secagg); "" or "none":
// no DP (nullopt). INVALID_ARGUMENT says what is wrong.
absl::StatusOr<std::optional<DpOptions>> ParseDp(const std::string& spec, double epsilon,
                                                 double delta, double max_epsilon);

// What turns a distributed DP job's noise multiplier into its codes' integer units
// (codecs/sum_code.h): the codes' coordinates and levels, and the grid's span.
struct SkellamGrid {
  uint64_t dim = 0;
  int levels = 0;
  double kappa = 0;
  uint64_t kept = 0;  // coordinates a code keeps (randk); 0: dim
  // An update of norm C is C / step = sqrt(dim) x levels / kappa grid steps long.
  double ClipInSteps() const;
};

// The DP rounds of a FedAvg job; the round loop's thread only.
//
// With skellam(...), the job's rounds are secure aggregation's (secagg_rounds.h): the
// participants are sampled here, each adds Skellam noise to its code so that the sum of
// all of them carries variance SumVariance() (in grid units: z x C over the step,
// squared), and each round that unmasks a sum is composed as the Skellam mechanism with
// the codes' sensitivities after rounding (privacy/skellam.h) and the noise the inputs
// that arrived carried. Two epsilons are kept: "dp_epsilon" with the amplification of
// Poisson sampling (against whoever receives the models), and "dp_epsilon_coordinator"
// without it (against a coordinator, which knows who took part).
class DpRounds {
 public:
  // `fraction` is q; `rounds` the job's (for a target's noise). With committed_round > 0
  // the accountant restarts from <state_dir>/dp-<committed_round>.bin, and its absence is
  // an error. `metrics` (may be null): fedlgc_dp_epsilon. `grid`: skellam's (required
  // with it, ignored otherwise).
  static absl::StatusOr<std::unique_ptr<DpRounds>> Create(const DpOptions& options, double fraction,
                                                          uint64_t rounds,
                                                          const std::string& state_dir,
                                                          uint64_t committed_round,
                                                          monitoring::Metrics* metrics,
                                                          const SkellamGrid& grid = {});

  // The round's participants: each connected client that is not quarantined, with
  // probability q, from a cryptographic keystream with a key from OpenSSL's generator (who
  // takes part must not be predictable). The first round fixes N, the clients it chose from.
  absl::StatusOr<std::vector<std::string>> Sample(coordinator::RoundHost& host);
  // The denominator: q x N, the expected participants (0 before the first round).
  double expected() const;
  // The DP mean of `updates` (a compact one's norm given): each cut to norm C
  // (coordinator::ClipAt), summed with weight one, noised with standard deviation z x C,
  // divided by expected() (at least 1). Report figures "clipped" and "clip_bound"; no
  // client's own norm (it would say more than the noised mean).
  absl::StatusOr<std::vector<float>> NoisedMean(std::span<const coordinator::Contribution> updates,
                                                uint64_t dim, RoundReport* report) const;
  // Composes one round into the accountant (as soon as its noised mean exists) and reports
  // "dp_epsilon", "dp_delta", "dp_noise_multiplier", "dp_sampled", "dp_expected".
  void Spend(size_t sampled, RoundReport* report);
  // Skellam: the noise's variance on each coordinate of a sum of the codes, in grid units.
  double SumVariance() const;
  // Skellam: composes a round whose unmasked sum carried `share` of SumVariance() (its
  // inputs over its participants: the noise of those who dropped is missing), as soon as
  // that sum exists; reports as Spend does, and "dp_epsilon_coordinator",
  // "dp_noise_variance".
  void SpendSkellam(size_t sampled, double share, RoundReport* report);
  // Why the job must end before another round (it would pass the limit), or nullopt.
  std::optional<std::string> Exhausted() const;
  absl::Status Save(uint64_t round) const;

  double noise() const { return noise_; }
  double epsilon() const;

 private:
  DpRounds(const DpOptions& options, double q, double noise, std::string state_dir,
           privacy::Keystream stream, const SkellamGrid& grid);
  // Goes on from the account saved beside the checkpoint of `committed_round`, refusing
  // one that promised another delta, limit or mechanism.
  absl::Status Resume(uint64_t committed_round);
  // Skellam: the RDP at each order of a round of `step`, sampled or not.
  std::function<double(double)> SampledRdp(const privacy::SkellamStep& step) const;
  static std::function<double(double)> UnsampledRdp(const privacy::SkellamStep& step);

  const DpOptions options_;
  const double q_;
  const double noise_;
  const std::string state_dir_;
  const SkellamGrid grid_;
  privacy::RdpAccountant accountant_;
  privacy::RdpAccountant unsampled_;  // skellam: against the coordinator
  privacy::Keystream stream_;  // the sampling's coins
  uint64_t population_ = 0;    // N; 0 until the first round
  prometheus::Gauge* epsilon_gauge_ = nullptr;
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_DP_ROUNDS_H_
