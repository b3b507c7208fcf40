// What the coordinator is doing right now, for people and tools that follow a run:
// written to <state_dir>/progress.json (atomically, at most every 250 ms, only when
// something changed). fedlgc-sim draws its live line and bounds its wait for clients
// from it.
//
//   {"state": "starting" | "waiting" | "round" | "done", "round": 5, "rounds": 30, "committed": 4,
//    "connected": 8, "needed": 8, "waiting_seconds": 0.0, "participants": 8,
//    "downloaded": 8, "uploading": 2, "uploaded": 3, "down_bytes": 500000,
//    "up_bytes": 300000, "round_seconds": 3.2,
//    "clients": {"client-0": {"down": 62000, "downloaded": true, "up": 107000,
//                             "uploaded": true}, ...}}
//
// "waiting": too few clients connected to open the round (waiting_seconds says for how
// long; the coordinator's own start does not count). A participant is "downloaded" once it has fetched a model (whole or as deltas)
// in this round, "uploading" from its first accepted chunk and "uploaded" once every
// chunk of its update is held; one that has downloaded and is not uploading is training.
// The per-client map is left out past 64 participants, to keep the file small. Only
// participants are counted: with --fraction < 1, a client that is not asked but downloads
// anyway adds to the round's downlink total and not to these.
#ifndef FEDLGC_COORDINATOR_PROGRESS_H_
#define FEDLGC_COORDINATOR_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/clock.h"

namespace fedlgc::coordinator {

// Thread-safe: the service's reactors report traffic, the round loop the rest.
class Progress final {
 public:
  static constexpr size_t kMaxListedClients = 64;

  // `clock` (not owned): what waiting and round times are read from.
  Progress(uint64_t rounds, core::Clock* clock)
      : rounds_(rounds), clock_(clock), waiting_since_(clock->Now()), round_start_(clock->Now()) {}

  // Too few clients to open the next round (`connected` of `needed`).
  void Waiting(size_t connected, size_t needed);
  void StartRound(uint64_t round, const std::vector<std::string>& participants);
  // Model bytes sent to `client`; `complete` when its download finished.
  void Downloaded(const std::string& client, uint64_t bytes, bool complete);
  // An accepted chunk of `bytes`; `complete` when the update now has every chunk.
  void Uploaded(const std::string& client, uint64_t bytes, bool complete);
  void Committed(uint64_t round);
  void Done();

  // Each client's bytes since they were last taken: uplink (accepted chunks) and downlink,
  // the open round's participants' and anyone else's (a client's evaluation download
  // after a commit, which the next round's start reuses), so that they add up to the
  // round's totals. Taken by the round's report; transfers after it count in the next.
  std::map<std::string, std::pair<uint64_t, uint64_t>> TakeTraffic();
  // Forgets what was carried (a process's first round counts from its opening).
  void ForgetCarried();

  std::string ToJson() const;
  // Writes `path` when something changed since the last write and at least `every` has
  // passed (always when forced).
  absl::Status WriteIfDue(const std::string& path,
                          std::chrono::milliseconds every = std::chrono::milliseconds(250),
                          bool force = false);

 private:
  using Clock = core::Clock;
  struct ClientProgress {
    uint64_t down = 0, up = 0;
    bool downloaded = false, uploaded = false;
  };

  enum class State { kStarting, kWaiting, kRound, kDone };
  static const char* Name(State s);

  const uint64_t rounds_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kStarting;
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t committed_ ABSL_GUARDED_BY(mu_) = 0;
  size_t connected_ ABSL_GUARDED_BY(mu_) = 0;
  size_t needed_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::time_point waiting_since_ ABSL_GUARDED_BY(mu_);
  Clock::time_point round_start_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, ClientProgress> clients_ ABSL_GUARDED_BY(mu_);  // the participants
  // Bytes not in clients_ for the next TakeTraffic: other clients', and anyone's once the
  // round's were taken (taken_).
  std::map<std::string, std::pair<uint64_t, uint64_t>> carried_ ABSL_GUARDED_BY(mu_);
  bool taken_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::time_point last_write_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_PROGRESS_H_
