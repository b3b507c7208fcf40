// Who belongs to the job: the clients that joined, with their sample counts (their
// weights), and the ones barred from the rest of it (quarantined). Both survive restarts
// in the checkpoint (EngineState::clients and ::quarantined).
//
// Thread-safe. The round engine reads it while holding its own lock (lock order: engine,
// then roster); nothing here calls the engine.
#ifndef FEDLGC_COORDINATOR_ROSTER_H_
#define FEDLGC_COORDINATOR_ROSTER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace fedlgc::coordinator {

class Roster {
 public:
  Roster(std::map<std::string, uint64_t> clients, std::map<std::string, std::string> quarantined)
      : clients_(std::move(clients)), quarantined_(std::move(quarantined)) {}
  Roster(const Roster&) = delete;
  Roster& operator=(const Roster&) = delete;

  // A client joined with `num_samples` examples (a later Join replaces the count).
  void Register(const std::string& client_id, uint64_t num_samples);
  // The sample counts of the clients registered, added up.
  uint64_t RegisteredSamples() const;
  // The sample counts of `clients`, 0 for one that never joined.
  std::map<std::string, uint64_t> SamplesOf(const std::set<std::string>& clients) const;
  // Every client that joined, with its sample count.
  std::map<std::string, uint64_t> Clients() const;
  size_t size() const;

  // Bars a client from the rest of the job: its chunks are refused (quarantined) from now
  // on, and the checkpoint keeps it barred.
  void Quarantine(const std::string& client_id, const std::string& why);
  bool IsQuarantined(const std::string& client_id) const;
  // Why `client_id` is barred; nullopt when it is not.
  std::optional<std::string> QuarantineReason(const std::string& client_id) const;
  std::map<std::string, std::string> Quarantined() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, uint64_t> clients_ ABSL_GUARDED_BY(mu_);         // id -> samples
  std::map<std::string, std::string> quarantined_ ABSL_GUARDED_BY(mu_);  // id -> why
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_ROSTER_H_
