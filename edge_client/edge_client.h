// An edge client: joins the coordinator, makes the ClientMode of the job's mode, and hands
// it each event of the stream (round starts, receipts, mode events) until the job is done,
// reconnecting with backoff and jitter after any break. The mode trains, encodes and
// uploads through the ClientEnv this class implements: local training on the client's
// shard, the Transport, and the persisted ClientState (so a restarted client loses
// nothing).
#ifndef FEDLGC_EDGE_CLIENT_EDGE_CLIENT_H_
#define FEDLGC_EDGE_CLIENT_EDGE_CLIENT_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "edge_client/attack.h"
#include "edge_client/client_mode.h"
#include "edge_client/client_state.h"
#include "edge_client/downlink_receiver.h"
#include "edge_client/options.h"
#include "edge_client/shared_resources.h"
#include "edge_client/transport.h"

namespace fedlgc::core {
class Preflight;
}  // namespace fedlgc::core
namespace fedlgc::monitoring {
class Metrics;
}
namespace fedlgc::protos {
class EvalStart;
class JobDone;
class JoinReply;
}

namespace fedlgc::edge_client {

// Not thread-safe except Stop().
class EdgeClient final : private ClientEnv {
 public:
  // Loads the data and the persisted state. `make_mode` makes the job's mode once Join
  // names it (modes::MakeClientMode for fedlgc-edge); `stubs` replaces the gRPC stub
  // (tests: a gMock MockCoordinatorStub).
  // With a `trainer` (which must outlive the client) the client has no data of its own:
  // the trainer stands in for training on a shard and gives the client's weight (an
  // aggregator's upstream client, tier/tier.h). `shared`: what this client shares with
  // the other clients of its process (client_host.h); what it leaves null, the client
  // makes for itself (its own metrics, one model, its data).
  static absl::StatusOr<std::unique_ptr<EdgeClient>> Create(EdgeClientOptions options,
                                                            ClientModeFactory make_mode,
                                                            StubFactory stubs = nullptr,
                                                            LocalTrainer* trainer = nullptr,
                                                            SharedResources shared = {});
  // --check (core/preflight.h): what Create reads (the options, the data and its shard,
  // --eval-data, the device, --model and whether it fits, the state file) and what Run
  // would need (the state folder, --export, the certificates, the coordinator's address,
  // the metrics address), one line each on `check`, writing, listening and dialling
  // nowhere.
  static void Check(EdgeClientOptions options, core::Preflight* check);
  ~EdgeClient() override;

  // Runs until the coordinator says the job is done, Stop() is called, or a fatal error
  // (bad credentials, refused identity or protocol).
  absl::Status Run();
  void Stop();

  const std::string& id() const { return options_.client_id; }
  int metrics_port() const;
  monitoring::Metrics& metrics() override { return *metrics_; }
  const ClientState& client_state() const { return state_; }
  // The global model as this client holds it under a compressed downlink.
  // nullptr before the first download of `blob` ("" the global model).
  const DownlinkReceiver* downlink(const std::string& blob = "") const;
  // The job's mode, once joined.
  std::optional<Mode> mode() const { return mode_; }
  // The job's rounds (Join); the event loop's thread only.
  uint64_t job_rounds() const { return total_rounds_; }
  // The job's model once joined (its layout: names and shapes in flat order), its buffers
  // rule ("average" or "local") and the parameters that do not travel; the event loop's
  // thread only.
  const codecs::ModelLayout& job_layout() const { return layout(); }
  bool job_buffers_local() const { return local_buffers_; }
  const core::ParameterGroups& job_parameter_groups() const { return model_->groups; }
  // The job's model as made: its frozen parameters' values and what a client keeps to
  // itself before it has its own (a Python client's module takes them).
  const std::vector<float>& job_initial_frozen() const { return model_->initial_frozen; }
  const std::vector<float>& job_initial_own() const { return model_->initial_own; }

