// FedAvg clients on a loopback host (tests/coordinator/loopback_host.h) for the driver's
// tests: each a FedAvgClient whose training adds step_scale x FakeClientEnv::Step.
#ifndef FEDLGC_MODES_FEDAVG_FEDAVG_TEST_CLIENTS_H_
#define FEDLGC_MODES_FEDAVG_FEDAVG_TEST_CLIENTS_H_

#include <memory>
#include <string>

#include "modes/fedavg/fedavg_client.h"
#include "tests/coordinator/loopback_host.h"

namespace fedlgc::modes {

inline edge_client::FakeClientEnv& AddFedAvgClient(testing::LoopbackHost& host,
                                                   const codecs::ModelLayout& layout,
                                                   const std::string& id, uint64_t samples,
                                                   float step_scale) {
  testing::LoopbackHost::Client& c =
      host.AddClient(id, samples, layout,
                     [](edge_client::ClientEnv& e) { return std::make_unique<FedAvgClient>(e); });
  c.env->step_scale = step_scale;
  c.env->num_samples = samples;
  return *c.env;
}

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_FEDAVG_TEST_CLIENTS_H_
