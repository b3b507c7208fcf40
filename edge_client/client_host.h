// Many edge clients in one process (fedlgc-edge --client-ids 0-249): each its own identity
// (certificate), state file, shard, residual and connection, as if it ran alone, and all
// of them sharing the process's libtorch runtime, one copy of each training set, one
// metrics registry and exposer, and a few models that train in turn
// (shared_resources.h). A client that ends with an error ends alone; the others go on.
#ifndef FEDLGC_EDGE_CLIENT_CLIENT_HOST_H_
#define FEDLGC_EDGE_CLIENT_CLIENT_HOST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "edge_client/edge_client.h"
#include "edge_client/shared_resources.h"

namespace fedlgc::edge_client {

// "0-249", "3,7,10-12": the indices, in order, each once; at most 100000 of them.
absl::StatusOr<std::vector<uint32_t>> ParseClientList(std::string_view text);

// `pattern` with every "{i}" replaced by `index`.
std::string WithIndex(std::string_view pattern, uint32_t index);

// Client `index` of a host whose clients start from `base`: "{i}" in its id, certificate,
// key and data replaced by the index, and the index as its shard (a data file of its own,
// one with "{i}", is read whole).
EdgeClientOptions HostedClientOptions(const EdgeClientOptions& base, uint32_t index);

struct ClientHostOptions {
  int train_slots = 1;         // models that may train at once
  std::string metrics_listen;  // one exposer for every client; empty: none
};

// Thread-safety: Stop() may be called from any thread; the rest from one.
class ClientHost {
 public:
  // Makes every client (each as EdgeClient::Create would, with the shared resources).
  // Their ids must differ; each client's own metrics_listen is ignored.
  static absl::StatusOr<std::unique_ptr<ClientHost>> Create(std::vector<EdgeClientOptions> clients,
                                                            const ClientHostOptions& options,
                                                            ClientModeFactory make_mode);
  ~ClientHost();

  // Runs every client on a thread of its own until each has ended. OK when every client
  // ended OK; else the first error, saying how many clients failed (each is logged).
  absl::Status Run();
  void Stop();

  size_t size() const { return clients_.size(); }
  EdgeClient& client(size_t i) { return *clients_[i]; }
  const SharedResources& shared() const { return shared_; }
  int metrics_port() const;

 private:
  ClientHost() = default;

  SharedResources shared_;
  std::vector<std::unique_ptr<EdgeClient>> clients_;
};

}  // namespace fedlgc::edge_client

#endif  // FEDLGC_EDGE_CLIENT_CLIENT_HOST_H_
