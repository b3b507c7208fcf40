// The coordinator's table of modes (see drivers.h).
#include "modes/drivers.h"

#include "base/str.h"
#include "modes/smooth/smooth_driver.h"

namespace fedlgc::modes {
namespace {

using coordinator::DriverEnv;
using coordinator::ModeTraits;
using coordinator::RoundDriver;
using DriverOr = absl::StatusOr<std::unique_ptr<RoundDriver>>;

// Turns a StatusOr<unique_ptr<Derived>> into the factory's type.
template <typename Made>
DriverOr Up(Made made) {
  if (!made.ok()) return made.status();
  return std::unique_ptr<RoundDriver>(*std::move(made));
}

struct DriverRow {
  const ModeTraits& (*traits)();
  DriverOr (*make)(const ModeOptions& o, const DriverEnv& env);
};

// One row per mode.
const DriverRow kDrivers[] = {
    {&FedAvgDriver::Traits,
     [](const ModeOptions& o, const DriverEnv& env) {
       return Up(FedAvgDriver::Create(o.fedavg, env));
     }},
    {&LgcDriver::Traits,
     [](const ModeOptions& o, const DriverEnv& env) {
       return Up(LgcDriver::Create(o.lgc, o.fedavg.optimizer(), env));
     }},
    {&LsgdDriver::Traits,
     [](const ModeOptions& o, const DriverEnv& env) {
       return Up(LsgdDriver::Create(o.lsgd, env.initial_model, env.state_dir, env.committed_round,
                                    env.robust, env.metrics));
     }},
    {&SgpDriver::Traits,
     [](const ModeOptions& o, const DriverEnv& env) {
       return Up(SgpDriver::Create(o.sgp, env.dim, env.state_dir, env.committed_round, env.robust,
                                   env.metrics));
     }},
    {&SmoothDriver::Traits,
     [](const ModeOptions&, const DriverEnv& env) { return Up(SmoothDriver::Create(env)); }},
};

const DriverRow* RowOf(Mode mode) {
  for (const DriverRow& row : kDrivers) {
    if (row.traits().mode == mode) return &row;
  }
  return nullptr;
}

}  // namespace

const ModeTraits& TraitsOf(Mode mode) {
  const DriverRow* row = RowOf(mode);
  // Every Mode of core/protocol.h has a row (modes_test checks it).
  return row != nullptr ? row->traits() : FedAvgDriver::Traits();
}

absl::StatusOr<const ModeTraits*> JobMode(std::string_view mode_flag, std::string_view codec) {
  const std::optional<Mode> named = ParseMode(mode_flag);
  if (!named || RowOf(*named) == nullptr) {
    std::string names;
    for (const ModeInfo& m : kModes) StrAppend(&names, names.empty() ? "" : ", ", m.name);
    return absl::InvalidArgumentError(StrCat("--mode must be one of ", names, ", not ", mode_flag));
  }
  for (const DriverRow& row : kDrivers) {
    const ModeTraits& t = row.traits();
    if (t.claims_codec == nullptr || !t.claims_codec(codec)) continue;
    if (*named != t.mode && *named != Mode::kFedAvg) {
      return absl::InvalidArgumentError(
          StrCat(codec, " runs with --mode ", ModeName(t.mode), ", not ", mode_flag));
    }
    return &t;
  }
  const ModeTraits& t = TraitsOf(*named);
  if (t.claims_codec != nullptr) {
    return absl::InvalidArgumentError(StrCat("--mode ", mode_flag, " runs with its own codec (",
                                             mode_flag, "(...)), not ", codec));
  }
  return &t;
}

absl::StatusOr<const ModeTraits*> JobMode(const coordinator::CoordinatorOptions& o) {
  return JobMode(o.mode, o.plan.codec);
}

absl::Status ValidateJob(const coordinator::CoordinatorOptions& o) {
  auto traits = JobMode(o);
  if (!traits.ok()) return traits.status();
  return o.Validate(**traits);
}

DriverOr MakeRoundDriver(Mode mode, const ModeOptions& o, const DriverEnv& env) {
  if (absl::Status st = o.Validate(mode); !st.ok()) return st;
  const DriverRow* row = RowOf(mode);
  if (row == nullptr) {
    return absl::InvalidArgumentError(StrCat("no driver for mode ", ModeName(mode)));
  }
  return row->make(o, env);
}

coordinator::DriverFactory RoundDrivers(Mode mode, ModeOptions options) {
  return [mode, options = std::move(options)](const DriverEnv& env) {
    return MakeRoundDriver(mode, options, env);
  };
}

}  // namespace fedlgc::modes
