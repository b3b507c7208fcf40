// What happens to a committed round off the round loop: its evaluation (on the
// coordinator's test set, and the answers of the clients asked to evaluate it), its kept
// model and export, then its rounds.jsonl line (and TensorBoard scalars with
// --tensorboard), its place in reports() and its log line,
// in round order on a thread of its own, so that the next round starts while this one's
// model is evaluated.
#ifndef FEDLGC_COORDINATOR_ROUND_RECORDER_H_
#define FEDLGC_COORDINATOR_ROUND_RECORDER_H_

#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/federated_eval.h"
#include "coordinator/model_keeper.h"
#include "core/clock.h"
#include "core/round_report.h"
#include "monitoring/tensorboard.h"

namespace fedlgc::core {
class Model;
struct Dataset;
}  // namespace fedlgc::core
namespace fedlgc::monitoring {
class Metrics;
}

namespace fedlgc::coordinator {

struct RecorderParts {
  std::string state_dir;                     // rounds.jsonl goes here
  core::Clock* clock = nullptr;              // not owned
  monitoring::Metrics* metrics = nullptr;    // not owned; the evaluations' gauges
  std::unique_ptr<core::Dataset> test_data;  // null: the coordinator evaluates nothing
  std::unique_ptr<core::Model> model;        // evaluates on test_data; the recorder's own
  std::unique_ptr<ModelKeeper> keeper;       // null: no model is kept (an aggregator)
  EvalBook* eval_book = nullptr;             // not owned; null: clients evaluate nothing
  // Of the clients still owing an evaluation, those gone for good (RoundHost::Vanished).
  std::function<std::set<std::string>(const std::set<std::string>&)> gone;
  std::unique_ptr<monitoring::TensorBoardWriter> tensorboard;  // null: --tensorboard unset
};

// A committed round's TensorBoard scalars, each only where the round has it:
//   accuracy/server, loss/server        the coordinator's test set
//   accuracy/federated, loss/federated  the clients' own held-out data (--eval clients|both)
//   bytes/uplink, bytes/downlink        on the wire this round
//   ratio/uplink, ratio/downlink        float32 bytes over the bytes on the wire
//   round/participants, round/stragglers, round/seconds
//   privacy/epsilon                     spent so far (--dp)
//   mode/<figure>                       every other figure of the round (its mode's, the
//                                       evaluation's seconds, ...)
std::vector<monitoring::Scalar> RoundScalars(const RoundReport& rep);

// Thread-safe. Rounds handed over before Start wait for it; the destructor records every
// round handed over (after Start) before it returns.
class RoundRecorder {
 public:
  explicit RoundRecorder(RecorderParts parts) : parts_(std::move(parts)) {}
  ~RoundRecorder();
  RoundRecorder(const RoundRecorder&) = delete;
  RoundRecorder& operator=(const RoundRecorder&) = delete;

  // Starts the recorder's thread; once.
  void Start();
  // Hands a committed round over: its evaluation when `evaluate`, then the kept model
  // (when there is a keeper). `model`: the round's, at `model_version` (empty when
  // neither is due). Waits while two rounds are waiting already: evaluation slower than
  // rounds holds the round loop, not memory.
  void Later(RoundReport rep, std::vector<float> model, bool evaluate, uint64_t model_version);
  // Returns once every round handed over is recorded (at once before Start).
  void Drain();
  // The recorded rounds' reports, in round order.
  std::vector<RoundReport> reports() const;
  // The last evaluation's accuracy: the test set's, or without one the clients'; -1 when
  // none.
  double last_accuracy() const;

 private:
  struct Pending {
    RoundReport report;
    std::vector<float> model;  // empty: neither evaluated nor kept
    bool evaluate = false;
    uint64_t model_version = 0;
  };
  void Loop();
  // Evaluates `model` into rep (accuracy, loss, "eval_seconds") on the test set.
  absl::Status Evaluate(std::span<const float> model, RoundReport* rep);
  // Waits for the answers of the clients asked to evaluate rep's round (EvalBook) and
  // puts them in the report.
  void SettleFederatedEval(RoundReport* rep);
  void Record(RoundReport rep);  // the last step: the line, the report, the log

  RecorderParts parts_;
  std::thread thread_;
  absl::Mutex queue_mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(queue_mu_);  // the front is being recorded
  bool stop_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool started_ ABSL_GUARDED_BY(queue_mu_) = false;
  mutable absl::Mutex mu_;
  std::vector<RoundReport> reports_ ABSL_GUARDED_BY(mu_);
  double last_accuracy_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_ROUND_RECORDER_H_
