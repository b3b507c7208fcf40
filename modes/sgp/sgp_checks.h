// SGP's end-of-run check (ModeTraits::end_of_run_check): push-sum conserves mass.
#ifndef FEDLGC_MODES_SGP_SGP_CHECKS_H_
#define FEDLGC_MODES_SGP_SGP_CHECKS_H_

#include "coordinator/mode_traits.h"

namespace fedlgc::modes {

// Sums x and w over the clients' state files and the coordinator's mailboxes of a finished
// run and compares them with what the clients brought in (the initial model each, plus
// every local training step); prints a line. Figures "sum_x_norm", "start_norm",
// "steps_norm", "max_gap", "sum_w"; verdict "conserved".
absl::StatusOr<coordinator::RunCheck> CheckSgpMass(const coordinator::FinishedRun& run);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_SGP_SGP_CHECKS_H_
