// The recorder of committed rounds (see round_recorder.h).
#include "coordinator/round_recorder.h"

#include <cmath>

#include "base/file.h"
#include "base/log.h"
#include "base/str.h"
#include "core/dataset.h"
#include "core/model.h"
#include "monitoring/metrics.h"

namespace fedlgc::coordinator {

RoundRecorder::~RoundRecorder() {
  if (!thread_.joinable()) return;
  Drain();  // a committed round's line is worth its evaluation
  {
    absl::MutexLock lock(&queue_mu_);
    stop_ = true;
  }
  thread_.join();
}

void RoundRecorder::Start() {
  absl::MutexLock lock(&queue_mu_);
  started_ = true;
  thread_ = std::thread([this] { Loop(); });
}

void RoundRecorder::Later(RoundReport rep, std::vector<float> model, bool evaluate,
                          uint64_t model_version) {
  absl::MutexLock lock(&queue_mu_);
  queue_mu_.Await(absl::Condition(
      +[](RoundRecorder* r)
           ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->queue_mu_) { return r->queue_.size() < 2; },
      this));
  queue_.push_back({std::move(rep), std::move(model), evaluate, model_version});
}

void RoundRecorder::Drain() {
  absl::MutexLock lock(&queue_mu_);
  if (!started_) return;
  queue_mu_.Await(absl::Condition(
      +[](RoundRecorder* r)
           ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->queue_mu_) { return r->queue_.empty(); },
      this));
}

std::vector<RoundReport> RoundRecorder::reports() const {
  absl::MutexLock lock(&mu_);
  return reports_;
}

double RoundRecorder::last_accuracy() const {
  absl::MutexLock lock(&mu_);
  return last_accuracy_;
}

