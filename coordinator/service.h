// The gRPC face of the coordinator: a callback service whose reactors own their per-call
// state and never block. Identity comes from the client certificate (mTLS); with
// --insecure it is taken from the request and the coordinator says so at startup.
// Every refusal becomes a gRPC status here, and only here, and a
// fedlgc_rejected_total{reason} count.
#ifndef FEDLGC_COORDINATOR_SERVICE_H_
#define FEDLGC_COORDINATOR_SERVICE_H_

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "coordinator/round_engine.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.grpc.pb.h"

namespace fedlgc::coordinator {

struct JobInfo {
  std::string job_id;
  std::string model;
  uint64_t dim = 0;
  uint32_t total_rounds = 0;
  std::string mode = "fedavg";
};

// Bytes moved while a round is open (reset by the driver when it opens one).
struct RoundTraffic {
  std::atomic<uint64_t> uplink_wire{0};
  std::atomic<uint64_t> uplink_raw{0};
  std::atomic<uint64_t> downlink{0};
};

class EventsReactor;

// Thread-safe. `engine` and `metrics` must outlive the service.
class CoordinatorService final : public protos::Coordinator::CallbackService {
 public:
  CoordinatorService(RoundEngine* engine, monitoring::Metrics* metrics, JobInfo job, bool insecure);
  ~CoordinatorService() override;

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx, const protos::JoinRequest* req,
                                 protos::JoinReply* reply) override;
  grpc::ServerBidiReactor<protos::ClientEvent, protos::ServerEvent>* Events(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerWriteReactor<protos::ModelChunk>* DownloadModel(
      grpc::CallbackServerContext* ctx, const protos::ModelRequest* req) override;
  grpc::ServerReadReactor<protos::UpdateChunk>* UploadUpdate(
      grpc::CallbackServerContext* ctx, protos::UploadReceipt* receipt) override;
  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx,
                                   const protos::ProgressReport* req,
                                   protos::ReportAck* ack) override;
  grpc::ServerReadReactor<protos::GossipChunk>* Gossip(grpc::CallbackServerContext* ctx,
                                                       protos::UploadReceipt* receipt) override;

  // Clients with an open event stream.
  std::vector<std::string> Connected() const;
  // A client's call arrived or progressed (a chunk, a report, a download) now.
  void Touch(const std::string& client);
  // When the client last had an open event stream or a call in progress; the epoch when
  // never.
  Clock::time_point LastSeen(const std::string& client) const;
  // Sends the open round's start to a participant; false if it has no event stream.
  bool SendRoundStart(const std::string& client);
  bool Push(const std::string& client, const protos::ServerEvent& event);
  // Sends JobDone to everyone connected, and to everyone who connects later.
  void BroadcastDone(uint64_t rounds, float accuracy);
  static protos::ServerEvent ReceiptEvent(const Receipt& receipt);

  RoundTraffic& traffic() { return traffic_; }
  // Set by the driver: a chunk arrived (wakes the round loop early).
  void SetChunkCallback(std::function<void()> f) { on_chunk_ = std::move(f); }
  // Set by the driver before serving: adds mode fields (LGC) to a client's RoundStart.
  void SetRoundDecorator(std::function<void(const std::string&, protos::RoundStart*)> f) {
    decorate_ = std::move(f);
  }
  // Set by the LSGD/SGP/LGC driver before serving: `names` says which blob names (other
  // than "" and "encoder") the driver serves; `f` gives the blob `name` of `version` for
  // `client`, or nullptr when that one is not served (NOT_FOUND; other names are refused as
  // malformed requests).
  using BlobProvider = std::function<std::shared_ptr<const ModelBlob>(
      const std::string& client, const std::string& name, uint64_t version)>;
  void SetBlobProvider(std::function<bool(const std::string& name)> names, BlobProvider f) {
    blob_names_ = std::move(names);
    blobs_ = std::move(f);
  }
  // Set by the LSGD driver before serving: takes a client's report (an error refuses it).
  using ReportHandler =
      std::function<absl::Status(const std::string& client, const protos::ProgressReport&)>;
  void SetReportHandler(ReportHandler f) { on_report_ = std::move(f); }
  // Set by the SGP driver before serving: a sender has applied its inbox up to a round.
  void SetInboxAppliedCallback(std::function<void(const std::string&, uint64_t)> f) {
    on_inbox_applied_ = std::move(f);
  }
  void NotifyInboxApplied(const std::string& client, uint64_t round) {
    if (on_inbox_applied_) on_inbox_applied_(client, round);
  }
  // The LGC encoder served by DownloadModel with blob "encoder".
  void SetEncoderBlob(std::shared_ptr<const ModelBlob> blob);
  // Measured downlink throughput of a client (bytes/s of its last full model download,
  // smoothed); 0 when unknown.
  double LinkBytesPerSecond(const std::string& client) const;
  void RecordDownload(const std::string& client, uint64_t bytes, double seconds);

  // Called by reactors.
  absl::StatusOr<std::string> Identity(grpc::CallbackServerContext* ctx,
                                       const std::string& claimed);
  // Identity of a streaming call, whose claim travels as fedlgc-client-id metadata.
  absl::StatusOr<std::string> StreamIdentity(grpc::CallbackServerContext* ctx);
  void Unregister(const std::string& client, EventsReactor* r);
  void OnEventsOpened(const std::string& client, EventsReactor* r);
  RoundEngine* engine() { return engine_; }
  monitoring::Metrics* metrics() { return metrics_; }
  const JobInfo& job() const { return job_; }
  void NotifyChunk() {
    if (on_chunk_) on_chunk_();
  }

 private:
  std::optional<protos::ServerEvent> RoundStartEvent(const std::string& client) const;

  RoundEngine* const engine_;
  monitoring::Metrics* const metrics_;
  const JobInfo job_;
  const bool insecure_;
  RoundTraffic traffic_;
  std::function<void()> on_chunk_;
  std::function<void(const std::string&, protos::RoundStart*)> decorate_;
  std::function<bool(const std::string&)> blob_names_;
  BlobProvider blobs_;
  ReportHandler on_report_;
  std::function<void(const std::string&, uint64_t)> on_inbox_applied_;
  mutable std::mutex mu_;
  std::shared_ptr<const ModelBlob> encoder_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, double> link_bps_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, EventsReactor*> streams_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Clock::time_point> last_call_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  protos::ServerEvent done_event_ ABSL_GUARDED_BY(mu_);
};

// The one place absl::Status becomes grpc::Status (the codes are numbered alike).
grpc::Status ToGrpc(const absl::Status& st);

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_SERVICE_H_
