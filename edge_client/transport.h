// The edge client's link to its coordinator: the channel (mTLS by default) and the stubs
// on it, reconnects with exponential backoff and jitter, the event stream, resumable
// downloads (by byte offset, checked by CRC32C) and uploads (only the chunks the
// coordinator does not hold are sent again), and progress reports. Every call goes
// through protos::Coordinator::StubInterface, so tests give it a gMock stub
// (MockCoordinatorStub) through the StubFactory. Knows nothing of modes.
#ifndef FEDLGC_EDGE_CLIENT_TRANSPORT_H_
#define FEDLGC_EDGE_CLIENT_TRANSPORT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/clock.h"
#include "edge_client/client_state.h"
#include "protos/fedlgc.grpc.pb.h"

namespace fedlgc::monitoring {
class Metrics;
}

namespace fedlgc::edge_client {

using SystemTime = std::chrono::system_clock::time_point;

struct TransportOptions {
  // host:port of the coordinator, or several separated by commas: the transport fails over
  // to the next one (round robin) whenever the one it uses is unreachable.
  std::string server = "127.0.0.1:50051";
  std::string client_id = "client-0";
  std::string tls_ca, tls_cert, tls_key;
  std::string tls_server_name = "localhost";  // name in the coordinator's certificate
  bool insecure = false;
  uint32_t max_message_bytes = 4 << 20;
  double backoff_initial_s = 0.2;
  double backoff_max_s = 5.0;
  double call_timeout_s = 60;  // per upload/download attempt
  // What round deadlines are checked against and backoffs wait on (not owned): the
  // process's clock, or a test's fake. A gRPC call's own deadline (call_timeout_s) is
  // gRPC's, on the real clock.
  core::Clock* clock = core::Clock::Real();
};

// Makes the stub of a channel; the default is protos::Coordinator::NewStub. Tests return
// one shared MockCoordinatorStub for every channel.
using StubFactory = std::function<std::shared_ptr<protos::Coordinator::StubInterface>(
    const std::shared_ptr<grpc::Channel>& channel)>;

// What an SGP share adds to its chunks (GossipChunk).
struct ShareFields {
  double weight = 0;
  uint64_t reference_version = 0;
  uint64_t inbox_applied = 0;
};

// What the handler of the event stream says after an event.
enum class EventVerdict { kContinue, kStop };

// Thread-compatible: one call at a time, except Stop() from any thread. A share's upload
// may run on a thread of its own while nothing else uses the transport.
class Transport {
 public:
  Transport(TransportOptions options, monitoring::Metrics* metrics, StubFactory stubs = nullptr);
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // A new channel to the current server (credentials from the options' files).
  absl::Status Connect();
  // The current server is unreachable: a new channel to the next one of the list (the
  // same one when there is one), counted as fedlgc_stream_resumes_total{stream="failover"}
  // when it is another.
  absl::Status FailOver();
  // FailOver() when the current channel is in TRANSIENT_FAILURE (gRPC's own reconnect
  // schedule can keep it down ~20 s after the coordinator is back); true if replaced.
  bool RefreshChannelIfDown();
  // The server the transport talks to now.
  const std::string& server() const { return servers_[current_]; }
  // Cancels the event stream, a join in flight, and every retry loop.
  void Stop();
  bool stopped() const { return stop_; }

  absl::StatusOr<protos::JoinReply> Join(const protos::JoinRequest& request);
  // Reads the event stream until `handle` says stop, the stream ends, or Stop(). Returns
  // the first error `handle` returned, else the stream's status (OK when stopped).
  absl::Status RunEvents(
      const std::function<absl::StatusOr<EventVerdict>(const protos::ServerEvent&)>& handle);

