// fedlgc-coordinator: runs the rounds of one federated training job.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "base/file.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/signals.h"
#include "coordinator/coordinator.h"
#include "coordinator/flags.h"
#include "coordinator/preflight.h"
#include "core/dataset.h"
#include "core/preflight.h"
#include "modes/drivers.h"
#include "tier/tier.h"

namespace {

int Fail(const absl::Status& st) {
  fedlgc::log::Error("fedlgc-coordinator", "%s", st.ToString().c_str());
  return 1;
}

// What the job's options ask of each other beyond CoordinatorOptions::Validate.
absl::Status CheckJob(const fedlgc::coordinator::CoordinatorOptions& o,
                      const fedlgc::modes::ModeOptions& mo) {
  if (auto st = fedlgc::modes::CheckEvaluation(o, mo); !st.ok()) return st;
  if (o.has_parent() && !(mo.fedavg == fedlgc::modes::FedAvgOptions())) {
    // The parent applies its server optimizer once, to the merged update.
    return absl::InvalidArgumentError(
        "--parent: the server learning rate and momentum, the rounds mode, --dp, --secagg "
        "and --algorithm are the parent's; leave them at their defaults here");
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  namespace coord = fedlgc::coordinator;
  coord::CoordinatorOptions o;
  fedlgc::modes::ModeOptions mo;
  std::string port_file;
  bool check = false;
  CLI::App app("Coordinates federated training rounds over gRPC (mTLS).", "fedlgc-coordinator");
  fedlgc::AddCommonFlags(app);
  fedlgc::AddCheckFlag(app, &check);
  app.add_option("--port-file", port_file,
                 "write \"<grpc port> <metrics port>\" here once listening");
  coord::AddCoordinatorFlags(app, &o);
  fedlgc::modes::AddModeFlags(app, &mo);
  if (auto code = fedlgc::ParseFlags(app, argc, argv)) return *code;
  fedlgc::InitProcess();
  auto mode = fedlgc::modes::JobMode(o);
  if (!mode.ok() && !check) return Fail(mode.status());
  // A coordinator with no test data runs as it is: without --test-data and without the
  // default test set (Fashion-MNIST not installed), it holds none and the clients evaluate.
  if (app.count("--test-data") == 0 && o.HasTestData() &&
      absl::IsNotFound(fedlgc::core::LoadDataset(o.test_data_options(), false, 1).status())) {
    fedlgc::log::Warning("fedlgc-coordinator",
                         "no test set: %s is not installed and --test-data is not given; the "
                         "coordinator holds none (as --test-data none) and the clients evaluate "
                         "(--eval auto)",
                         o.test_data);
    o.test_data = "none";
  }
  if (check) {
    fedlgc::core::Preflight p("fedlgc-coordinator");
    absl::Status job = mode.ok() ? CheckJob(o, mo) : mode.status();
    p.Report("job", job, "the mode's options agree");
    if (mode.ok())
      coord::CheckCoordinator(o, **mode, fedlgc::modes::RoundDrivers((*mode)->mode, mo), &p);
    return p.Finish();
  }
  const coord::ModeTraits& traits = **mode;
  if (auto st = CheckJob(o, mo); !st.ok()) return Fail(st);
  auto c = coord::Coordinator::Create(o, traits, fedlgc::modes::RoundDrivers(traits.mode, mo));
  if (!c.ok()) return Fail(c.status());
  std::unique_ptr<fedlgc::tier::Tier> tier;
  // On every way out: the upstream client goes first (it reads the coordinator until it
  // has stopped), and the coordinator forgets it.
  struct Unlink {
    fedlgc::coordinator::Coordinator* c;
    std::unique_ptr<fedlgc::tier::Tier>* tier;
    ~Unlink() {
      if (!*tier) return;
      (*tier)->Stop();
      tier->reset();
      c->SetRoundSource(nullptr);
    }
  } unlink{c->get(), &tier};
  if (o.has_parent()) {
    auto made = fedlgc::tier::Tier::Create(fedlgc::tier::UpstreamOptions(o), c->get(), o.state_dir,
                                           o.min_clients, o.parent_reserve);
    if (!made.ok()) return Fail(made.status());
    tier = *std::move(made);
    (*c)->SetRoundSource(tier.get());
  }
  if (auto st = (*c)->Start(); !st.ok()) return Fail(st);
  if (tier) tier->Start();
  fedlgc::log::Info("fedlgc-coordinator", "%s job, listening on port %d, metrics on %d",
                    std::string(fedlgc::ModeName(traits.mode)).c_str(), (*c)->port(),
                    (*c)->metrics_port());
  if (!port_file.empty()) {
    const std::string ports =
        std::to_string((*c)->port()) + " " + std::to_string((*c)->metrics_port()) + "\n";
    if (auto st = fedlgc::AtomicWriteFile(port_file, ports); !st.ok()) return Fail(st);
  }
  absl::Status st;
  {
    fedlgc::StopOnSignals stop([coordinator = c->get()] { coordinator->Stop(); });
    st = (*c)->Run();
  }
  if (!st.ok()) return Fail(st);
  return 0;
}
