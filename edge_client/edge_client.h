// An edge client: joins the coordinator, and for every round it is asked to take part
// in downloads the global model (resuming by offset), trains on its shard, adds its
// error-feedback residual to the update (new - old weights), encodes it with the job's
// codec into self-contained chunks, and streams them, resuming after any disconnect with
// backoff and jitter and resending only the chunks the coordinator does not hold.
// Chunks the coordinator did not count go back into the residual. The residual and the
// update in flight are persisted, so a restarted client loses nothing.
#ifndef FEDLGC_EDGE_CLIENT_EDGE_CLIENT_H_
#define FEDLGC_EDGE_CLIENT_EDGE_CLIENT_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "autoencoder/autoencoder.h"
#include "autoencoder/lgc_payload.h"
#include "autoencoder/lgc_plan.h"
#include "edge_client/client_state.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace fedlgc::codecs {
class Codec;
class ErrorFeedback;
}  // namespace fedlgc::codecs
namespace fedlgc::core {
class Model;
struct Dataset;
}  // namespace fedlgc::core
namespace fedlgc::monitoring {
class Metrics;
}
namespace fedlgc::protos {
class RoundStart;
class LgcPromote;
class LgcLatent;
class LsgdLead;
class RoundReceipt;
}  // namespace fedlgc::protos

namespace fedlgc::edge_client {

struct EdgeClientOptions {
  std::string server = "127.0.0.1:50051";
  std::string client_id = "client-0";
  std::string state_dir = "state";
  std::string tls_ca, tls_cert, tls_key;
  std::string tls_server_name = "localhost";  // name in the coordinator's certificate
  bool insecure = false;
  std::string data = "fashion-mnist";  // or synthetic:N
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  size_t train_limit = 0;   // use the first N training examples (0 = all)
  uint32_t shard = 0;       // this client's shard index
  uint32_t num_shards = 1;  // shards the training set is split into
  std::string partition = "iid";
  std::string device = "auto";  // cpu, cuda, cuda:N or auto (CUDA when available)
  uint64_t partition_seed = 1;
  int torch_threads = 1;
  std::string metrics_listen;  // empty: no exposer
  uint32_t max_message_bytes = 4 << 20;
  double backoff_initial_s = 0.2;
  double backoff_max_s = 5.0;
  double call_timeout_s = 60;  // per upload/download attempt
  // Stop after this many rounds were uploaded (0: run until the job is done). For tests.
  uint32_t exit_after_rounds = 0;

  absl::Status Validate() const;
};

// Not thread-safe except Stop().
class EdgeClient {
 public:
  static absl::StatusOr<std::unique_ptr<EdgeClient>> Create(EdgeClientOptions options);
  ~EdgeClient();

  // Runs until the coordinator says the job is done, Stop() is called, or a fatal error
  // (bad credentials, refused identity).
  absl::Status Run();
  void Stop();

  int metrics_port() const;
  monitoring::Metrics& metrics() { return *metrics_; }
  const ClientState& state() const { return state_; }