  // A blob served by DownloadModel ("" the global model), resumable; DEADLINE_EXCEEDED
  // once `deadline` passes.
  absl::StatusOr<std::string> DownloadBlob(const std::string& name, uint64_t version,
                                           SystemTime deadline);
  // A model under a compressed downlink ("" the global model): the chain of deltas from
  // `held` (the version this client holds; nullopt: none), or the model whole, as the
  // coordinator chose. Resumable like DownloadBlob; DATA_LOSS when a resumed download
  // changed kind.
  struct ModelDownload {
    std::string bytes;
    bool chain = false;  // bytes are a broadcast chain (codecs/broadcast.h)
    uint64_t from = 0;   // the chain's first version
  };
  absl::StatusOr<ModelDownload> DownloadModel(const std::string& name, uint64_t version,
                                              SystemTime deadline, std::optional<uint64_t> held);
  // Uploads `p` until the coordinator holds every chunk (through Gossip with `share`);
  // DEADLINE_EXCEEDED at `deadline`, and the coordinator's refusal (e.g.
  // FAILED_PRECONDITION once the round closed) when it is not worth a retry.
  absl::Status Upload(const PendingUpdate& p, const std::string& codec_label, SystemTime deadline,
                      const std::optional<ShareFields>& share = std::nullopt);
  // Sends a report (client_id and rtt filled in here) until the coordinator has it, the
  // round is over (FAILED_PRECONDITION: OK) or `deadline` passes (OK).
  absl::Status Report(protos::ProgressReport report, SystemTime deadline);

  // Sleeps the backoff of retry `attempt` (exponential, with jitter), or until Stop().
  void Backoff(int attempt);
  // Sleeps `seconds`, or until Stop().
  void Sleep(double seconds);
  // Smallest round trip of a unary call so far (ms; 0 before the first).
  double min_rtt_ms() const { return min_rtt_ms_; }
  // A random update id (odd, never 0).
  uint64_t NewUpdateId();

 private:
  // DownloadBlob and DownloadModel: resumable reads of one blob.
  absl::StatusOr<ModelDownload> Fetch(const std::string& name, uint64_t version,
                                      SystemTime deadline, std::optional<uint64_t> held);
  template <typename Msg>
  absl::Status UploadAs(const PendingUpdate& p, const std::string& codec_label, SystemTime deadline,
                        const ShareFields& share);
  // A chunk message of `p` with what every chunk of it carries (no index, no frame).
  template <typename Msg>
  Msg ChunkHead(const PendingUpdate& p, const ShareFields& share) const;
  // Asks the coordinator which chunks of `p` it holds (after a broken upload).
  template <typename Msg>
  absl::StatusOr<std::set<uint32_t>> QueryHeld(protos::Coordinator::StubInterface* stub,
                                               const PendingUpdate& p, const ShareFields& share);
  std::shared_ptr<protos::Coordinator::StubInterface> NewStub();
  void PrepareContext(grpc::ClientContext* ctx, double timeout_s) const;
  void NoteRoundTrip(core::Clock::time_point t0);

  const TransportOptions options_;
  const std::vector<std::string> servers_;  // options_.server split at commas
  size_t current_ = 0;                      // index into servers_
  monitoring::Metrics* const metrics_;
  const StubFactory stubs_;
  std::shared_ptr<grpc::Channel> channel_;
  std::mt19937_64 rng_;
  double min_rtt_ms_ = 0;
  std::atomic<bool> stop_{false};
  absl::Mutex sleep_mu_;  // Sleep waits on sleep_cv_ for sleep_stop_
  absl::CondVar sleep_cv_;
  bool sleep_stop_ ABSL_GUARDED_BY(sleep_mu_) = false;
  absl::Mutex events_mu_;  // guards events_ctx_ and join_ctx_ against Stop()
  grpc::ClientContext* events_ctx_ ABSL_GUARDED_BY(events_mu_) = nullptr;
  grpc::ClientContext* join_ctx_ ABSL_GUARDED_BY(events_mu_) = nullptr;
};

}  // namespace fedlgc::edge_client

#endif  // FEDLGC_EDGE_CLIENT_TRANSPORT_H_
