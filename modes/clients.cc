// The factory of client modes (see clients.h).
#include "modes/clients.h"

#include "base/str.h"
#include "modes/fedavg/fedavg_client.h"
#include "modes/lgc/lgc_client.h"
#include "modes/lsgd/lsgd_client.h"
#include "modes/sgp/sgp_client.h"
#include "modes/smooth/smooth_client.h"

namespace fedlgc::modes {

absl::StatusOr<std::unique_ptr<edge_client::ClientMode>> MakeClientMode(
    Mode mode, edge_client::ClientEnv& env) {
  switch (mode) {
    case Mode::kFedAvg:
      return std::make_unique<FedAvgClient>(env);
    case Mode::kLgc:
      return std::make_unique<LgcClient>(env);
    case Mode::kLsgd:
      return std::make_unique<LsgdClient>(env);
    case Mode::kSgp:
      return std::make_unique<SgpClient>(env);
    case Mode::kSmooth:
      return std::make_unique<SmoothClient>(env);
  }
  return absl::InvalidArgumentError(StrCat("no client for mode ", ModeName(mode)));
}

}  // namespace fedlgc::modes
