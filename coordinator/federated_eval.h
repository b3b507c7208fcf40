// Federated evaluation (--eval clients|both; docs/your-model.md, "Evaluation where the
// data lives"): after a round commits, a sample of the connected clients is asked
// (EvalStart) to evaluate its model on data of their own that never trains (a held-out
// share of each shard, or a client's own file); each answers with an EvalReport. The
// coordinator's recorder waits for the answers, or the deadline, before it writes the
// round's line, and puts in it what they say, weighed by their examples as FedAvg weighs
// updates: no client holds more than --max-client-weight of the total, so one that claims
// a million examples moves the figure as far as its share allows and no further. A
// report that does not add up (more correct answers than examples, a class count that
// disagrees with the total, a loss that is not finite) is refused by name; a client asked
// once answers once. Those that never answer are counted as missing, never dropped.
#ifndef FEDLGC_COORDINATOR_FEDERATED_EVAL_H_
#define FEDLGC_COORDINATOR_FEDERATED_EVAL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/clock.h"
#include "core/round_report.h"

namespace fedlgc::protos {
class EvalReport;
}

namespace fedlgc::coordinator {

using Clock = core::Clock;

// What a settled round's evaluation says.
struct SettledEval {
  FederatedEval total;
  // Per reporting client: its accuracy (or loss for float targets) and examples.
  std::map<std::string, double> accuracy, loss, examples;
  // Per class: the examples reported, and the accuracy weighed as the total is (each
  // client's counts scaled by its capped weight over its examples).
  std::vector<uint64_t> class_examples;
  std::vector<double> class_accuracy;
};

// Thread-safe.
class EvalBook {
 public:
  EvalBook(double max_client_weight, Clock* clock)
      : max_client_weight_(max_client_weight), clock_(clock) {}

  // Round `round`'s model, `version`, is asked of `clients` until `deadline`.
  void Ask(uint64_t round, uint64_t version, const std::set<std::string>& clients,
           Clock::time_point deadline);
  // `client` was not asked after all (its event stream had closed).
  void Withdraw(uint64_t round, const std::string& client);
  // Whether `round`'s evaluation was asked (and not yet settled).
  bool Asked(uint64_t round) const;
  // A client's answer. INVALID_ARGUMENT naming what does not add up; FAILED_PRECONDITION
  // when it was not asked (that round and version) or has answered already.
  absl::Status Accept(const std::string& client, const protos::EvalReport& report);
  // Waits until every client asked for `round` has answered, `vanished` says the others
  // are gone, or the deadline passes; then forgets the round and returns what it came to
  // (nullopt when it was never asked).
  std::optional<SettledEval> Settle(
      uint64_t round,
      const std::function<std::set<std::string>(const std::set<std::string>&)>& vanished);

 private:
  struct Answer {
    bool declined = false;
    bool classified = false;
    uint64_t examples = 0;
    double loss = 0;
    uint64_t correct = 0;
    std::vector<uint64_t> class_examples, class_correct;
  };
  struct Pending {
    uint64_t version = 0;
    std::set<std::string> asked;
    std::map<std::string, Answer> answers;
    Clock::time_point deadline;
  };
  SettledEval Sum(const Pending& p) const;

  const double max_client_weight_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::map<uint64_t, Pending> rounds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_FEDERATED_EVAL_H_
