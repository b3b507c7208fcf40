// DP-FedAvg's rounds (see dp_rounds.h).
#include "modes/fedavg/dp_rounds.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "base/log.h"
#include "base/spec.h"
#include "base/str.h"
#include "modes/fedavg/fedavg_state.h"
#include "monitoring/metrics.h"
#include "privacy/gaussian_noise.h"

namespace fedlgc::modes {

double DpOptions::Limit() const {
  if (max_epsilon > 0) return max_epsilon;
  if (epsilon > 0) return epsilon;
  return std::numeric_limits<double>::infinity();
}

namespace {

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError(
      StrCat("--dp: ", what,
             " (gaussian(noise=Z, clip=C) or skellam(noise=Z, clip=C), or either without noise= "
             "and with --dp-epsilon E; "
             "--dp-delta in (0, 1), --dp-max-epsilon >= 0)"));
}

}  // namespace

absl::StatusOr<std::optional<DpOptions>> ParseDp(const std::string& spec, double epsilon,
                                                 double delta, double max_epsilon) {
  if (spec.empty() || spec == "none") {
    if (epsilon > 0 || max_epsilon > 0) {
      return Bad("--dp-epsilon and --dp-max-epsilon need --dp gaussian(...)");
    }
    return std::nullopt;
  }
  auto node = ParseSpec(spec);
  if (!node.ok()) return Bad(std::string(node.status().message()));
  if (node->name != "gaussian" && node->name != "skellam") {
    return Bad(StrCat("unknown mechanism ", node->name));
  }
  DpOptions o;
  o.mechanism = node->name == "skellam" ? DpMechanism::kSkellam : DpMechanism::kGaussian;
  o.epsilon = epsilon;
  o.delta = delta;
  o.max_epsilon = max_epsilon;
  std::set<std::string> seen;
  for (const SpecArg& a : node->args) {
    if (a.key.empty() || !a.is_number) return Bad(StrCat(node->name, "(...) takes named numbers"));
    if (!seen.insert(a.key).second) return Bad(StrCat(a.key, "= given twice"));
    if (a.key == "noise") {
      o.noise = a.number;
    } else if (a.key == "clip") {
      o.clip = a.number;
    } else {
      return Bad(StrCat(node->name, "(...) has no argument ", a.key));
    }
  }
  if (!(o.clip > 0) || !std::isfinite(o.clip)) return Bad("clip= must be a number > 0");
  if (seen.count("noise") && (!(o.noise > 0) || !std::isfinite(o.noise))) {
    return Bad("noise= must be a number > 0");
  }
  if ((o.noise > 0) == (o.epsilon > 0)) {
    return Bad("give the noise multiplier (noise=) or a target (--dp-epsilon), one of them");
  }
  if (!(delta > 0 && delta < 1)) return Bad(StrCat("--dp-delta ", delta));
  if (!(max_epsilon >= 0) || !std::isfinite(max_epsilon) || !(epsilon >= 0) ||
      !std::isfinite(epsilon)) {
    return Bad("--dp-epsilon and --dp-max-epsilon must be >= 0");
  }
  return std::optional<DpOptions>(o);
}

double SkellamGrid::ClipInSteps() const {
  return std::sqrt(static_cast<double>(dim)) * levels / kappa;
}

DpRounds::DpRounds(const DpOptions& options, double q, double noise, std::string state_dir,
                   privacy::Keystream stream, const SkellamGrid& grid)
    : options_(options),
      q_(q),
      noise_(noise),
      state_dir_(std::move(state_dir)),
      grid_(grid),
      stream_(std::move(stream)) {}

std::function<double(double)> DpRounds::SampledRdp(const privacy::SkellamStep& step) const {
  const double q = q_;
  return [step, q](double order) { return privacy::SampledSkellamRdp(step, q, order); };
}

std::function<double(double)> DpRounds::UnsampledRdp(const privacy::SkellamStep& step) {
  return [step](double order) { return step.Rdp(std::ceil(order)); };
}

