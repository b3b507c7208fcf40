// The round protocols of a FedAvg client (see client_protocol.h): a new one is a file of
// its own and a line here (docs/adding-a-protocol.md).
#include "modes/fedavg/client_protocol.h"
#include "modes/fedavg/powersgd_client.h"
#include "modes/fedavg/scaffold_client.h"
#include "modes/fedavg/secagg_client.h"
#include "modes/fedavg/shared_scale_client.h"

namespace fedlgc::modes {

std::vector<std::unique_ptr<ClientProtocol>> MakeClientProtocols(FedAvgClientCore& core) {
  const auto residual_changed = [&core] { core.ResidualChanged(); };
  std::vector<std::unique_ptr<ClientProtocol>> out;
  out.push_back(std::make_unique<PowerSgdClient>(core.env(), residual_changed));
  out.push_back(std::make_unique<SecAggClientRounds>(core.env(), residual_changed));
  out.push_back(std::make_unique<SharedScaleClient>(core));
  out.push_back(std::make_unique<ScaffoldClient>(core));
  return out;
}

}  // namespace fedlgc::modes