 private:
  EdgeClient(EdgeClientOptions options, ClientModeFactory make_mode, StubFactory stubs,
             LocalTrainer* trainer, SharedResources shared);
  absl::Status LoadData();
  // Whether the model of `info` takes this client's data (a leased model's forward pass).
  absl::Status CheckFits(const ModelInfo& info);
  const std::vector<uint32_t>& shard() const { return data_->shards[options_.shard]; }
  // What trains: the shard without the share held out for federated evaluation.
  const std::vector<uint32_t>& train_indices() const {
    return held_out_ ? train_indices_ : shard();
  }
  // Federated evaluation: holds out the job's share of the shard (JoinReply.eval_fraction)
  // unless the client has data of its own to evaluate on (--eval-data).
  void HoldOut(double fraction);
  // EvalStart: evaluates the model of that version and reports it (or declines).
  absl::Status EvaluateModel(const protos::EvalStart& start);
  absl::StatusOr<core::EvalResult> EvaluateOwn(std::span<const float> weights);
  // StatisticsStart: re-estimates the statistics of the model of that version on this
  // client's training examples and reports them (or declines).
  absl::Status AnswerStatistics(const protos::StatisticsStart& start);
  // NOT_FOUND naming why this client has no statistics to give (no training data, buffers
  // kept local, a trainer without them: an aggregator): checked before the model is
  // downloaded, so such a client declines at once. OK where it has them; ReestimateOwn
  // relies on it.
  absl::Status StatisticsAvailable() const;
  absl::StatusOr<core::Statistics> ReestimateOwn(std::span<const float> weights,
                                                 const protos::StatisticsStart& start);
  // This client's weight: its shard's size, or the trainer's samples.
  uint64_t NumSamples() const;
  // The job this client joined is not the one its update in flight was made for (it failed
  // over to another coordinator): the update is given up, not sent there and not put back
  // into the residual, because the coordinator it was made for may have counted it.
  // Join: the job `job` of instance `instance` (JoinReply.job_instance). A state made in
  // another instance of the same job (its coordinator started it afresh) is given up
  // whole, the held downlink model and the mode's state with it; a state of another job
  // (a failover from an aggregator to the root) is kept, and both record the job's.
  absl::Status StartOverIfAnotherInstance(const std::string& job, uint64_t instance);
  // Removes the files of this client's that belong to the job it ran (held downlink models,
  // buffers kept local), so that a job started afresh reads none of them.
  void ForgetJobFiles() const;
  absl::Status ForgetOtherJobsUpdate(const std::string& job);
  // Joins, checks the job against this client, and makes the mode on the first join.
  absl::Status Join();
  // The job's model (a built-in, this client's file, or the coordinator's file, fetched),
  // made with the job's rules and checked against this client's data.
  absl::Status EnsureModel(const protos::JoinReply& reply);
  // The job's TorchScript file in <state_dir>/models/<sha256>.pt, downloaded unless a
  // file of that hash is there.
  absl::StatusOr<std::string> FetchModelFile(const protos::JoinReply& reply);
  // What this client keeps to itself (personal parameters, buffers "local"), in
  // <state_dir>/<id>.own (read from <id>.buffers, the name of a release before personal
  // parameters, when there is no .own), and put into a model.
  absl::Status SaveOwn() const;
  void LoadOwn();
  absl::Status SetOwn(core::Model& m) const;
  // Handles the event stream until it ends; *done once the job is.
  absl::Status EventLoop(bool* done);
  absl::StatusOr<EventVerdict> HandleEvent(const protos::ServerEvent& event, bool* done);
  // A round this client cannot take part in (a model or update that is not finite): it
  // says why (log, metric, round log) and waits for the next one.
  void SkipRound(uint64_t round, const absl::Status& why);
  // --dump-updates: writes after - before as <dir>/<id>/r<round>.f32.
  absl::Status DumpUpdate(uint64_t round, std::span<const float> before,
                          std::span<const float> after) const;
  // Whether this client takes the job's final model (--export, or its trainer's wish).
  bool WantsFinalModel() const;
  // The job is done: downloads its final model for the trainer and --export.
  absl::Status TakeFinalModel(const protos::JobDone& done);
  // The job was over when this client joined: reads its last receipts, then last words.
  void FinishOverJob();
  bool uploaded_enough() const {
    return options_.exit_after_rounds > 0 && rounds_uploaded_ >= options_.exit_after_rounds;
  }