namespace {

// Skellam: one round whose sum carried `share` of the noise of multiplier `noise`.
privacy::SkellamStep StepOf(const SkellamGrid& grid, double noise, double share) {
  // A code's words are the kept coordinates: rounding grows its norm by sqrt(kept).
  privacy::SkellamStep step =
      privacy::RoundedSensitivity(grid.ClipInSteps(), grid.kept > 0 ? grid.kept : grid.dim);
  const double sd = noise * grid.ClipInSteps();
  step.variance = sd * sd * share;
  return step;
}

// Skellam: the smallest noise multiplier (to 0.1%) whose `rounds` rounds spend at most
// the target with the sampling's amplification.
absl::StatusOr<double> SkellamNoiseFor(const DpOptions& o, const SkellamGrid& grid, double q,
                                       uint64_t rounds) {
  const auto spent = [&](double z) {
    privacy::RdpAccountant a;
    const privacy::SkellamStep step = StepOf(grid, z, 1);
    a.ComposeRdp([&](double order) { return privacy::SampledSkellamRdp(step, q, order); }, rounds);
    return a.Spent(o.delta).epsilon;
  };
  double lo = 1e-3, hi = 1e4;
  if (spent(hi) > o.epsilon) {
    return absl::InvalidArgumentError(StrCat("--dp: no Skellam noise up to a multiplier of ", hi,
                                             " keeps ", rounds, " rounds within epsilon ",
                                             o.epsilon));
  }
  while (hi / lo > 1.001) {
    const double mid = std::sqrt(lo * hi);
    (spent(mid) > o.epsilon ? lo : hi) = mid;
  }
  return hi;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DpRounds>> DpRounds::Create(const DpOptions& options,
                                                           double fraction, uint64_t rounds,
                                                           const std::string& state_dir,
                                                           uint64_t committed_round,
                                                           monitoring::Metrics* metrics,
                                                           const SkellamGrid& grid) {
  const bool skellam = options.mechanism == DpMechanism::kSkellam;
  if (skellam && (grid.dim == 0 || grid.levels < 1 || !(grid.kappa > 0))) {
    return absl::InvalidArgumentError("--dp skellam(...) needs secure aggregation's grid");
  }
  if (!(fraction > 0 && fraction <= 1)) {
    return absl::InvalidArgumentError(
        StrCat("--dp: --fraction ", fraction, " is the sampling rate: it must be in (0, 1]"));
  }
  double noise = options.noise;
  if (noise == 0) {
    auto solved = skellam ? SkellamNoiseFor(options, grid, fraction, std::max<uint64_t>(rounds, 1))
                          : privacy::NoiseForEpsilon(fraction, std::max<uint64_t>(rounds, 1),
                                                     options.epsilon, options.delta);
    if (!solved.ok()) return solved.status();
    noise = *solved;
  }
  privacy::Key32 key{};
  if (RAND_bytes(key.data(), static_cast<int>(key.size())) != 1) {
    return absl::InternalError("OpenSSL: RAND_bytes failed");
  }
  auto stream = privacy::Keystream::Create(key);
  if (!stream.ok()) return stream.status();
  std::unique_ptr<DpRounds> d(
      new DpRounds(options, fraction, noise, state_dir, *std::move(stream), grid));
  if (committed_round > 0) {
    if (absl::Status st = d->Resume(committed_round); !st.ok()) return st;
  }
  log::Info("coordinator",
            "--dp: %s noise multiplier %g%s, clip %g, sampling rate %g; epsilon so far %g at "
            "delta %g, limit %g",
            skellam ? "distributed Skellam" : "Gaussian", noise,
            options.noise == 0
                ? StrCat(" (for epsilon ", options.epsilon, " over ", rounds, " rounds)")
                : std::string(),
            options.clip, fraction, d->epsilon(), options.delta, options.Limit());
  if (std::isinf(options.Limit())) {
    log::Warning("coordinator",
                 "--dp with no --dp-max-epsilon: the job's privacy loss has no bound but "
                 "--rounds");
  }
  if (metrics != nullptr) {
    d->epsilon_gauge_ = &metrics
                             ->GaugeFamily("fedlgc_dp_epsilon",
                                           "differential privacy: the epsilon the job's rounds "
                                           "have spent at --dp-delta")
                             .Add({});
    d->epsilon_gauge_->Set(d->epsilon());
  }
  return d;
}

absl::Status DpRounds::Resume(uint64_t committed_round) {
  auto account = LoadDpAccount(state_dir_, committed_round);
  if (!account.ok()) {
    return absl::FailedPreconditionError(
        StrCat("--dp: the checkpoint of round ", committed_round,
               " has no privacy account a DP job can go on from: ", account.status().message()));
  }
  if (account->orders != accountant_.orders()) {
    return absl::DataLossError(StrCat(DpAccountPath(state_dir_, committed_round),
                                      ": its orders are not the accountant's"));
  }
  // What the job promised when it started holds to its end.
  if (account->delta != options_.delta || account->limit != options_.Limit()) {
    return absl::FailedPreconditionError(StrCat(
        "--dp: this job started with delta ", account->delta, " and limit ", account->limit,
        "; it goes on with those, not delta ", options_.delta, " and limit ", options_.Limit()));
  }
  const bool skellam = options_.mechanism == DpMechanism::kSkellam;
  const std::string mechanism = skellam ? "skellam" : "gaussian";
  if (account->mechanism != mechanism) {
    return absl::FailedPreconditionError(StrCat("--dp: this job started with ", account->mechanism,
                                                " noise; it goes on with it, not ", mechanism));
  }
  if (absl::Status st = accountant_.Restore(account->rdp); !st.ok()) return st;
  if (skellam) {
    if (absl::Status st = unsampled_.Restore(account->rdp_unsampled); !st.ok()) return st;
  }
  population_ = account->population;
  return absl::OkStatus();
}

double DpRounds::epsilon() const { return accountant_.Spent(options_.delta).epsilon; }

absl::StatusOr<std::vector<std::string>> DpRounds::Sample(coordinator::RoundHost& host) {
  std::vector<std::string> pool = host.Connected();
  std::erase_if(pool, [&](const std::string& c) { return host.engine().roster().IsQuarantined(c); });
  std::sort(pool.begin(), pool.end());
  if (population_ == 0) {
    population_ = pool.size();
    if (population_ > 0 && options_.delta > 1.0 / static_cast<double>(population_)) {
      log::Warning("coordinator",
                   "--dp-delta %g is above 1 / the %llu clients: a guarantee that may fail "
                   "for one of them in full",
                   options_.delta, static_cast<unsigned long long>(population_));
    }
  }
  // A coin per client: a 53-bit uniform from the keystream, below q.
  std::vector<uint64_t> coins(pool.size());
  if (absl::Status st = stream_.Next(coins); !st.ok()) return st;
  std::vector<std::string> out;
  for (size_t i = 0; i < pool.size(); ++i) {
    if (static_cast<double>(coins[i] >> 11) * 0x1p-53 < q_) out.push_back(pool[i]);
  }
  return out;
}

double DpRounds::expected() const { return q_ * static_cast<double>(population_); }

absl::StatusOr<std::vector<float>> DpRounds::NoisedMean(
    std::span<const coordinator::Contribution> updates, uint64_t dim, RoundReport* report) const {
  const coordinator::Clipping clipping = coordinator::ClipAt(updates, options_.clip);
  std::vector<double> sum(dim, 0.0);
  std::vector<float> dense(dim);
  for (const coordinator::Contribution& c : updates) {
    std::span<const float> v = c.values;
    if (c.fill) {
      if (absl::Status st = c.fill(dense); !st.ok()) return st;
      v = dense;
    }
    const double factor = clipping.factors.at(c.client);
    for (size_t i = 0; i < v.size(); ++i) sum[i] += factor * v[i];
  }
  std::vector<float> mean(sum.begin(), sum.end());
  if (absl::Status st = privacy::AddGaussianNoise(noise_ * options_.clip, mean); !st.ok())
    return st;
  const float inv = static_cast<float>(1 / std::max(1.0, expected()));
  for (float& x : mean) x *= inv;
  report->figures["clip_bound"] = options_.clip;
  report->figures["clipped"] = clipping.clipped;
  return mean;
}

double DpRounds::SumVariance() const { return StepOf(grid_, noise_, 1).variance; }

void DpRounds::SpendSkellam(size_t sampled, double share, RoundReport* report) {
  const privacy::SkellamStep step = StepOf(grid_, noise_, share);
  accountant_.ComposeRdp(SampledRdp(step));
  unsampled_.ComposeRdp(UnsampledRdp(step));
  const double eps = epsilon();
  report->figures["dp_epsilon"] = eps;
  report->figures["dp_epsilon_coordinator"] = unsampled_.Spent(options_.delta).epsilon;
  report->figures["dp_delta"] = options_.delta;
  report->figures["dp_noise_multiplier"] = noise_;
  report->figures["dp_noise_variance"] = step.variance;
  report->figures["dp_sampled"] = static_cast<double>(sampled);
  report->figures["dp_expected"] = expected();
  if (epsilon_gauge_ != nullptr) epsilon_gauge_->Set(eps);
}

void DpRounds::Spend(size_t sampled, RoundReport* report) {
  accountant_.Compose(q_, noise_);
  const double eps = epsilon();
  report->figures["dp_epsilon"] = eps;
  report->figures["dp_delta"] = options_.delta;
  report->figures["dp_noise_multiplier"] = noise_;
  report->figures["dp_sampled"] = static_cast<double>(sampled);
  report->figures["dp_expected"] = expected();
  if (epsilon_gauge_ != nullptr) epsilon_gauge_->Set(eps);
}

std::optional<std::string> DpRounds::Exhausted() const {
  const double next =
      options_.mechanism == DpMechanism::kSkellam
          ? accountant_.SpentAfterRdp(SampledRdp(StepOf(grid_, noise_, 1)), 1, options_.delta).epsilon
          : accountant_.SpentAfter(q_, noise_, 1, options_.delta).epsilon;
  if (next <= options_.Limit()) return std::nullopt;
  return StrCat("the privacy budget is spent: another round would make epsilon ", next, " (now ",
                epsilon(), ") at delta ", options_.delta, ", past ", options_.Limit());
}

absl::Status DpRounds::Save(uint64_t round) const {
  const bool skellam = options_.mechanism == DpMechanism::kSkellam;
  return SaveDpAccount(state_dir_, round,
                       {accountant_.orders(), accountant_.rdp(), options_.delta, options_.Limit(),
                        population_, skellam ? "skellam" : "gaussian",
                        skellam ? unsampled_.rdp() : std::vector<double>()});
}

}  // namespace fedlgc::modes
