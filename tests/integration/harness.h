// Test harness for whole federations on 127.0.0.1: certificates from
// scripts/gen-certs.sh, a coordinator in-process or as a child process, edge clients as
// threads (optionally behind a fault proxy), free ports read back, hard timeouts.
#ifndef FEDLGC_TESTS_INTEGRATION_HARNESS_H_
#define FEDLGC_TESTS_INTEGRATION_HARNESS_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/coordinator.h"
#include "edge_client/edge_client.h"
#include "modes/mode_options.h"
#include "sim/fault_proxy.h"
#include "sim/process.h"
#include "tier/tier.h"

namespace grpc {
class Channel;
}

namespace fedlgc::testing {

// A fresh folder under the test temp dir.
std::string FreshDir(const std::string& name);

// Certificates for `clients` (ids client-0..), made once per folder.
std::string MakeCerts(const std::string& dir, int clients);
// Client certificates for `ids` in a folder MakeCerts made (an aggregator's at its parent).
void AddCerts(const std::string& certs, const std::vector<std::string>& ids);

// An mTLS channel to a coordinator on 127.0.0.1:`port` with the certificate of `id` from
// `certs` (MakeCerts); `channel_id` > 0 gives a connection of its own. Messages up to
// 64 MiB are received.
std::shared_ptr<grpc::Channel> ClientChannel(const std::string& certs, const std::string& id,
                                             int port, int channel_id = 0);

// A free loopback TCP port, picked at random below the kernel's ephemeral range (so no
// bind(0) or outgoing connection elsewhere takes it meanwhile) and checked by binding it.
// For a coordinator that must come back on the same address after a restart; otherwise
// listen on port 0 and read the port back.
int FreePort();

// Polls `done` every few milliseconds until it holds (true) or `timeout` passes (false).
bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout);
// The gRPC port a coordinator wrote to its --port-file once listening; 0 on timeout.
int WaitForPortFile(const std::string& path, std::chrono::milliseconds timeout);

coordinator::CoordinatorOptions CoordinatorDefaults(const std::string& dir,
                                                    const std::string& certs);
edge_client::EdgeClientOptions ClientDefaults(const std::string& dir, const std::string& certs,
                                              int index, int num_clients, int port);

// Runs an in-process coordinator on its own thread, with the driver of its job's mode
// (modes::MakeRoundDriver); with --parent options, an aggregator with its upstream client
// (tier::Tier), as fedlgc-coordinator runs one.
class InProcessCoordinator {
 public:
  explicit InProcessCoordinator(coordinator::CoordinatorOptions options,
                                modes::ModeOptions modes = {});
  ~InProcessCoordinator();
  int port() const { return c_->port(); }
  coordinator::Coordinator& get() { return *c_; }
  // An aggregator's upstream client; null at a root.
  tier::Tier* tier() { return tier_.get(); }
  // Waits for Run() to return; false on timeout.
  bool Wait(std::chrono::seconds timeout);
  absl::Status result() const { return result_; }

 private:
  std::unique_ptr<coordinator::Coordinator> c_;
  std::unique_ptr<tier::Tier> tier_;
  std::thread thread_;
  std::atomic<bool> finished_{false};
  absl::Status result_;
};

// Runs an edge client on its own thread, with the modes of fedlgc-edge
// (modes::MakeClientMode).
class ClientThread {
 public:
  explicit ClientThread(edge_client::EdgeClientOptions options);
  ~ClientThread();
  bool Wait(std::chrono::seconds timeout);
  absl::Status result() const { return result_; }
  edge_client::EdgeClient& get() { return *client_; }

 private:
  std::unique_ptr<edge_client::EdgeClient> client_;
  std::thread thread_;
  std::atomic<bool> finished_{false};
  absl::Status result_;
};

using sim::ChildProcess;

// Path of a binary built next to this test.
std::string BinPath(const std::string& name);

// The whole file as text; empty when it cannot be read.
std::string ReadText(const std::string& path);

// Runs argv on a terminal of its own (script(1)); what it writes, with the terminal's
// escapes, goes to `log`. Returns its exit status, as ChildProcess::Wait.
int RunOnTerminal(const std::vector<std::string>& argv, const std::string& log,
                  std::chrono::milliseconds timeout);

// fedlgc-coordinator's command line for the job of `o` (model, rounds, quorum, codecs,
// local steps, chunk size, state folder, TLS; an aggregator's --parent flags, evaluation and
// round timeout) on 127.0.0.1:`port`, without metrics: for a coordinator run as a child
// process (to be killed and restarted).
std::vector<std::string> CoordinatorArgv(const coordinator::CoordinatorOptions& o, int port);

// Edge client `i` of `n` as a child process, with the options the in-process clients get
// (ClientDefaults) plus `extra` flags and `env` (NAME=VALUE) in its environment; its log in
// dir/client-<i>.log.
std::unique_ptr<ChildProcess> SpawnEdge(const std::string& dir, const std::string& certs, int i,
                                        int n, int port,
                                        const std::vector<std::string>& extra = {},
                                        const std::vector<std::string>& env = {});

// The coordinator's last checkpoint (empty where there is none: a test failure).
coordinator::EngineState CheckpointState(const std::string& state_dir,
                                         const coordinator::CoordinatorOptions& o);
// Reads the coordinator's final model from its checkpoint.
std::vector<float> CheckpointModel(const std::string& state_dir,
                                   const coordinator::CoordinatorOptions& o);

// GET http://127.0.0.1:port/metrics.
std::string ScrapeMetrics(int port);
// Uplink wire bytes the coordinator has counted from `client`.
double UplinkBytesOf(coordinator::Coordinator& coord, const std::string& client);
// Sum of the samples of `name` in a Prometheus text exposition (all label sets).
double SumMetric(const std::string& text, const std::string& name);

}  // namespace fedlgc::testing

#endif  // FEDLGC_TESTS_INTEGRATION_HARNESS_H_
