// The flags (and --config keys) of EdgeClientOptions, shared by fedlgc-edge and
// fedlgc-sim, which writes each client's config file from them.
#ifndef FEDLGC_EDGE_CLIENT_FLAGS_H_
#define FEDLGC_EDGE_CLIENT_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "edge_client/options.h"

namespace CLI {
class App;
}

namespace fedlgc::edge_client {

// Registers every option of *o on `app`, bound to it, with its current values as the
// defaults. `o` must outlive parsing.
void AddEdgeClientFlags(CLI::App& app, EdgeClientOptions* o);

// The flags of what a client trains on and with: --data, --data-dir, --label-column,
// --targets, --optimizer, --train-limit, --partition, --device, --torch-threads and
// --dump-updates. fedlgc-edge registers them in its Data group; fedlgc-sim in one of its
// own, bound to the options it starts every client from (it may say more of an option
// in its help: CLI::Option::description). `app` may be an option group.
void AddTrainingFlags(CLI::App& app, EdgeClientOptions* o);

// fedlgc-edge's flags for hosting many clients in one process (client_host.h).
struct HostFlags {
  std::string clients;        // "0-249", "3,7,10-12"; empty: one client, as --id says
  std::string client_config;  // a config file per client, "{i}" its index; empty: none
  int train_slots = 1;
};
void AddHostFlags(CLI::App& app, HostFlags* h);

// The options of the clients `h` hosts, starting from `base` (HostedClientOptions), each
// then read from its config file when h.client_config names one.
absl::StatusOr<std::vector<EdgeClientOptions>> HostedClients(const HostFlags& h,
                                                             const EdgeClientOptions& base);

}  // namespace fedlgc::edge_client

#endif  // FEDLGC_EDGE_CLIENT_FLAGS_H_
