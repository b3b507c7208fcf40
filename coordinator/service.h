// The gRPC face of the coordinator: a callback service on raw bytes (wire.h) whose
// reactors (reactors.h) own their per-call state and never block; per-client limits on
// open calls and an idle watchdog (stream_registry.h). Identity comes from the client certificate
// (mTLS); with --insecure it is taken from the request and the coordinator says so at
// startup. Who holds an event stream, and who was seen when, is the service's EventStreams
// (event_streams.h). Every refusal becomes a gRPC status here, and only here, and a
// fedlgc_rejected_total{reason} count. What differs between modes goes to the job's
// RoundDriver: the mode's part of RoundStart, its blobs, its reports.
#ifndef FEDLGC_COORDINATOR_SERVICE_H_
#define FEDLGC_COORDINATOR_SERVICE_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include "coordinator/event_streams.h"
#include "coordinator/federated_eval.h"
#include "coordinator/link_book.h"
#include "coordinator/progress.h"
#include "coordinator/round_driver.h"
#include "coordinator/round_engine.h"
#include "coordinator/statistics_phase.h"
#include "coordinator/stream_registry.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.grpc.pb.h"

namespace fedlgc::coordinator {

struct JobInfo {
  std::string job_id;
  std::string model;  // a built-in's name, or the TorchScript file's name
  uint64_t dim = 0;
  uint32_t total_rounds = 0;
  // A TorchScript job: the file's SHA-256 (hex) and the file itself, served as the blob
  // kModelFileBlob (version 1); null and empty for a built-in model.
  std::string model_sha256;
  std::shared_ptr<const ModelBlob> model_file;
  std::string buffers = "average";  // the model's rules (core/model.h)
  std::string loss = "auto";
  std::string freeze, local_params;
  uint64_t init_seed = 0;    // a built-in model's initial weights (JoinReply.init_seed)
  double eval_fraction = 0;  // of each shard held out for federated evaluation
  // Under a compressed downlink, a TorchScript job's version-0 model (the file's weights)
  // by its CRC32C: clients holding the file hold that model (JoinReply).
  std::optional<uint32_t> initial_model_crc;
  uint64_t instance = 0;  // JoinReply.job_instance (0: not said)
};

// Bytes moved since the last commit, which takes them for its report (the round loop).
struct RoundTraffic {
  std::atomic<uint64_t> uplink_wire{0};
  std::atomic<uint64_t> uplink_raw{0};
  std::atomic<uint64_t> downlink{0};
  std::atomic<uint64_t> downlink_raw{0};  // what the downloads stand for in float32
  // Of `downlink`, the job's TorchScript file fetched by clients, since the process began
  // (never taken): what joining clients fetched before the first round counts in it.
  std::atomic<uint64_t> model_file{0};
};

class Downlinks;

// How the service bounds what one client can do (docs/protocol.md#limits).
struct ServiceOptions {
  bool insecure = false;
  uint64_t max_message_bytes = 4 << 20;  // larger messages: RESOURCE_EXHAUSTED, oversized
  StreamLimits streams;
  bool watchdog = true;  // cancel idle calls from a thread of the service's own
  Clock* clock = Clock::Real();  // last calls, deadlines, idle calls (not owned)
  // Where the links measured by downloads and uploads go (not owned; null: a book of the
  // service's own).
  LinkBook* links = nullptr;
  // A chunk or report arrived (wakes the round loop early); empty: nothing to wake.
  std::function<void()> on_chunk;
  // The global model, and the blobs the driver broadcasts, go down through `downlinks`
  // (not owned, outlives the service; null: uncompressed).
  Downlinks* downlinks = nullptr;
  // Where federated evaluation's answers go (not owned, outlives the service; null: none
  // are taken).
  EvalBook* eval_book = nullptr;
  // Where the answers of the statistics phase go (not owned, outlives the service; null:
  // none are taken).
  StatsBook* stats_book = nullptr;
  // Where downloads and uploads are reported (not owned, outlives the service; null:
  // nowhere).
  Progress* progress = nullptr;
};

// The RoundStart event of the round `engine` has open for `client` (nullopt: none for
// it): the round, the plan's codec and training, the mode's parameters (the driver's
// DecorateRoundStart), the seeds and the deadline in wall time by `clock`.
std::optional<protos::ServerEvent> RoundStartEventOf(const RoundEngine& engine, RoundDriver& driver,
                                                     const std::string& client, const Clock& clock);
// The Receipt event of `receipt`: what of an update counted, and the version it made.
protos::ServerEvent ReceiptEventOf(const Receipt& receipt);

// An upload's chunk as the engine takes it (without a push-sum share); its frame views
// `chunk`'s bytes.
ChunkIn ChunkInOf(const std::string& client, const protos::UpdateChunk& chunk);

// Every call of the service, as raw bytes (wire.h).
using RawCoordinatorService = protos::Coordinator::WithRawCallbackMethod_Join<
    protos::Coordinator::WithRawCallbackMethod_Events<
        protos::Coordinator::WithRawCallbackMethod_DownloadModel<
            protos::Coordinator::WithRawCallbackMethod_UploadUpdate<
                protos::Coordinator::WithRawCallbackMethod_Report<
                    protos::Coordinator::WithRawCallbackMethod_Gossip<
                        protos::Coordinator::Service>>>>>>;

// Thread-safe. `engine`, `driver` and `metrics` must outlive the service.
class CoordinatorService final : public RawCoordinatorService {
 public:
  CoordinatorService(RoundEngine* engine, RoundDriver* driver, monitoring::Metrics* metrics,
                     JobInfo job, ServiceOptions options);
  ~CoordinatorService() override;

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Events(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* DownloadModel(
      grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* UploadUpdate(grpc::CallbackServerContext* ctx,
                                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* Gossip(grpc::CallbackServerContext* ctx,
                                                    grpc::ByteBuffer* response) override;

  // The clients' event streams: who is connected and last seen when, pushes, the job's
  // end, the final model's takers. Its lock comes before the engine's and the driver's
  // (event_streams.h).
  EventStreams& events() { return events_; }
  // Sends the open round's start to a participant; false if it has no event stream. The
  // start is made before the streams' lock is taken.
  bool SendRoundStart(const std::string& client);
  // The job's rounds as Join tells clients (an aggregator learns its parent's after it
  // joins).
  void SetTotalRounds(uint32_t rounds) { total_rounds_ = rounds; }

  RoundTraffic& traffic() { return traffic_; }
  // The job's TorchScript file as it is served (null: a built-in model).
  const std::shared_ptr<const ModelBlob>& model_file() const { return job_.model_file; }
  // A participant's download or upload moved (no-op without ServiceOptions::progress).
  void ReportDownload(const std::string& client, uint64_t bytes, bool complete) {
    if (options_.progress != nullptr) options_.progress->Downloaded(client, bytes, complete);
  }
  void ReportUpload(const std::string& client, uint64_t bytes, bool complete) {
    if (options_.progress != nullptr) options_.progress->Uploaded(client, bytes, complete);
  }
  // Measured downlink throughput of a client (bytes/s of its full model downloads,
  // averaged both ways: LinkEstimate::down_bps_mean); 0 when unknown.
  double LinkBytesPerSecond(const std::string& client) const;
  // What downloads and uploads measure of the clients' links.
  LinkBook& links() { return *links_; }

  // Called by reactors.
  absl::StatusOr<std::string> Identity(grpc::CallbackServerContext* ctx,
                                       const std::string& claimed);
  // Identity of a streaming call, whose claim travels as fedlgc-client-id metadata.
  absl::StatusOr<std::string> StreamIdentity(grpc::CallbackServerContext* ctx);
  RoundEngine* engine() { return engine_; }
  RoundDriver* driver() { return driver_; }
  monitoring::Metrics* metrics() { return metrics_; }
  uint64_t max_message_bytes() const { return options_.max_message_bytes; }
  Clock& clock() const { return *options_.clock; }
  StreamRegistry& calls() { return calls_; }
  void NotifyChunk() {
    if (options_.on_chunk) options_.on_chunk();
  }

 private:
  // The unary calls on parsed requests.
  grpc::Status DoJoin(grpc::CallbackServerContext* ctx, const protos::JoinRequest& req,
                      protos::JoinReply* reply);
  grpc::Status DoReport(grpc::CallbackServerContext* ctx, const protos::ProgressReport& req,
                        protos::ReportAck* ack);
  // Admits an upload, share or download of `client` under the stream limits (counted).
  absl::StatusOr<std::shared_ptr<StreamTicket>> OpenStream(const std::string& client,
                                                           grpc::CallbackServerContext* ctx);
  // The blob a download asks for, or the refusal.
  absl::StatusOr<std::shared_ptr<const ModelBlob>> BlobFor(const std::string& client,
                                                           const protos::ModelRequest& req);

  RoundEngine* const engine_;
  RoundDriver* const driver_;
  monitoring::Metrics* const metrics_;
  const JobInfo job_;
  std::atomic<uint32_t> total_rounds_;
  const ServiceOptions options_;
  StreamRegistry calls_;  // open uploads, shares and downloads
  LinkBook own_links_;
  LinkBook* const links_;
  RoundTraffic traffic_;
  EventStreams events_;
};

// The one place absl::Status becomes grpc::Status (the codes are numbered alike).
grpc::Status ToGrpc(const absl::Status& st);

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_SERVICE_H_