void RoundRecorder::Loop() {
  for (;;) {
    Pending next;
    {
      absl::MutexLock lock(&queue_mu_);
      queue_mu_.Await(absl::Condition(
          +[](RoundRecorder* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->queue_mu_) {
            return r->stop_ || !r->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, nothing left
      next = std::move(queue_.front());
    }
    if (next.evaluate && parts_.eval_book != nullptr) SettleFederatedEval(&next.report);
    if (next.evaluate && !next.model.empty() && parts_.test_data != nullptr) {
      if (absl::Status st = Evaluate(next.model, &next.report); !st.ok()) {
        log::Warning("coordinator", "round %llu: evaluation: %s",
                     static_cast<unsigned long long>(next.report.round), st.ToString().c_str());
      }
    }
    if (parts_.keeper != nullptr && !next.model.empty()) {
      // A model that cannot be kept or exported (a full disk) costs its files, not the job.
      if (absl::Status st = parts_.keeper->Keep(next.model, next.model_version, &next.report);
          !st.ok()) {
        log::Warning("coordinator", "round %llu: keeping its model: %s",
                     static_cast<unsigned long long>(next.report.round), st.ToString().c_str());
      }
    }
    Record(std::move(next.report));
    absl::MutexLock lock(&queue_mu_);
    queue_.pop_front();
  }
}

absl::Status RoundRecorder::Evaluate(std::span<const float> model, RoundReport* rep) {
  const auto t0 = parts_.clock->Now();
  if (absl::Status st = parts_.model->SetFlat(model); !st.ok()) return st;
  auto ev = parts_.model->Evaluate(*parts_.test_data);
  if (!ev.ok()) return ev.status();
  rep->figures["eval_seconds"] = core::SecondsSince(*parts_.clock, t0);
  rep->accuracy = ev->accuracy;
  rep->loss = ev->loss;
  parts_.metrics->SetGlobalEval(ev->accuracy, ev->loss);
  absl::MutexLock lock(&mu_);
  last_accuracy_ = ev->accuracy;
  return absl::OkStatus();
}

void RoundRecorder::SettleFederatedEval(RoundReport* rep) {
  const auto t0 = parts_.clock->Now();
  auto settled = parts_.eval_book->Settle(rep->round, parts_.gone);
  if (!settled.has_value()) return;
  const FederatedEval& t = settled->total;
  rep->federated_eval = t;
  rep->figures["federated_eval_seconds"] = core::SecondsSince(*parts_.clock, t0);
  rep->per_client["eval_examples"] = settled->examples;
  rep->per_client["eval_loss"] = settled->loss;
  if (!settled->accuracy.empty()) rep->per_client["eval_accuracy"] = settled->accuracy;
  for (size_t i = 0; i < settled->class_accuracy.size(); ++i) {
    rep->figures[StrCat("federated_class_accuracy_", i)] = settled->class_accuracy[i];
  }
  if (t.clients > 0) {  // the gauges before the counters that say they are new
    parts_.metrics->SetFederatedEval(t.accuracy, t.loss);
    if (parts_.test_data == nullptr) {  // JobDone's final accuracy
      absl::MutexLock lock(&mu_);
      last_accuracy_ = t.accuracy;
    }
  }
  parts_.metrics->AddEvalAnswers("reported", t.clients);
  parts_.metrics->AddEvalAnswers("declined", t.declined);
  parts_.metrics->AddEvalAnswers("missing", t.missing);
  log::Info("coordinator",
            "round %llu: %d of %d clients evaluated it (%d declined, %d missing): %llu examples, "
            "accuracy %.4f, loss %.4f",
            static_cast<unsigned long long>(rep->round), t.clients, t.asked, t.declined, t.missing,
            static_cast<unsigned long long>(t.examples), t.accuracy, t.loss);
}

std::vector<monitoring::Scalar> RoundScalars(const RoundReport& rep) {
  std::vector<monitoring::Scalar> out;
  auto add = [&out](std::string tag, double v) {
    if (std::isfinite(v)) out.push_back({std::move(tag), v});
  };
  if (rep.accuracy >= 0) add("accuracy/server", rep.accuracy);
  if (rep.loss >= 0) add("loss/server", rep.loss);
  if (rep.federated_eval.has_value() && rep.federated_eval->clients > 0) {
    if (rep.federated_eval->accuracy >= 0) add("accuracy/federated", rep.federated_eval->accuracy);
    if (rep.federated_eval->loss >= 0) add("loss/federated", rep.federated_eval->loss);
  }
  add("bytes/uplink", static_cast<double>(rep.uplink_bytes));
  add("bytes/downlink", static_cast<double>(rep.downlink_bytes));
  if (rep.uplink_bytes > 0 && rep.raw_uplink_bytes > 0) {
    add("ratio/uplink", static_cast<double>(rep.raw_uplink_bytes) / rep.uplink_bytes);
  }
  if (rep.downlink_bytes > 0 && rep.raw_downlink_bytes > 0) {
    add("ratio/downlink", static_cast<double>(rep.raw_downlink_bytes) / rep.downlink_bytes);
  }
  add("round/participants", rep.participants);
  add("round/stragglers", rep.stragglers);
  add("round/seconds", rep.seconds);
  for (const auto& [name, v] : rep.figures) {
    add(name == "dp_epsilon" ? std::string("privacy/epsilon") : "mode/" + name, v);
  }
  return out;
}

void RoundRecorder::Record(RoundReport rep) {
  // One JSON line per round next to the checkpoint, for fedlgc-sim and for people.
  if (absl::Status st = AppendLine(parts_.state_dir + "/rounds.jsonl", ToJson(rep)); !st.ok()) {
    log::Warning("coordinator", "%s", st.ToString().c_str());
  }
  if (parts_.tensorboard != nullptr) {
    if (absl::Status st =
            parts_.tensorboard->Write(static_cast<int64_t>(rep.round), RoundScalars(rep));
        !st.ok()) {
      // A full disk costs the TensorBoard file, not the job: said once, then no more.
      log::Warning("coordinator", "%s; no more TensorBoard scalars", st.ToString().c_str());
      parts_.tensorboard.reset();
    }
  }
  log::Info("coordinator",
            "round %llu committed: %d participants, accuracy %.4f, %llu uplink bytes",
            static_cast<unsigned long long>(rep.round), rep.participants, rep.accuracy,
            static_cast<unsigned long long>(rep.uplink_bytes));
  absl::MutexLock lock(&mu_);
  reports_.push_back(std::move(rep));
}

}  // namespace fedlgc::coordinator
