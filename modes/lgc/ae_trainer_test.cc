// The LGC autoencoder's trainer thread (modes/lgc/ae_trainer.cc) against a fake
// autoencoder: the batches train in order over the replay buffer, Stop ends the batch in
// training after its step and trains nothing queued, State is idle only with nothing
// queued or training, and the first failure is reported while training goes on.
#include "modes/lgc/ae_trainer.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace fedlgc::modes {
namespace {

// Long enough for any machine; a test that reaches it has failed.
constexpr absl::Duration kDeadline = absl::Seconds(30);

// A batch named `name`: one sample whose client is the name.
std::vector<autoencoder::Sample> Batch(const std::string& name) {
  return {{name, {1.0f, 2.0f}, {0.0f, 0.0f}}};
}

// Stands in for the autoencoder. Each step is recorded as (the batch it was given, its
// number) and returns reconstruction = the step's number, similarity = 0.5. The steps of
// a batch named with Fail fail; the first step on a batch named with Hold tells
// WaitEntered and waits for Release. Fail and Hold are set before the trainer starts.
class FakeAutoencoder {
 public:
  using Call = std::pair<std::string, uint64_t>;

  void Fail(const std::string& name) { fail_.push_back(name); }
  void Hold(const std::string& name) { holds_[name] = std::make_unique<Gate>(); }
  // Until the trainer's first step on `name` has begun.
  bool WaitEntered(const std::string& name) {
    return holds_.at(name)->entered.WaitForNotificationWithTimeout(kDeadline);
  }
  void Release(const std::string& name) {
    Gate& g = *holds_.at(name);
    if (!g.release.HasBeenNotified()) g.release.Notify();
  }

  AeTrainer::StepFn StepFn() {
    return [this](const std::vector<autoencoder::Sample>& batch,
                  uint64_t step) -> absl::StatusOr<autoencoder::Losses> {
      const std::string name = batch.front().client;
      bool first = false;
      {
        absl::MutexLock lock(&mu_);
        first = seen_.insert(name).second;
        calls_.push_back({name, step});
      }
      if (auto h = holds_.find(name); first && h != holds_.end()) {
        h->second->entered.Notify();
        h->second->release.WaitForNotificationWithTimeout(kDeadline);
      }
      for (const std::string& f : fail_) {
        if (f == name) return absl::InternalError(name + " failed");
      }
      autoencoder::Losses l;
      l.reconstruction = static_cast<double>(step);
      l.similarity = 0.5;
      return l;
    };
  }
  // The weights name how many steps the fake has taken.
  AeTrainer::SnapshotFn SnapshotFn() {
    return [this] {
      absl::MutexLock lock(&mu_);
      ++snapshots_;
      return "after " + std::to_string(calls_.size()) + " steps";
    };
  }

  std::vector<Call> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  int snapshots() const {
    absl::MutexLock lock(&mu_);
    return snapshots_;
  }

