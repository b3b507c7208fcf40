// The coordinator process: the round engine, the gRPC server (mTLS by default), the
// metrics exposer, evaluation of the global model, checkpoints, and the loop that drives
// rounds: it waits for a quorum, samples the round's participants, hands the round to
// the job's RoundDriver, then evaluates, saves the driver's state and the checkpoint,
// publishes receipts and writes the round's report.
#ifndef FEDLGC_COORDINATOR_COORDINATOR_H_
#define FEDLGC_COORDINATOR_COORDINATOR_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/codec_ladder.h"
#include "coordinator/federated_eval.h"
#include "coordinator/link_book.h"
#include "coordinator/model_guard.h"
#include "coordinator/model_keeper.h"
#include "coordinator/options.h"
#include "coordinator/progress.h"
#include "coordinator/round_driver.h"
#include "coordinator/round_engine.h"
#include "coordinator/round_source.h"
#include "coordinator/statistics_phase.h"
#include "core/round_report.h"

namespace grpc {
class Server;
}
namespace fedlgc::core {
class Model;
struct Dataset;
class Preflight;
}  // namespace fedlgc::core
namespace fedlgc::monitoring {
class Metrics;
}

namespace fedlgc::coordinator {

class CoordinatorService;

class CoordinatorHost;
class CoordinatorService;
class RoundRecorder;
struct RecorderParts;

// Thread-safe: Run on one thread, Stop from any.
class Coordinator final {
 public:
  // Validates `options` against the job's mode (`traits`, modes::JobMode), loads the
  // checkpoint if there is one, and makes the job's driver with `make_driver`
  // (modes::MakeRoundDriver for fedlgc-coordinator).
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(CoordinatorOptions options,
                                                             const ModeTraits& traits,
                                                             const DriverFactory& make_driver);
  ~Coordinator();
  // --check runs Create's reading steps (coordinator/preflight.h).
  friend void CheckCoordinator(CoordinatorOptions options, const ModeTraits& traits,
                               const DriverFactory& make_driver, core::Preflight* check,
                               bool endpoints);

  // Starts the gRPC server and metrics.
  absl::Status Start();
  int port() const { return port_; }
  int metrics_port() const;
  // An aggregator's rounds (--parent): set before Run, which then runs a round for each
  // order of `source` (which must outlive the coordinator) instead of its own --rounds.
  void SetRoundSource(RoundSource* source) { source_ = source; }  // before Run; null after
  // Drives rounds until `rounds` have committed (an aggregator: until its source says the
  // job is over) or Stop() is called.
  absl::Status Run();
  void Stop();
  // Clients with an open event stream.
  std::vector<std::string> ConnectedClients() const;
  core::Clock& clock() const { return *options_.clock; }

  RoundEngine& engine() { return *engine_; }
  monitoring::Metrics& metrics() { return *metrics_; }
  RoundDriver& driver() { return *driver_; }
  // The compressed downlink; null when models go down as float32.
  const Downlinks* downlinks() const { return downlinks_.get(); }
  std::vector<RoundReport> reports() const;

 private:
  explicit Coordinator(CoordinatorOptions options);
  absl::Status RunRound();
  // Runs the driver's round over `participants` and finishes it (FinishRound).
  absl::Status DriveRound(const std::vector<std::string>& participants, Clock::time_point deadline,
                          CommitResult* commit);
  // An aggregator's round: the order's model and round number, then a round as RunRound,
  // whose outcome goes back to the source.
  absl::Status RunOrder(RoundOrder order);

  // Create's steps, in order. A TorchScript job's file, served to clients by its hash.
  struct JobFiles {
    std::string model_sha256;                     // empty: a built-in model
    std::shared_ptr<const ModelBlob> model_file;  // null: a built-in model
  };
  // The model, the TorchScript file, the test and guard sets (the test set and a model
  // of its own to the recorder), the model guard.
  absl::Status LoadModelAndData(JobFiles* files, RecorderParts* recorder);
  // The aggregator options, the job key, and the checkpoint's state (or a fresh one).
  absl::Status Resume(const JobFiles& files, EngineState* state);
  absl::Status MakeDriverAndEngine(const DriverFactory& make_driver, EngineState state);
  // The compressed downlink, when --downlink-codec asks for one (before the service,
  // which serves through it).
  absl::Status MakeDownlinks();
  // The metrics, the gRPC service (not started), the round host on them, and the
  // recorder.
  void MakeService(const JobFiles& files, RecorderParts recorder);
  // The rounds of `source_` until it says the job is over.
  absl::Status RunForParent();
  // Tells everyone the job (of `rounds`) is over and lingers (--linger).
  void FinishJob(uint64_t rounds);
  // The round's participants: a seeded sample of the connected clients, once a quorum
  // is connected (empty when stopped).
  // An aggregator waits only until `until` (an empty list when it passes).
  std::vector<std::string> WaitForParticipants(
      std::optional<Clock::time_point> until = std::nullopt);
  // Evaluation, driver state, checkpoint, metrics, receipts and the round's report.
  absl::Status FinishRound(const CommitResult& commit, RoundReport rep);
  // A restart whose checkpoint holds rounds that rounds.jsonl lacks (a crash before their
  // lines were written): writes them, labelled "recovered", the last with its evaluation.
  void RecoverRoundLog();
  bool stopped() const;

  CoordinatorOptions options_;
  ModeTraits traits_;         // the job's mode
  AggregatorOptions robust_;  // --aggregator and --clip-multiplier, checked at Create
  std::unique_ptr<monitoring::Metrics> metrics_;
  std::unique_ptr<RoundDriver> driver_;
  // An aggregator's parent; null at the root. Atomic: Stop reads it from any thread.
  std::atomic<RoundSource*> source_{nullptr};
  // What transfers measured of each client's link, and the codec ladder that reads it
  // (null without --codec-ladder).
  LinkBook links_;
  std::shared_ptr<const CodecLadder> ladder_;
  std::unique_ptr<RoundEngine> engine_;
  std::unique_ptr<Downlinks> downlinks_;  // null: models go down as float32
  std::unique_ptr<Progress> progress_;    // <state_dir>/progress.json
  std::unique_ptr<EvalBook> eval_book_;   // null unless clients evaluate
  std::unique_ptr<StatisticsPhase> statistics_;  // null unless --bn-stats on (and statistics)
  std::unique_ptr<CoordinatorService> service_;
  // The driver's view of all of the above, and where the round loop waits; made with
  // the service, null until then.
  std::unique_ptr<CoordinatorHost> host_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<core::Model> eval_model_;
  std::unique_ptr<core::Dataset> guard_data_;  // the guard set: the first test examples
  std::unique_ptr<ModelGuard> guard_;          // the round loop's thread only
  std::string job_key_;
  uint64_t job_instance_ = 0;  // EngineState::job_instance, for JoinReply
  int port_ = 0;
  Clock::time_point run_started_;  // Run's start; the round loop's thread only
  // The traffic counters run from the last commit (DriveRound); the round loop's thread.
  bool traffic_since_commit_ = false;
  // Committed rounds' evaluation, kept models and lines, off the round loop; made last,
  // destroyed first (it uses the metrics, the eval book and the host).
  std::unique_ptr<RoundRecorder> recorder_;
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_COORDINATOR_H_
