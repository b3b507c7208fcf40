// fedlgc-coordinator --check (core/preflight.h): what a coordinator of these options would
// read and need, checked without writing or listening.
#ifndef FEDLGC_COORDINATOR_PREFLIGHT_H_
#define FEDLGC_COORDINATOR_PREFLIGHT_H_

#include "coordinator/coordinator.h"

namespace fedlgc::coordinator {

// Coordinator::Create's steps that read (the options, the model, the test set, the
// checkpoint, the round protocol and its codecs made for the model, the downlink's codec)
// and what Start would need (the state folder, --export, --tensorboard, the certificates,
// the listen addresses, the parent), one line each on `check`. `endpoints` false leaves out
// the certificates and addresses, for a caller that makes them itself (fedlgc-sim,
// fedlgc-load).
void CheckCoordinator(CoordinatorOptions options, const ModeTraits& traits,
                      const DriverFactory& make_driver, core::Preflight* check,
                      bool endpoints = true);

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_PREFLIGHT_H_
