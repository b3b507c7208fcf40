// Federated evaluation's book (see federated_eval.h).
#include "coordinator/federated_eval.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/str.h"
#include "coordinator/round_engine.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::coordinator {
namespace {

constexpr int kMaxClasses = 1 << 16;
// More examples than any client holds: refused (and sums of counts cannot overflow).
constexpr uint64_t kMaxExamples = uint64_t{1} << 40;

}  // namespace

void EvalBook::Ask(uint64_t round, uint64_t version, const std::set<std::string>& clients,
                   Clock::time_point deadline) {
  absl::MutexLock lock(&mu_);
  Pending& p = rounds_[round];
  p.version = version;
  p.asked = clients;
  p.answers.clear();
  p.deadline = deadline;
}

void EvalBook::Withdraw(uint64_t round, const std::string& client) {
  absl::MutexLock lock(&mu_);
  if (auto it = rounds_.find(round); it != rounds_.end() && !it->second.answers.count(client)) {
    it->second.asked.erase(client);
    cv_.SignalAll();
  }
}

bool EvalBook::Asked(uint64_t round) const {
  absl::MutexLock lock(&mu_);
  return rounds_.count(round) > 0;
}

absl::Status EvalBook::Accept(const std::string& client, const protos::EvalReport& r) {
  Answer a;
  if (!r.declined().empty()) {
    a.declined = true;
  } else {
    if (r.examples() == 0) {
      return absl::InvalidArgumentError("an evaluation of 0 examples: send declined instead");
    }
    if (r.examples() > kMaxExamples) {
      return absl::InvalidArgumentError(StrCat("an evaluation of ", r.examples(), " examples"));
    }
    if (!std::isfinite(r.loss())) {
      return absl::InvalidArgumentError(StrCat("an evaluation loss of ", r.loss()));
    }
    if (r.correct() > r.examples()) {
      return absl::InvalidArgumentError(
          StrCat(r.correct(), " correct answers of ", r.examples(), " examples"));
    }
    if (r.class_examples_size() != r.class_correct_size() ||
        r.class_examples_size() > kMaxClasses) {
      return absl::InvalidArgumentError(StrCat("per-class counts of ", r.class_examples_size(),
                                               " and ", r.class_correct_size(), " classes"));
    }
    uint64_t n = 0, correct = 0;
    for (int i = 0; i < r.class_examples_size(); ++i) {
      if (r.class_examples(i) > r.examples()) {
        return absl::InvalidArgumentError(
            StrCat("class ", i, ": ", r.class_examples(i), " examples of ", r.examples()));
      }
      if (r.class_correct(i) > r.class_examples(i)) {
        return absl::InvalidArgumentError(
            StrCat("class ", i, ": ", r.class_correct(i), " correct of ", r.class_examples(i)));
      }
      n += r.class_examples(i);
      correct += r.class_correct(i);
    }
    if (r.class_examples_size() > 0 && (n != r.examples() || correct != r.correct())) {
      return absl::InvalidArgumentError(StrCat("per-class counts add up to ", n, " examples and ",
                                               correct, " correct, the totals say ", r.examples(),
                                               " and ", r.correct()));
    }
    if (!r.classified() && (r.correct() > 0 || r.class_examples_size() > 0)) {
      return absl::InvalidArgumentError("correct answers counted for float targets");
    }
    a.classified = r.classified();
    a.examples = r.examples();
    a.loss = r.loss();
    a.correct = r.correct();
    a.class_examples.assign(r.class_examples().begin(), r.class_examples().end());
    a.class_correct.assign(r.class_correct().begin(), r.class_correct().end());
  }
  absl::MutexLock lock(&mu_);
  auto it = rounds_.find(r.round());
  if (it == rounds_.end() || it->second.asked.count(client) == 0) {
    return absl::FailedPreconditionError(
        StrCat("client ", client, " was not asked to evaluate round ", r.round()));
  }
  Pending& p = it->second;
  if (r.model_version() != p.version) {
    return absl::FailedPreconditionError(StrCat("round ", r.round(), "'s model is version ",
                                                p.version, ", not ", r.model_version()));
  }
  if (!p.answers.emplace(client, std::move(a)).second) {
    return absl::FailedPreconditionError(
        StrCat("client ", client, " has evaluated round ", r.round(), " already"));
  }
  cv_.SignalAll();
  return absl::OkStatus();
}

SettledEval EvalBook::Sum(const Pending& p) const {
  SettledEval s;
  FederatedEval& t = s.total;
  t.asked = static_cast<int>(p.asked.size());
  std::map<std::string, uint64_t> samples;
  bool classes = false;
  for (const auto& [client, a] : p.answers) {
    if (a.declined) {
      ++t.declined;
      continue;
    }
    ++t.clients;
    t.examples += a.examples;
    samples[client] = a.examples;
    classes = classes || a.classified;
    if (a.class_examples.size() > s.class_examples.size()) {
      s.class_examples.resize(a.class_examples.size());
    }
    for (size_t i = 0; i < a.class_examples.size(); ++i) s.class_examples[i] += a.class_examples[i];
  }
  t.missing = t.asked - t.clients - t.declined;
  if (t.clients == 0) return s;
  // FedAvg's weights: examples, none above the cap's share. A client's examples and its
  // answers count scaled alike (weight / examples), per class too.
  const std::map<std::string, double> w = CappedWeights(samples, max_client_weight_);
  double total = 0, loss = 0, accuracy = 0;
  std::vector<double> class_seen(s.class_examples.size()), class_right(s.class_examples.size());
  for (const auto& [client, weight] : w) {
    const Answer& a = p.answers.at(client);
    const double acc = static_cast<double>(a.correct) / static_cast<double>(a.examples);
    const double scale = weight / static_cast<double>(a.examples);
    total += weight;
    loss += weight * a.loss;
    accuracy += weight * acc;
    s.loss[client] = a.loss;
    s.examples[client] = static_cast<double>(a.examples);
    if (a.classified) s.accuracy[client] = acc;
    for (size_t i = 0; i < a.class_examples.size(); ++i) {
      class_seen[i] += scale * static_cast<double>(a.class_examples[i]);
      class_right[i] += scale * static_cast<double>(a.class_correct[i]);
    }
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  t.loss = total > 0 ? loss / total : nan;
  t.accuracy = classes && total > 0 ? accuracy / total : nan;
  for (size_t i = 0; i < class_seen.size(); ++i) {
    s.class_accuracy.push_back(class_seen[i] > 0 ? class_right[i] / class_seen[i] : nan);
  }
  return s;
}

std::optional<SettledEval> EvalBook::Settle(
    uint64_t round,
    const std::function<std::set<std::string>(const std::set<std::string>&)>& vanished) {
  absl::MutexLock lock(&mu_);
  for (;;) {
    auto it = rounds_.find(round);
    if (it == rounds_.end()) return std::nullopt;
    Pending& p = it->second;
    std::set<std::string> waiting;
    for (const std::string& c : p.asked) {
      if (p.answers.count(c) == 0) waiting.insert(c);
    }
    if (!waiting.empty() && clock_->Now() < p.deadline) {
      // Clients that are gone will not answer: the lock is let go while asking.
      mu_.Unlock();
      const std::set<std::string> gone = vanished(waiting);
      mu_.Lock();
      if (gone.size() < waiting.size()) {
        clock_->WaitUntil(&cv_, &mu_,
                          std::min(p.deadline, clock_->Now() + std::chrono::milliseconds(100)));
        continue;
      }
    }
    SettledEval s = Sum(rounds_.at(round));
    rounds_.erase(round);
    return s;
  }
}

}  // namespace fedlgc::coordinator