 private:
  explicit EdgeClient(EdgeClientOptions options);
  absl::Status Connect();
  // A new channel when the current one is in TRANSIENT_FAILURE (gRPC's own reconnect
  // schedule can keep it down ~20 s after the coordinator is back); true if replaced.
  bool RefreshChannelIfDown();
  absl::Status Join();
  // Handles the event stream until it ends; returns OK when the job is done.
  absl::Status EventLoop(bool* done);
  absl::Status HandleRound(const protos::RoundStart& start);
  // LGC rounds (stage 2 or 3): values on the round's support, as leader or follower.
  absl::Status HandleLgcRound(const protos::RoundStart& start);
  // Fetches the echo of state_.lgc_echo and logs its relative error.
  absl::Status MeasureLgcEcho();
  // This client leads the LGC round it has an update for now: resend as leader.
  absl::Status HandleLgcPromote(const protos::LgcPromote& promote);
  // The frame of an LGC update: `u` the update plus residual, `values` u on the support.
  // predict=1 leaders: sets pending->lgc_values to what the coordinator will rebuild.
  absl::StatusOr<std::string> LgcFrame(uint32_t stage, bool leader, uint64_t encoder_version,
                                       std::span<const float> u, PendingUpdate* pending,
                                       std::chrono::system_clock::time_point deadline);
  // predict=1: this client's prediction of its values `v` on the support from `latent`
  // (its own decoder), and the gain and innovation it sends; logs the miss.
  absl::StatusOr<autoencoder::Correction> PredictAndCorrect(
      uint64_t round, std::span<const float> v, std::span<const float> latent,
      uint64_t encoder_version, bool leader, std::chrono::system_clock::time_point deadline);
  // predict=1: the round's latent arrived; a follower waiting for it sends its correction.
  absl::Status HandleLgcLatent(const protos::LgcLatent& latent);
  // The residual after an LGC frame: u, minus lgc_values on the support.
  void SetLgcResidual(std::span<const float> u, const PendingUpdate& p);
  // One rounds.jsonl line: |v - sent| / |v| of an LGC update (sent: what the coordinator
  // rebuilt or will rebuild).
  void LogLgcMiss(uint64_t round, std::span<const float> v, std::span<const float> sent,
                  bool leader);
  // The LGC encoder (leaders) or this client's decoder (predict=1) of `version` for
  // supports of k values, downloaded unless held.
  absl::Status EnsureLgcWeights(bool decoder, uint64_t version, size_t k,
                                std::chrono::system_clock::time_point deadline);
  absl::Status EnsureEncoder(uint64_t version, size_t k,
                             std::chrono::system_clock::time_point deadline) {
    return EnsureLgcWeights(false, version, k, deadline);
  }
  absl::Status EnsureDecoder(uint64_t version, size_t k,
                             std::chrono::system_clock::time_point deadline) {
    return EnsureLgcWeights(true, version, k, deadline);
  }
  // Downloads the round's model and trains on it: the update (new - old weights), or an
  // empty vector when the round moved on meanwhile.
  absl::StatusOr<std::vector<float>> TrainRound(const protos::RoundStart& start,
                                                std::chrono::system_clock::time_point deadline);
  absl::Status UploadPending(uint64_t round, std::chrono::system_clock::time_point deadline);
  // Records an encode that began at t0 for `round`: the histogram, and one line in
  // <state_dir>/<id>.rounds.jsonl with the round's local training and encode seconds (what
  // fedlgc-sim reports as the encode share of training time).
  void ObserveEncode(uint64_t round, std::chrono::steady_clock::time_point t0);
  // Appends one JSON object as a line to <state_dir>/<id>.rounds.jsonl.
  void AppendRoundLog(const std::string& json);
  // A unary call that began at t0 has just answered: keeps the smallest round trip.
  void NoteRoundTrip(std::chrono::steady_clock::time_point t0);
  // An update in flight for `round`, with a fresh update id and this shard's weight.
  PendingUpdate NewPending(uint64_t round, uint64_t model_version);
  // Adds an update that did not count back into the residual.
  absl::Status RestorePending(const PendingUpdate& p);
  absl::Status HandleReceipt(const protos::RoundReceipt& receipt);
  // LSGD and SGP rounds (modes_client.cc): the client's own model trains a local period.
  absl::Status HandleLsgdRound(const protos::RoundStart& start);
  // This client leads its LSGD group: upload its model minus the group's reference.
  absl::Status HandleLsgdLead(const protos::LsgdLead& lead);
  absl::Status HandleSgpRound(const protos::RoundStart& start);
  // The receipt of a push-sum share: take it back when it was not delivered.
  absl::Status HandleShareReceipt(const protos::RoundReceipt& receipt);
  // The share in flight was not delivered: back into x and w.
  void ReabsorbShare();
  // SGP: one local period on x / w, recorded as `round`'s.
  absl::Status TrainSgpPeriod(const protos::RoundStart& start, uint64_t round, uint64_t seed);
  // SGP overlap: waits for the share upload running beside training.
  void JoinShareUpload();
  // The local model: downloaded on the first round (false: the round moved on).
  absl::StatusOr<bool> EnsureLocalModel(const protos::RoundStart& start);
  // Trains the local period on `weights` in place; returns the running loss.
  absl::StatusOr<double> TrainLocal(const protos::RoundStart& start, std::vector<float>* weights);
  // Sends a progress report (LSGD: the running loss; SGP: the mail added) until the
  // coordinator has it or the round is over.
  absl::Status ReportProgress(uint64_t round, double loss, uint64_t inbox_applied = 0,
                              double distance_sq = -1);
  absl::StatusOr<std::vector<float>> DownloadFloats(const std::string& blob, uint64_t version);
  // The job's codec without error feedback: an SGP sender keeps what the codec loses, and
  // an LSGD leader's next upload (model minus reference) carries it.
  absl::StatusOr<codecs::Codec*> PlainCodec(const std::string& spec);
  // Gives up at `deadline` (the round's) with DeadlineExceeded.
  absl::StatusOr<std::vector<float>> Download(uint64_t version,
                                              std::chrono::system_clock::time_point deadline);
  // A blob served by DownloadModel ("" the model, "encoder" the LGC encoder), resumable.
  absl::StatusOr<std::string> DownloadBlob(const std::string& name, uint64_t version,
                                           std::chrono::system_clock::time_point deadline);
  // Uploads the pending update until the coordinator holds every chunk (through Gossip
  // for a push-sum share).
  absl::Status Upload(std::chrono::system_clock::time_point deadline);
  template <typename Msg>
  absl::Status UploadAs(std::chrono::system_clock::time_point deadline);
  absl::Status EnsureCodec(const std::string& spec);
  absl::Status Persist();
  void PrepareContext(grpc::ClientContext* ctx, double timeout_s) const;
  void Backoff(int attempt);

