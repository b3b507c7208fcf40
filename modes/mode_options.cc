// Mode options and their flags (see mode_options.h).
#include "modes/mode_options.h"

#include <CLI/CLI.hpp>

#include "base/flags.h"
#include "base/str.h"
#include "modes/catalog.h"

namespace fedlgc::modes {
namespace {

void AddFedAvgFlags(CLI::App& app, FedAvgOptions* o) {
  CLI::Option_group* g = app.add_option_group("FedAvg and LGC", "the server optimizer");
  g->add_option("--server-lr", o->server_lr, "server learning rate (1 = FedAvg)");
  g->add_option("--server-momentum", o->server_momentum, "server momentum");
  g->add_option(
      "--rounds-mode", o->rounds_mode,
      "FedAvg: sync (each round waits for its participants) or "
      "buffered(k=K,concurrency=C,staleness=poly(A),max_staleness=M,refill=arrival|commit): "
      "C clients train at once and every K updates that arrive commit a version, each "
      "scaled by (1+versions behind)^-A; refill=commit asks the next clients only as "
      "a commit takes updates (k=C: every update fresh)");
  g->add_option("--dp", o->dp,
                "user-level differential privacy (FedAvg): gaussian(noise=Z,clip=C), or "
                "gaussian(clip=C) with --dp-epsilon; each client is asked with probability "
                "--fraction, each update cut to norm C, noise of sd Z x C on the sum; "
                "skellam(...) with --secagg: the clients add the noise to their masked codes");
  g->add_option("--dp-epsilon", o->dp_epsilon,
                "--dp's target: the noise that spends this epsilon over --rounds")
      ->check(CLI::NonNegativeNumber);
  g->add_option("--dp-delta", o->dp_delta, "--dp's delta");
  g->add_option("--dp-max-epsilon", o->dp_max_epsilon,
                "--dp: end the job before a round that would spend more (0: the target)")
      ->check(CLI::NonNegativeNumber);
  g->add_option("--algorithm", o->algorithm,
                "FedAvg's local objective: fedavg (the clients' own loss), fedprox(mu=M) "
                "(Li et al. 2020: each client adds (M/2)||w - w_round||^2, which holds it near "
                "the round's model on skewed data; mu 0.01 by default) or scaffold "
                "(Karimireddy et al. 2020: control variates correct each local step by the "
                "server's estimate of the global gradient less the client's; each update "
                "carries the client's control variate change as well); docs/algorithms.md");
  g->add_option("--secagg", o->secagg,
                "secure aggregation (FedAvg): secagg(clip=C,neighbours=K,threshold=F,kappa=A,"
                "margin=M,masks=1): each client cuts its update to norm C, codes it on a grid the "
                "round shares (--codec qsgd(bits=B) or terngrad) and masks it so that the "
                "coordinator learns only the sum (docs/privacy.md)");
}

void AddLgcFlags(CLI::App& app, LgcOptions* o) {
  CLI::Option_group* g = app.add_option_group("LGC", "learned gradient compression jobs");
  g->add_option("--lgc-leader", o->leader, "the leader client (default: the best measured link)");
  g->add_option("--ae-device", o->ae_device,
                "where the autoencoder trains: cpu, cuda, cuda:N or auto");
  g->add_option("--ae-nice", o->ae_nice,
                "the nice value (0-19) of the thread that trains the autoencoder beside the "
                "rounds: 10 leaves the round loop, the RPCs and the evaluation first call on "
                "the CPU");
}

void AddLsgdFlags(CLI::App& app, LsgdOptions* o) {
  CLI::Option_group* g = app.add_option_group("LSGD", "leader-based SGD");
  g->add_option("--lsgd-pull", o->pull, "pull strength c towards the group leader");
  g->add_option("--lsgd-global-pull", o->global_pull, "pull strength towards the global leader");
  g->add_option("--lsgd-period", o->period,
                "local steps between group pulls (one round with groups)");
  g->add_option("--lsgd-global-period", o->global_period,
                "local steps between global pulls (one round with a single group)");
  g->add_option_function<std::string>(
       "--lsgd-groups",
       [o](const std::string& spec) {
         auto groups = ParseLsgdGroups(spec);
         if (!groups.ok()) throw CLI::ValidationError(std::string(groups.status().message()));
         o->groups = *std::move(groups);
       },
       "groups of client ids, e.g. 'a,b;c,d'")
      ->default_str(FormatLsgdGroups(o->groups));
  g->add_option("--lsgd-group-size", o->group_size,
                "form groups of this size from measured round trips (0: one group)");
}

void AddSgpFlags(CLI::App& app, SgpOptions* o) {
  CLI::Option_group* g = app.add_option_group("SGP", "stochastic gradient push");
  fedlgc::AddBoolFlag(*g, "--sgp-reference", &o->reference,
                      "code shares relative to the round's network mean (else the whole share)");
  fedlgc::AddBoolFlag(*g, "--sgp-overlap", &o->overlap,
                      "a client trains its next period while its share travels (gossip one "
                      "round behind); --no-sgp-overlap waits");
}

}  // namespace

namespace {

// A mode's options changed from their defaults in a job of another mode: a flag that would
// do nothing, refused.
absl::Status Unused(bool changed, std::string_view flags, std::string_view modes, Mode mode) {
  if (!changed) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("a job of --mode ", ModeName(mode), " does not use ",
                                           flags, " (--mode ", modes, " only)"));
}

}  // namespace

