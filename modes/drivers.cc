// The factory of mode drivers (see drivers.h).
#include "modes/drivers.h"

#include "codecs/str.h"

namespace fedlgc::modes {

using coordinator::DriverEnv;
using coordinator::RoundDriver;
using DriverOr = absl::StatusOr<std::unique_ptr<RoundDriver>>;

DriverOr MakeRoundDriver(Mode mode, const ModeOptions& o, const DriverEnv& env) {
  if (absl::Status st = o.Validate(mode); !st.ok()) return st;
  // Turns a StatusOr<unique_ptr<Derived>> into the factory's type.
  const auto up = [](auto made) -> DriverOr {
    if (!made.ok()) return made.status();
    return std::unique_ptr<RoundDriver>(*std::move(made));
  };
  switch (mode) {
    case Mode::kFedAvg:
      return up(FedAvgDriver::Create(o.fedavg, env));
    case Mode::kLgc:
      return up(LgcDriver::Create(o.lgc, o.fedavg.optimizer(), env));
    case Mode::kLsgd:
      return up(LsgdDriver::Create(o.lsgd, env.initial_model, env.state_dir, env.committed_round,
                                   env.robust));
    case Mode::kSgp:
      return up(SgpDriver::Create(o.sgp, env.dim, env.state_dir, env.committed_round, env.robust));
  }
  return absl::InvalidArgumentError(StrCat("no driver for mode ", ModeName(mode)));
}

}  // namespace fedlgc::modes