  EdgeClientOptions options_;
  std::unique_ptr<monitoring::Metrics> metrics_;
  std::unique_ptr<core::Model> model_;
  std::unique_ptr<core::Dataset> data_;
  std::vector<uint32_t> shard_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<codecs::ErrorFeedback> codec_;
  std::string codec_spec_;
  std::string device_;  // resolved --device, e.g. "cpu" or "cuda:0"
  // LGC: the job's plan, the encoder (leaders only) and the open round's deadline.
  std::string lgc_spec_;
  std::optional<autoencoder::LgcPlan> lgc_plan_;
  std::unique_ptr<autoencoder::Autoencoder> encoder_;
  uint64_t encoder_version_ = 0;
  std::unique_ptr<autoencoder::Autoencoder> decoder_;  // predict=1: this client's decoder
  uint64_t decoder_version_ = 0;
  uint64_t lgc_encoder_version_ = 0;  // of the last LGC RoundStart
  std::chrono::system_clock::time_point round_deadline_;
  double last_train_seconds_ = 0;
  // LSGD and SGP: what a lead request or a share needs from the round's start.
  struct ModeRound {
    uint64_t round = 0, model_version = 0, seed = 0;
    std::string codec;
    uint32_t max_chunk_bytes = 0;
  };
  ModeRound mode_round_;
  // LSGD leads and SGP shares: a codec without error feedback (see PlainCodec).
  std::unique_ptr<codecs::Codec> plain_codec_;
  std::string plain_codec_spec_;
  double min_rtt_ms_ = 0;  // smallest round trip of a unary call
  // SGP overlap: the share's upload, running while the next period trains. Until it is
  // joined the main thread leaves the pending share, the channel and rng_ to it.
  std::thread share_upload_;
  uint64_t share_upload_round_ = 0;
  uint64_t total_rounds_ = 0;  // of the job, from Join
  ClientState state_;
  std::string state_path_;
  std::mt19937_64 rng_;
  std::atomic<bool> stop_{false};
  std::mutex events_mu_;  // guards events_ctx_ against Stop()
  grpc::ClientContext* events_ctx_ = nullptr;
  bool job_over_ = false;  // the coordinator has run every round
  uint32_t rounds_uploaded_ = 0;
  uint64_t last_round_ = 0;
};

}  // namespace fedlgc::edge_client

#endif  // FEDLGC_EDGE_CLIENT_EDGE_CLIENT_H_
