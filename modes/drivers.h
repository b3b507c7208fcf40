// The coordinator's table of modes: the one place that maps a Mode to its traits
// (catalog.h) and its RoundDriver (a new mode adds one row to drivers.cc;
// docs/adding-a-mode.md).
#ifndef FEDLGC_MODES_DRIVERS_H_
#define FEDLGC_MODES_DRIVERS_H_

#include <memory>

#include "coordinator/options.h"
#include "coordinator/round_driver.h"
#include "modes/catalog.h"
#include "modes/mode_options.h"

namespace fedlgc::modes {

// The driver of `mode` with its options, starting from `env` (its state of
// env.committed_round is loaded when that is > 0).
absl::StatusOr<std::unique_ptr<coordinator::RoundDriver>> MakeRoundDriver(
    Mode mode, const ModeOptions& options, const coordinator::DriverEnv& env);
// MakeRoundDriver of `mode` and a copy of `options`, as Coordinator::Create takes it.
coordinator::DriverFactory RoundDrivers(Mode mode, ModeOptions options);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_DRIVERS_H_
