// The options of every mode, as flags and --config keys of fedlgc-coordinator (and of
// fedlgc-sim, which passes them on). A mode's options are read only by its driver.
#ifndef FEDLGC_MODES_MODE_OPTIONS_H_
#define FEDLGC_MODES_MODE_OPTIONS_H_

#include "coordinator/options.h"
#include "coordinator/round_engine.h"
#include "core/protocol.h"
#include "modes/fedavg/fedavg_driver.h"
#include "modes/lgc/lgc_driver.h"
#include "modes/lsgd/lsgd_driver.h"
#include "modes/sgp/sgp_driver.h"

namespace CLI {
class App;
}

namespace fedlgc::modes {

struct ModeOptions {
  FedAvgOptions fedavg;  // also LGC's server optimizer
  LgcOptions lgc;
  LsgdOptions lsgd;
  SgpOptions sgp;

  // The options of `mode` are valid, and no other mode's were changed from their
  // defaults (a flag that would do nothing in this job is an error).
  absl::Status Validate(Mode mode) const;
};

// Federated evaluation (--eval clients|both) sends each asked client's loss and label
// counts to the coordinator in the clear, and --bn-stats on each one's per-channel means
// and variances: refused beside --dp and --secagg, whose point is that the coordinator
// learns no one client's own figures; --bn-stats on is refused beside buffered rounds too,
// which commit while clients train.
absl::Status CheckEvaluation(const coordinator::CoordinatorOptions& co, const ModeOptions& mo);

// Registers the options of every mode on `app`, one group per mode, bound to *o with its
// current values as defaults.
void AddModeFlags(CLI::App& app, ModeOptions* o);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_MODE_OPTIONS_H_
