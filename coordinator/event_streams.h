// The coordinator's event streams as a book (service.h): which client holds an open event
// stream, one per client; when each was last seen (a stream open, or a call that
// progressed); the job's end, which every stream gets, also one opened later; and the
// clients that take the final model. The streams themselves are EventSinks (the service's
// EventsReactor, reactors.h; a fake in tests), which this book pushes events to but does not
// own.
//
// Thread-safe. Lock order: this book's lock -> what Open's callbacks take (the round
// engine's and the driver's locks: the catch-up is computed under it) -> a sink's own lock
// (Push and Close run under it). So a sink's Push and Close, and the engine and the driver,
// must never call back into the book; nothing calls into it with the engine's or a driver's
// lock held. The federated-evaluation book (federated_eval.h) lets go of its lock before it
// asks who vanished (LastSeen), so the two are not ordered.
#ifndef FEDLGC_COORDINATOR_EVENT_STREAMS_H_
#define FEDLGC_COORDINATOR_EVENT_STREAMS_H_

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/clock.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::coordinator {

using Clock = core::Clock;

// What the book needs of one client's event stream. Both calls must be safe from any
// thread, never block on the network and never call into the book (they run under its
// lock).
class EventSink {
 public:
  virtual ~EventSink() = default;
  // Queues an event for the client.
  virtual void Push(const protos::ServerEvent& event) = 0;
  // Ends the stream with `status` (a no-op once it has ended).
  virtual void Close(const absl::Status& status) = 0;
};

class EventStreams {
 public:
  // `clock` (not owned, outlives the book): what Touch and LastSeen read.
  explicit EventStreams(Clock* clock) : clock_(clock) {}
  EventStreams(const EventStreams&) = delete;
  EventStreams& operator=(const EventStreams&) = delete;

  // Registers `stream` as `client`'s event stream, and queues on it, under the book's lock
  // so nothing pushed meanwhile can overtake them: the events `receipts` returns (the
  // client's recent receipts), then JobDone when the job is over, or else the event
  // `round_start` returns (the open round's start, when the client takes part; not called
  // once the job is over). A stream the client already had is closed (CANCELLED) first: a
  // client holds one, and an old one is a broken connection not yet noticed, or someone
  // hoarding. Both callbacks run with the lock held (the lock order above). Returns
  // whether a stream was replaced (the client resumed). `stream` (not owned) stays
  // registered until Unregister or a newer stream replaces it.
  bool Open(const std::string& client, EventSink* stream,
            const std::function<std::vector<protos::ServerEvent>()>& receipts,
            const std::function<std::optional<protos::ServerEvent>()>& round_start)
      ABSL_LOCKS_EXCLUDED(mu_);
  // `stream` of `client` is done; a no-op when a newer stream replaced it. After this
  // returns the book never touches `stream` again.
  void Unregister(const std::string& client, const EventSink* stream) ABSL_LOCKS_EXCLUDED(mu_);

  // Queues `event` on `client`'s stream; false if it has none.
  bool Push(const std::string& client, const protos::ServerEvent& event) ABSL_LOCKS_EXCLUDED(mu_);
  // Sends JobDone (the final model's version, for clients that take it) to everyone
  // connected, and to everyone who connects later (Open).
  void BroadcastDone(uint64_t rounds, float accuracy, uint64_t model_version)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Clients with an open event stream, by id.
  std::vector<std::string> Connected() const ABSL_LOCKS_EXCLUDED(mu_);
  // A client's call arrived or progressed (a chunk, a report, a download) now.
  void Touch(const std::string& client) ABSL_LOCKS_EXCLUDED(mu_);
  // Now when the client has an open event stream; else when it last called (Touch); the
  // epoch when never.
  Clock::time_point LastSeen(const std::string& client) const ABSL_LOCKS_EXCLUDED(mu_);

  // The client said in Join it downloads the final model when the job ends.
  void AddFinalModelTaker(const std::string& client) ABSL_LOCKS_EXCLUDED(mu_);
  // The clients that said so.
  std::set<std::string> FinalModelTakers() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Clock* const clock_;
  mutable absl::Mutex mu_;
  std::map<std::string, EventSink*> streams_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Clock::time_point> last_call_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  protos::ServerEvent done_event_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> final_takers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_EVENT_STREAMS_H_
