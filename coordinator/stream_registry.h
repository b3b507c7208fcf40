// Bounds on the calls a client can hold open at the coordinator (docs/protocol.md#limits):
// uploads, SGP shares and downloads, per client and in all; a call that makes no progress
// (no message read or written) for the idle timeout is cancelled, so a client that stops
// reading a download or drips an upload cannot pin the coordinator's memory. Event
// streams are bounded apart (one per client, service.h).
//
// Thread-safe. A watchdog thread checks for idle calls every second.
#ifndef FEDLGC_COORDINATOR_STREAM_REGISTRY_H_
#define FEDLGC_COORDINATOR_STREAM_REGISTRY_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/clock.h"

namespace grpc {
class CallbackServerContext;
}

namespace fedlgc::coordinator {

struct StreamLimits {
  uint32_t per_client = 8;     // open uploads, shares and downloads of one client
  uint32_t total = 4096;       // of all clients
  double idle_timeout_s = 120;  // without a message read or written

  absl::Status Validate() const;
};

// One open call, shared by its reactor and the registry.
class StreamTicket {
 public:
  // A message was read or written: the call is making progress.
  void Progress();
  // The call is done (the reactor's OnDone): the registry forgets it, and never touches
  // its context again. Waits for a cancellation running on another thread.
  void Done();
  // Cancelled for idleness (the reactor may say so in its status).
  bool idle_cancelled() const;

 private:
  friend class StreamRegistry;
  using Clock = core::Clock;
  StreamTicket(class StreamRegistry* registry, std::string client,
               grpc::CallbackServerContext* ctx);

  class StreamRegistry* const registry_;
  const std::string client_;
  mutable absl::Mutex mu_;
  grpc::CallbackServerContext* ctx_ ABSL_GUARDED_BY(mu_);
  Clock::time_point last_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelling_ ABSL_GUARDED_BY(mu_) = false;
  bool idle_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::thread::id cancelling_thread_ ABSL_GUARDED_BY(mu_);
};

class StreamRegistry {
 public:
  using Clock = core::Clock;

  // `clock` (not owned): what a call's last progress and idleness are read from.
  // `watchdog`: run the idle check every second on a thread of its own (tests call
  // CancelIdle themselves).
  // `observe` (when given) hears the number of open calls whenever it changes, and
  // `on_idle` each idle call (with 1) just before it is cancelled, so that whoever sees
  // the cancel finds it counted.
  StreamRegistry(StreamLimits limits, Clock* clock, bool watchdog = true,
                 std::function<void(size_t)> observe = nullptr,
                 std::function<void(int)> on_idle = nullptr);
  ~StreamRegistry();
  StreamRegistry(const StreamRegistry&) = delete;
  StreamRegistry& operator=(const StreamRegistry&) = delete;

  // Admits a call of `client`; RESOURCE_EXHAUSTED when the client or the coordinator is at
  // its cap. The reactor calls Progress and Done on the ticket.
  absl::StatusOr<std::shared_ptr<StreamTicket>> Open(const std::string& client,
                                                     grpc::CallbackServerContext* ctx);
  // Cancels the calls idle for longer than the timeout at the clock's now; returns how
  // many.
  int CancelIdle();

  size_t open() const;
  size_t open_for(const std::string& client) const;
  uint64_t idle_cancelled_total() const;

 private:
  friend class StreamTicket;
  void Forget(StreamTicket* ticket);
  void Watch();

  const StreamLimits limits_;
  Clock* const clock_;
  const std::function<void(size_t)> observe_;
  const std::function<void(int)> on_idle_;
  mutable absl::Mutex mu_;
  std::map<StreamTicket*, std::shared_ptr<StreamTicket>> open_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint32_t> per_client_ ABSL_GUARDED_BY(mu_);
  uint64_t idle_cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watchdog_;
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_STREAM_REGISTRY_H_