  // ClientEnv.
  const std::string& client_id() const override { return options_.client_id; }
  core::Clock& clock() override { return *options_.clock; }
  ClientState& state() override { return state_; }
  absl::Status Persist() override;
  uint64_t dim() const override;
  const codecs::ModelLayout& layout() const override;
  const std::vector<uint64_t>& scale_cuts() const override;
  const std::string& device() const override { return device_; }
  uint64_t total_rounds() const override { return total_rounds_; }
  absl::StatusOr<double> TrainLocal(const protos::RoundStart& start,
                                    std::vector<float>* weights) override;
  // The model's training with terms.correction (core::TrainOptions::correction), or the
  // trainer's (LocalTrainer::TrainWith).
  absl::StatusOr<LocalTrained> TrainLocalWith(const protos::RoundStart& start,
                                              std::vector<float>* weights,
                                              const LocalTerms& terms) override;
  absl::StatusOr<std::vector<float>> DownloadFloats(const std::string& blob, uint64_t version,
                                                    SystemTime deadline) override;
  // A model under a compressed downlink: the chain from the held version, or the model
  // whole when the chain does not rebuild the coordinator's (counted, logged).
  absl::StatusOr<std::vector<float>> DownloadHeld(const std::string& blob, uint64_t version,
                                                  SystemTime deadline);
  absl::StatusOr<DownlinkReceiver*> ReceiverFor(const std::string& blob);
  // Holds the model file's weights as version 0 of the global model when they are the
  // job's (their CRC32C is the one Join named) and nothing newer is held.
  void HoldInitialModel(DownlinkReceiver* receiver);
  absl::StatusOr<std::string> DownloadBlob(const std::string& name, uint64_t version,
                                           SystemTime deadline) override {
    return transport_->DownloadBlob(name, version, deadline);
  }
  absl::Status Report(protos::ProgressReport report, SystemTime deadline) override {
    return transport_->Report(std::move(report), deadline);
  }
  PendingUpdate NewPending(uint64_t round, uint64_t model_version) override;
  uint64_t NewUpdateId() override { return transport_->NewUpdateId(); }
  absl::Status UploadCopy(const PendingUpdate& p, const std::string& codec_label,
                          SystemTime deadline, const ShareFields& share) override {
    return transport_->Upload(p, codec_label, deadline, share);
  }
  absl::Status UploadPending(uint64_t round, SystemTime deadline,
                             const std::optional<ShareFields>& share = std::nullopt,
                             Half half = Half::kWhole) override;
  void CountUploaded(uint64_t round) override;
  void ObserveEncode(uint64_t round, core::Clock::time_point t0) override;
  void AppendRoundLog(const ClientRoundRecord& record) override;

  EdgeClientOptions options_;
  const ClientModeFactory make_mode_;
  LocalTrainer* const trainer_;  // null: training on shard_
  std::string job_;              // the job id of the last Join
  const SharedResources shared_;  // every member set (Create)
  monitoring::Metrics* const metrics_;
  std::unique_ptr<Transport> transport_;
  // The job's model (its layout and rules); a model to train on is leased from
  // shared_.models for each round's training.
  std::shared_ptr<const ModelInfo> model_;
  std::string model_key_;     // what model_ was made for: the job's model and rules
  std::string model_sha256_;  // of --model's file; empty without one
  bool local_buffers_ = false;  // the job's buffers are "local"
  bool has_own_ = false;        // personal parameters or local buffers
  std::vector<float> own_;      // what this client keeps to itself; empty: the model's
  std::shared_ptr<const TrainingData> data_;  // null with a trainer
  // Federated evaluation's data: --eval-data's, or the held-out share of the shard (then
  // train_indices_ is the rest); null: none.
  std::unique_ptr<core::Dataset> eval_data_;
  std::vector<uint32_t> train_indices_;
  bool held_out_ = false;
  double held_out_fraction_ = -1;  // what HoldOut last did
  // The global model an evaluation downloaded, for the next round's download of it.
  std::optional<std::pair<uint64_t, std::vector<float>>> eval_model_;
  std::string device_;  // resolved --device, e.g. "cpu" or "cuda:0"
  std::optional<Mode> mode_;
  std::unique_ptr<ClientMode> client_mode_;
  ClientState state_;
  std::string downlink_codec_;  // of the job (Join); "": models come as float32
  std::optional<uint32_t> initial_model_crc_;  // of the job's version 0 (Join); unset: unknown
  // Under a compressed downlink, the models this client holds by blob name.
  std::map<std::string, std::unique_ptr<DownlinkReceiver>> downlinks_;
  std::string state_path_;
  Attack attack_;
  uint64_t last_round_ = 0;  // of the last RoundStart
  double last_train_seconds_ = 0;
  double last_train_cpu_seconds_ = 0;  // the process's CPU seconds during that training
  uint64_t total_rounds_ = 0;          // of the job, from Join
  bool job_over_ = false;              // the coordinator has run every round
  std::atomic<uint32_t> rounds_uploaded_{0};
  std::atomic<uint64_t> last_uploaded_round_{0};  // the last round CountUploaded counted
};

}  // namespace fedlgc::edge_client

#endif  // FEDLGC_EDGE_CLIENT_EDGE_CLIENT_H_
