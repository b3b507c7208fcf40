// The edge client's factory of modes: the one place that maps a Mode to its ClientMode (a
// new mode adds one line here; docs/adding-a-mode.md).
#ifndef FEDLGC_MODES_CLIENTS_H_
#define FEDLGC_MODES_CLIENTS_H_

#include <memory>

#include "edge_client/client_mode.h"

namespace fedlgc::modes {

absl::StatusOr<std::unique_ptr<edge_client::ClientMode>> MakeClientMode(
    Mode mode, edge_client::ClientEnv& env);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_CLIENTS_H_
