// The LGC autoencoder's trainer thread (see ae_trainer.h).
#include "modes/lgc/ae_trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "base/log.h"

namespace fedlgc::modes {

AeTrainer::AeTrainer(Options options, StepFn step, SnapshotFn snapshot)
    : options_(options),
      step_(std::move(step)),
      snapshot_fn_(std::move(snapshot)),
      steps_(options.first_step) {}

AeTrainer::~AeTrainer() { Stop(); }

void AeTrainer::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void AeTrainer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void AeTrainer::Enqueue(uint64_t round, std::vector<autoencoder::Sample> batch) {
  absl::MutexLock lock(&mu_);
  pending_.push_back({round, std::move(batch)});
}

AeTrainer::Progress AeTrainer::State() const {
  absl::MutexLock lock(&mu_);
  Progress p;
  p.status = status_;
  p.backlog = static_cast<int64_t>(pending_.size()) + (busy_ ? 1 : 0);
  p.steps = steps_;
  p.trained_round = last_trained_round_;
  p.reconstruction = last_reconstruction_;
  p.similarity = last_similarity_;
  return p;
}

void AeTrainer::Await() const {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](const AeTrainer* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
        return t->IdleLocked() || !t->status_.ok() || t->stop_;
      },
      this));
}

void AeTrainer::TakeSnapshot() {
  // Only the trainer's thread moves steps_, and this runs on it or while it is not
  // running: the steps read after the weights are theirs.
  std::string weights = snapshot_fn_();
  absl::MutexLock lock(&mu_);
  snapshot_.weights = std::move(weights);
  snapshot_.steps = steps_;
}

AeTrainer::Snapshot AeTrainer::LastSnapshot() const {
  absl::MutexLock lock(&mu_);
  return snapshot_;
}

void AeTrainer::Loop() {
  // Below the round loop, the RPC threads and the evaluation (--ae-nice, 10 by default;
  // this thread alone on Linux, and libtorch runs its operators on the calling thread at
  // --torch-threads 1): on a coordinator short of cores the training takes what they
  // leave.
  setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), options_.nice);
  for (;;) {
    Batch batch;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](AeTrainer* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
            return t->stop_ || !t->pending_.empty();
          },
          this));
      if (stop_) return;
      batch = std::move(pending_.front());
      pending_.pop_front();
      busy_ = true;
    }
    absl::Status st = TrainBatch(batch.round, std::move(batch.samples));
    absl::MutexLock lock(&mu_);
    busy_ = false;
    if (!st.ok() && status_.ok()) {
      log::Warning("coordinator", "LGC: the autoencoder's training failed: %s",
                   std::string(st.message()).c_str());
      status_ = st;
    }
  }
}

absl::Status AeTrainer::TrainBatch(uint64_t round, std::vector<autoencoder::Sample> samples) {
  replay_.push_front(std::move(samples));
  if (replay_.size() > std::max<size_t>(options_.replay, 1)) replay_.pop_back();
  autoencoder::Losses first;
  for (uint32_t s = 0; s < options_.steps_per_batch; ++s) {
    uint64_t step;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return absl::OkStatus();
      step = steps_++;
    }
    // Without the lock: the step takes the autoencoder's (the lock order, ae_trainer.h).
    auto losses = step_(replay_[s % replay_.size()], step);
    if (!losses.ok()) return losses.status();
    if (s == 0) first = *losses;  // on this round's batch before training on it
  }
  TakeSnapshot();
  absl::MutexLock lock(&mu_);
  last_reconstruction_ = first.reconstruction;
  last_similarity_ = first.similarity;
  last_trained_round_ = round;
  return absl::OkStatus();
}

}  // namespace fedlgc::modes
