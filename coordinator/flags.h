// The flags (and --config keys) of CoordinatorOptions, shared by fedlgc-coordinator and
// fedlgc-sim, which passes them through to the coordinator it starts.
#ifndef FEDLGC_COORDINATOR_FLAGS_H_
#define FEDLGC_COORDINATOR_FLAGS_H_

#include "coordinator/options.h"

namespace CLI {
class App;
}

namespace fedlgc::coordinator {

// Registers every option of *o on `app`, bound to it, with its current values as the
// defaults. `o` must outlive parsing.
void AddCoordinatorFlags(CLI::App& app, CoordinatorOptions* o);
// The job's options alone (model, mode, rounds, quorum, codecs, local training, seeds):
// what fedlgc-sim passes on, setting the service's (addresses, state, TLS) itself.
void AddJobFlags(CLI::App& app, CoordinatorOptions* o);
// The model guard's flags (fedlgc-sim passes them on too).
void AddGuardFlags(CLI::App& app, CoordinatorOptions* o);
// --eval, --eval-every, --eval-fraction, --eval-clients, --eval-timeout and --bn-stats
// with its options (fedlgc-sim passes them on too).
void AddEvaluationFlags(CLI::App& app, CoordinatorOptions* o);
// --export, --export-best and --keep-models (fedlgc-sim passes them on too).
void AddExportFlags(CLI::App& app, CoordinatorOptions* o);

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_FLAGS_H_
