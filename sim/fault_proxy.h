// A TCP fault proxy for loopback experiments and tests: it accepts on 127.0.0.1:0 and
// forwards each connection to a target, adding one-way delay and jitter, a bandwidth cap,
// and connection cuts (after N bytes, or with a probability per MiB sent). The kernel
// here has no netem, so this is how fedlgc emulates a slow, lossy edge link.
//
// Link spec: comma-separated key=value, e.g. "delay=50ms,jitter=10ms,rate=10mbit,cut=0.05"
//   delay, jitter   ms or s           added to every byte, each direction
//   rate            kbit, mbit, gbit  cap per direction
//   cut             probability that a connection is cut per MiB it carries
//   cut_after       bytes (k, m suffixes, both directions counted) after which a connection
//                   is cut; only the first connection to reach it is cut
//   join            the link is down until this long after the proxy starts
//   offline         share of the time after that the link is down (0 to 0.95), in
//   offline_mean    stretches of this mean length (60s by default)
// While the link is down the proxy cuts its connections and refuses new ones at once.
// A population's links, drawn per client from distributions or a trace: link_profile.h.
#ifndef FEDLGC_SIM_FAULT_PROXY_H_
#define FEDLGC_SIM_FAULT_PROXY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::sim {

struct LinkSpec {
  double delay_s = 0;
  double jitter_s = 0;
  double rate_bytes_per_s = 0;  // 0: unlimited
  double cut_per_mib = 0;
  uint64_t cut_after_bytes = 0;  // 0: never; cuts the first connection that carries this many bytes
  // When the link is up (link_profile.h LinkSchedule).
  double join_s = 0;
  double offline_share = 0;
  double offline_mean_s = 60;
  std::vector<std::pair<double, double>> down;  // [from, to) seconds after the start

  static absl::StatusOr<LinkSpec> Parse(const std::string& text);
  bool trivial() const;
};

// Thread-safe. Threads stop and sockets close in the destructor.
class FaultProxy {
 public:
  static absl::StatusOr<std::unique_ptr<FaultProxy>> Start(const std::string& target_host,
                                                           int target_port, LinkSpec spec,
                                                           uint64_t seed);
  ~FaultProxy();
  int port() const { return port_; }
  uint64_t cuts() const { return cuts_; }
  uint64_t connections() const { return connections_; }
  // Bytes delivered from the target to the proxy's clients so far.
  uint64_t bytes_to_clients() const { return bytes_to_clients_; }
  // Connections cut, and connections refused, because the link was down.
  uint64_t offline_cuts() const { return offline_cuts_; }
  uint64_t offline_refused() const { return offline_refused_; }
  // The link's rate caps from now on (bytes per second; 0: none), from the client up and
  // to it: a link that drops or recovers mid-run.
  void SetRates(double up_bytes_per_s, double down_bytes_per_s) {
    up_rate_.store(up_bytes_per_s);
    down_rate_.store(down_bytes_per_s);
  }

 private:
  FaultProxy(std::string host, int target_port, LinkSpec spec, uint64_t seed);
  struct Connection;
  struct Pipe;
  void AcceptLoop();
  void Serve(int client_fd);
  // Reads one direction of a connection into a pipe, delaying and cutting as the spec
  // says; Release writes the pipe out at the release times and that direction's rate cap.
  void Pump(Connection* c, int src, int dst, uint64_t stream_seed,
            const std::atomic<double>* rate_cap);
  void Release(Connection* c, int dst, Pipe* pipe, const std::atomic<double>* rate_cap);

  const std::string host_;
  const int target_port_;
  const LinkSpec spec_;
  const uint64_t seed_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> cut_after_used_{false};
  std::atomic<uint64_t> cuts_{0}, connections_{0}, bytes_to_clients_{0};
  std::atomic<uint64_t> offline_cuts_{0}, offline_refused_{0};
  std::atomic<double> up_rate_, down_rate_;  // start as spec_'s (SetRates)
  std::vector<Connection*> live_;  // guarded by mu_: connections being served
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> workers_;
  std::vector<int> fds_;
};

}  // namespace fedlgc::sim

#endif  // FEDLGC_SIM_FAULT_PROXY_H_