absl::Status CheckEvaluation(const coordinator::CoordinatorOptions& co, const ModeOptions& mo) {
  const auto on = [](const std::string& s) { return !s.empty() && s != "none"; };
  if (co.bn_stats == "on" && (on(mo.fedavg.dp) || on(mo.fedavg.secagg))) {
    return absl::InvalidArgumentError(StrCat(
        "--bn-stats on with ", on(mo.fedavg.dp) ? "--dp" : "--secagg",
        ": each client's statistics (its data's per-channel means and variances) would reach "
        "the coordinator in the clear, outside what ",
        on(mo.fedavg.dp) ? "--dp accounts for" : "--secagg hides"));
  }
  if (co.bn_stats == "on" && mo.fedavg.rounds_mode != "sync") {
    return absl::InvalidArgumentError(
        "--bn-stats on with --rounds-mode: buffered rounds commit while clients train, and "
        "the statistics phase runs between rounds");
  }
  if (!co.EvalOnClients() || co.eval_every == 0) return absl::OkStatus();
  if (on(mo.fedavg.dp) || on(mo.fedavg.secagg)) {
    return absl::InvalidArgumentError(StrCat(
        "--eval ", co.eval, co.eval == "auto" ? " (clients: no --test-data)" : "", " with ",
        on(mo.fedavg.dp) ? "--dp" : "--secagg",
        ": the clients' evaluations (each one's loss and label counts) would reach the "
        "coordinator in the clear; evaluate on the server (--eval server --test-data ...)"));
  }
  return absl::OkStatus();
}

absl::Status ModeOptions::Validate(Mode mode) const {
  const bool summed = TraitsOf(mode).summed;
  const ModeOptions defaults;
  for (const absl::Status& st : {
           Unused(mode != Mode::kFedAvg && fedavg.rounds_mode != defaults.fedavg.rounds_mode,
                  "--rounds-mode", "fedavg", mode),
           Unused(mode != Mode::kFedAvg &&
                      (fedavg.dp != defaults.fedavg.dp || fedavg.dp_epsilon != 0 ||
                       fedavg.dp_delta != defaults.fedavg.dp_delta || fedavg.dp_max_epsilon != 0),
                  "the --dp flags", "fedavg", mode),
           Unused(mode != Mode::kFedAvg && fedavg.secagg != defaults.fedavg.secagg, "--secagg",
                  "fedavg", mode),
           Unused(mode != Mode::kFedAvg && fedavg.algorithm != defaults.fedavg.algorithm,
                  "--algorithm", "fedavg", mode),
           Unused(!summed && !(fedavg == defaults.fedavg), "--server-lr and --server-momentum",
                  "fedavg and lgc", mode),
           Unused(mode != Mode::kLgc && !(lgc == defaults.lgc), "--lgc-leader, --ae-device and --ae-nice",
                  "lgc", mode),
           Unused(mode != Mode::kLsgd && !(lsgd == defaults.lsgd), "the --lsgd-* flags", "lsgd",
                  mode),
           Unused(mode != Mode::kSgp && !(sgp == defaults.sgp), "the --sgp-* flags", "sgp", mode),
       }) {
    if (!st.ok()) return st;
  }
  if (summed) {
    if (absl::Status st = fedavg.Validate(); !st.ok()) return st;
  }
  if (mode == Mode::kLgc) return lgc.Validate();
  if (mode == Mode::kLsgd) return lsgd.Validate();
  if (mode == Mode::kSgp) return sgp.Validate();
  return absl::OkStatus();
}

void AddModeFlags(CLI::App& app, ModeOptions* o) {
  AddFedAvgFlags(app, &o->fedavg);
  AddLgcFlags(app, &o->lgc);
  AddLsgdFlags(app, &o->lsgd);
  AddSgpFlags(app, &o->sgp);
}

}  // namespace fedlgc::modes