 private:
  struct Gate {
    absl::Notification entered, release;
  };
  std::vector<std::string> fail_;
  std::map<std::string, std::unique_ptr<Gate>> holds_;
  mutable absl::Mutex mu_;
  std::set<std::string> seen_ ABSL_GUARDED_BY(mu_);
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  int snapshots_ ABSL_GUARDED_BY(mu_) = 0;
};

// trainer.Await() under the deadline: false when it did not return by then (the held
// batches are then released, so that it does).
bool AwaitWithin(AeTrainer& trainer, FakeAutoencoder& fake,
                 const std::vector<std::string>& held = {}) {
  absl::Notification done;
  std::thread waiter([&] {
    trainer.Await();
    done.Notify();
  });
  const bool in_time = done.WaitForNotificationWithTimeout(kDeadline);
  if (!in_time) {
    for (const std::string& h : held) fake.Release(h);
  }
  waiter.join();
  return in_time;
}

AeTrainer::Options Steps(uint32_t steps_per_batch, size_t replay, uint64_t first_step = 0) {
  AeTrainer::Options o;
  o.steps_per_batch = steps_per_batch;
  o.replay = replay;
  o.first_step = first_step;
  return o;
}

// Each batch joins the front of the replay buffer (two batches here), then step s trains
// on the buffer's (s mod size)-th batch: a, then b over b and a, then c over c and b (a
// has left). Steps are numbered on from a restored state's; each batch leaves a snapshot.
TEST(AeTrainer, TrainsTheBatchesInOrderOverTheReplayBuffer) {
  FakeAutoencoder fake;
  AeTrainer trainer(Steps(3, 2, 5), fake.StepFn(), fake.SnapshotFn());
  trainer.Enqueue(1, Batch("a"));
  trainer.Enqueue(2, Batch("b"));
  trainer.Enqueue(3, Batch("c"));
  trainer.Start();
  ASSERT_TRUE(AwaitWithin(trainer, fake));
  const std::vector<FakeAutoencoder::Call> want = {
      {"a", 5}, {"a", 6}, {"a", 7}, {"b", 8}, {"a", 9}, {"b", 10}, {"c", 11}, {"b", 12}, {"c", 13}};
  EXPECT_EQ(fake.calls(), want);
  const AeTrainer::Progress p = trainer.State();
  EXPECT_TRUE(p.status.ok()) << p.status;
  EXPECT_TRUE(p.idle());
  EXPECT_EQ(p.backlog, 0);
  EXPECT_EQ(p.steps, 14u);
  EXPECT_EQ(p.trained_round, 3u);
  EXPECT_EQ(p.reconstruction, 11) << "c's losses on its first step";
  EXPECT_EQ(p.similarity, 0.5);
  EXPECT_EQ(fake.snapshots(), 3);
  const AeTrainer::Snapshot s = trainer.LastSnapshot();
  EXPECT_EQ(s.weights, "after 9 steps");
  EXPECT_EQ(s.steps, 14u);
}

// Before it starts, a snapshot holds the restored steps, and nothing has trained.
TEST(AeTrainer, ASnapshotBeforeStartHoldsTheRestoredSteps) {
  FakeAutoencoder fake;
  AeTrainer trainer(Steps(2, 8, 7), fake.StepFn(), fake.SnapshotFn());
  EXPECT_EQ(trainer.LastSnapshot().steps, 0u);
  EXPECT_EQ(trainer.LastSnapshot().weights, "");
  trainer.TakeSnapshot();
  EXPECT_EQ(trainer.LastSnapshot().weights, "after 0 steps");
  EXPECT_EQ(trainer.LastSnapshot().steps, 7u);
  const AeTrainer::Progress p = trainer.State();
  EXPECT_TRUE(p.idle());
  EXPECT_EQ(p.steps, 7u);
  EXPECT_EQ(p.trained_round, 0u);
  EXPECT_EQ(p.reconstruction, -1);
  EXPECT_EQ(p.similarity, -1);
}

// Idle means nothing queued (started or not) and nothing training. State answers while a
// step runs: the trainer's lock is not held during one.
TEST(AeTrainer, StateIsIdleOnlyWithNothingQueuedOrTraining) {
  FakeAutoencoder fake;
  fake.Hold("a");
  AeTrainer trainer(Steps(1, 8), fake.StepFn(), fake.SnapshotFn());
  EXPECT_TRUE(trainer.State().idle());
  trainer.Enqueue(1, Batch("a"));
  EXPECT_FALSE(trainer.State().idle()) << "queued, not started";
  EXPECT_EQ(trainer.State().backlog, 1);
  trainer.Start();
  ASSERT_TRUE(fake.WaitEntered("a"));
  AeTrainer::Progress p = trainer.State();
  EXPECT_FALSE(p.idle()) << "a is training";
  EXPECT_EQ(p.backlog, 1);
  EXPECT_EQ(p.steps, 1u);
  EXPECT_EQ(p.trained_round, 0u);
  trainer.Enqueue(2, Batch("b"));
  EXPECT_EQ(trainer.State().backlog, 2);
  fake.Release("a");
  ASSERT_TRUE(AwaitWithin(trainer, fake));
  p = trainer.State();
  EXPECT_TRUE(p.idle());
  EXPECT_EQ(p.backlog, 0);
  EXPECT_EQ(p.trained_round, 2u);
  EXPECT_EQ(p.steps, 2u);
}

// Stop lets the step in progress finish and joins the thread: the batch in training takes
// no more steps and leaves no snapshot or losses, and the queued one never trains (still
// counted). Await returns once Stop is called. Stop again does nothing.
TEST(AeTrainer, StopFinishesTheStepInProgressAndTrainsNothingMore) {
  FakeAutoencoder fake;
  fake.Hold("a");
  AeTrainer trainer(Steps(3, 8), fake.StepFn(), fake.SnapshotFn());
  trainer.Enqueue(1, Batch("a"));
  trainer.Enqueue(2, Batch("b"));
  trainer.Start();
  ASSERT_TRUE(fake.WaitEntered("a"));
  absl::Notification stopped;
  std::thread stopper([&] {
    trainer.Stop();
    stopped.Notify();
  });
  // Neither idle nor failed: Await returns because Stop was called.
  EXPECT_TRUE(AwaitWithin(trainer, fake, {"a"}));
  EXPECT_FALSE(stopped.HasBeenNotified()) << "Stop returned during a step";
  fake.Release("a");
  EXPECT_TRUE(stopped.WaitForNotificationWithTimeout(kDeadline));
  stopper.join();
  const std::vector<FakeAutoencoder::Call> want = {{"a", 0}};
  EXPECT_EQ(fake.calls(), want);
  EXPECT_EQ(fake.snapshots(), 0);
  const AeTrainer::Progress p = trainer.State();
  EXPECT_TRUE(p.status.ok()) << p.status;
  EXPECT_EQ(p.backlog, 1) << "b stays queued";
  EXPECT_FALSE(p.idle());
  EXPECT_EQ(p.steps, 1u);
  EXPECT_EQ(p.trained_round, 0u);
  EXPECT_EQ(p.reconstruction, -1);
  trainer.Stop();
  EXPECT_EQ(fake.calls(), want);
}

// A failed step ends its batch (no losses, no snapshot) and State reports it; Await
// returns on it without waiting for the backlog. Later batches still train, and a later
// failure does not replace the first.
TEST(AeTrainer, TheFirstFailureIsReportedAndTrainingGoesOn) {
  FakeAutoencoder fake;
  fake.Fail("b");
  fake.Fail("d");
  fake.Hold("c");
  fake.Hold("e");
  AeTrainer trainer(Steps(2, 1), fake.StepFn(), fake.SnapshotFn());
  trainer.Enqueue(1, Batch("a"));
  trainer.Enqueue(2, Batch("b"));
  trainer.Enqueue(3, Batch("c"));
  trainer.Start();
  ASSERT_TRUE(AwaitWithin(trainer, fake, {"c"})) << "c is held: only b's failure ends Await";
  AeTrainer::Progress p = trainer.State();
  EXPECT_EQ(p.status, absl::InternalError("b failed"));
  EXPECT_FALSE(p.idle());
  EXPECT_EQ(p.trained_round, 1u);
  EXPECT_EQ(p.reconstruction, 0) << "a's first step";
  ASSERT_TRUE(fake.WaitEntered("c"));
  trainer.Enqueue(4, Batch("d"));
  trainer.Enqueue(5, Batch("e"));
  fake.Release("c");
  // e's first step begins after c trained and d failed.
  ASSERT_TRUE(fake.WaitEntered("e"));
  p = trainer.State();
  EXPECT_EQ(p.status, absl::InternalError("b failed")) << "the first failure stays";
  EXPECT_EQ(p.trained_round, 3u);
  EXPECT_EQ(p.reconstruction, 3) << "c's first step";
  EXPECT_EQ(p.backlog, 1);
  EXPECT_EQ(p.steps, 7u);
  const std::vector<FakeAutoencoder::Call> want = {{"a", 0}, {"a", 1}, {"b", 2}, {"c", 3},
                                                   {"c", 4}, {"d", 5}, {"e", 6}};
  EXPECT_EQ(fake.calls(), want) << "a failed step ends its batch";
  EXPECT_EQ(fake.snapshots(), 2) << "a's and c's";
  fake.Release("e");
}

}  // namespace
}  // namespace fedlgc::modes
