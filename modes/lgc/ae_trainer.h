// The online training of LGC's autoencoder at the coordinator (docs/lgc.md, train > 0;
// Abrahamyan et al., TNNLS 2021): a thread of its own trains on the batches the round loop
// hands it, so that the round loop never waits for a step. Each batch joins a replay
// buffer of recent rounds' batches (newest first), then the trainer takes a fixed number
// of steps over the buffer and keeps a copy of the weights for the state the coordinator
// saves. It knows the autoencoder only through two callables its owner (LgcAggregator,
// lgc_aggregator.h) gives it: one training step, and the weights' bytes.
#ifndef FEDLGC_MODES_LGC_AE_TRAINER_H_
#define FEDLGC_MODES_LGC_AE_TRAINER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "autoencoder/autoencoder.h"  // torch-free: Sample and Losses

namespace fedlgc::modes {

// Thread-safety: thread-safe. Start, Stop and TakeSnapshot are the owner's (the round
// loop's); Enqueue, State, Await and LastSnapshot may run on any thread.
//
// Lock order: the trainer's lock is a leaf. The trainer calls StepFn and SnapshotFn
// without it, so they may take the owner's locks (LgcAggregator's ae_mu_), and the owner
// may call Enqueue, State and LastSnapshot while holding those. Stop and Await wait for
// the step in progress: neither may be called holding a lock StepFn takes, nor from
// StepFn or SnapshotFn.
class AeTrainer {
 public:
  // One optimizer step on `batch` (Autoencoder::TrainStep), numbered `step`: the losses
  // before it. Runs on the trainer's thread with none of the trainer's locks held, and
  // takes the lock that guards the autoencoder itself.
  using StepFn = std::function<absl::StatusOr<autoencoder::Losses>(
      const std::vector<autoencoder::Sample>& batch, uint64_t step)>;
  // The autoencoder's weights (Autoencoder::Serialize), under the lock that guards it.
  // Runs on the trainer's thread after each batch, or on the owner's in TakeSnapshot.
  using SnapshotFn = std::function<std::string()>;

  struct Options {
    uint32_t steps_per_batch = 20;  // the plan's ae_steps
    size_t replay = 8;              // batches kept for training, the newest included (>= 1)
    int nice = 10;                  // the trainer thread's (--ae-nice)
    uint64_t first_step = 0;        // the steps already taken (a restored state's)
  };

  // Where the training stands, read at one instant.
  struct Progress {
    absl::Status status;  // the first failed batch's (later batches still train)
    int64_t backlog = 0;  // batches queued or training
    uint64_t steps = 0;   // steps begun, first_step included
    // The newest batch that finished its steps: its round, and its losses on the first
    // step (on that batch, before training on it); -1 before any.
    uint64_t trained_round = 0;
    double reconstruction = -1, similarity = -1;
    // Nothing is queued or training.
    bool idle() const { return backlog == 0; }
  };

  // The weights after the newest finished batch (or the last TakeSnapshot) and the steps
  // taken by then: what the coordinator's state saves.
  struct Snapshot {
    std::string weights;
    uint64_t steps = 0;
  };

  // Starts no thread (Start does). `step` and `snapshot` must stay callable until the
  // trainer is stopped or destroyed.
  AeTrainer(Options options, StepFn step, SnapshotFn snapshot);
  // Stops the thread (Stop).
  ~AeTrainer();
  AeTrainer(const AeTrainer&) = delete;
  AeTrainer& operator=(const AeTrainer&) = delete;

  // Starts the trainer's thread (at the options' nice). At most once, before Stop.
  void Start();
  // Stops the thread after the step it is in and joins it. The batch in training takes
  // no more steps and leaves no snapshot or losses; queued batches are never trained
  // (State still counts them). Idempotent; without Start it only keeps Start's thread
  // from training.
  void Stop();

  // Queues a training round's batch (two or more clients' samples on one support) behind
  // the others. Returns at once.
  void Enqueue(uint64_t round, std::vector<autoencoder::Sample> batch);
  Progress State() const;
  // Until the trainer is idle, a batch has failed, or Stop has been called. REQUIRES:
  // started, or nothing queued.
  void Await() const;

  // Copies the weights (SnapshotFn) and the steps taken for LastSnapshot. The trainer
  // does after each batch; the owner does only while the thread is not running (before
  // Start, after Stop).
  void TakeSnapshot();
  Snapshot LastSnapshot() const;

 private:
  struct Batch {
    uint64_t round = 0;
    std::vector<autoencoder::Sample> samples;
  };

  // The thread: each queued batch in turn, until Stop. A failed batch's status is kept
  // (the first) and logged.
  void Loop();
  // The batch joins the replay buffer, then options_.steps_per_batch steps, step s on
  // the buffer's (s mod its size)-th batch, then a snapshot.
  absl::Status TrainBatch(uint64_t round, std::vector<autoencoder::Sample> samples);
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_.empty() && !busy_; }

  const Options options_;
  const StepFn step_;
  const SnapshotFn snapshot_fn_;
  // The thread's alone: recent batches, newest first (not kept across restarts).
  std::deque<std::vector<autoencoder::Sample>> replay_;
  mutable absl::Mutex mu_;
  std::deque<Batch> pending_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // a batch is training
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);  // the first failure
  uint64_t steps_ ABSL_GUARDED_BY(mu_);       // set by the thread alone once started
  double last_reconstruction_ ABSL_GUARDED_BY(mu_) = -1;
  double last_similarity_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t last_trained_round_ ABSL_GUARDED_BY(mu_) = 0;
  Snapshot snapshot_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // the owner's (Start, Stop)
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_LGC_AE_TRAINER_H_
