// Per-client call limits and the idle watchdog (see stream_registry.h).
#include "coordinator/stream_registry.h"

#include <grpcpp/grpcpp.h>

#include <vector>

#include "base/log.h"
#include "base/str.h"

namespace fedlgc::coordinator {

absl::Status StreamLimits::Validate() const {
  if (per_client == 0 || total < per_client) {
    return absl::InvalidArgumentError(
        "--max-streams-per-client must be >= 1 and --max-streams >= it");
  }
  if (!(idle_timeout_s > 0)) return absl::InvalidArgumentError("--stream-idle-timeout must be > 0");
  return absl::OkStatus();
}

StreamTicket::StreamTicket(StreamRegistry* registry, std::string client,
                           grpc::CallbackServerContext* ctx)
    : registry_(registry), client_(std::move(client)), ctx_(ctx), last_(registry->clock_->Now()) {}

void StreamTicket::Progress() {
  const Clock::time_point now = registry_->clock_->Now();
  absl::MutexLock lock(&mu_);
  last_ = now;
}

void StreamTicket::Done() {
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
    ctx_ = nullptr;
    // A cancellation on another thread still uses the context: the call must outlive it.
    // On the watchdog's own thread (gRPC ran this call's end inside TryCancel) it is done.
    if (cancelling_ && cancelling_thread_ != std::this_thread::get_id()) {
      mu_.Await(absl::Condition(
          +[](bool* cancelling) { return !*cancelling; }, &cancelling_));
    }
  }
  registry_->Forget(this);
}

bool StreamTicket::idle_cancelled() const {
  absl::MutexLock lock(&mu_);
  return idle_cancelled_;
}

StreamRegistry::StreamRegistry(StreamLimits limits, Clock* clock, bool watchdog,
                               std::function<void(size_t)> observe,
                               std::function<void(int)> on_idle)
    : limits_(limits), clock_(clock), observe_(std::move(observe)), on_idle_(std::move(on_idle)) {
  if (watchdog) watchdog_ = std::thread([this] { Watch(); });
}

StreamRegistry::~StreamRegistry() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (watchdog_.joinable()) watchdog_.join();
}

absl::StatusOr<std::shared_ptr<StreamTicket>> StreamRegistry::Open(
    const std::string& client, grpc::CallbackServerContext* ctx) {
  absl::MutexLock lock(&mu_);
  uint32_t& mine = per_client_[client];
  if (mine >= limits_.per_client) {
    return absl::ResourceExhaustedError(
        StrCat(client, " already has ", mine, " uploads and downloads open (at most ",
               limits_.per_client, "); finish or cancel one first"));
  }
  if (open_.size() >= limits_.total) {
    return absl::ResourceExhaustedError(
        StrCat("the coordinator has ", open_.size(), " uploads and downloads open (at most ",
               limits_.total, "); retry later"));
  }
  std::shared_ptr<StreamTicket> ticket(new StreamTicket(this, client, ctx));
  open_[ticket.get()] = ticket;
  ++mine;
  if (observe_) observe_(open_.size());
  return ticket;
}

void StreamRegistry::Forget(StreamTicket* ticket) {
  absl::MutexLock lock(&mu_);
  if (open_.erase(ticket) == 0) return;
  auto it = per_client_.find(ticket->client_);
  if (it != per_client_.end() && --it->second == 0) per_client_.erase(it);
  if (observe_) observe_(open_.size());
}

int StreamRegistry::CancelIdle() {
  const Clock::time_point now = clock_->Now();
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(limits_.idle_timeout_s));
  std::vector<std::shared_ptr<StreamTicket>> idle;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [raw, ticket] : open_) {
      absl::MutexLock t(&ticket->mu_);
      if (ticket->done_ || ticket->cancelling_ || now - ticket->last_ <= timeout) continue;
      ticket->cancelling_ = true;
      ticket->cancelling_thread_ = std::this_thread::get_id();
      idle.push_back(ticket);
    }
  }
  int cancelled = 0;
  for (const auto& ticket : idle) {
    grpc::CallbackServerContext* ctx;
    {
      absl::MutexLock t(&ticket->mu_);
      ctx = ticket->ctx_;
      if (ctx != nullptr) ticket->idle_cancelled_ = true;
    }
    if (ctx != nullptr) {
      // Counted before the cancel: a client that sees CANCELLED finds it in the metrics.
      if (on_idle_) on_idle_(1);
      {
        absl::MutexLock lock(&mu_);
        ++idle_cancelled_;
      }
      // Without a lock: gRPC may end the call (and run its reactor's OnDone) right here.
      ctx->TryCancel();
      ++cancelled;
    }
    {
      absl::MutexLock t(&ticket->mu_);
      ticket->cancelling_ = false;
    }
    // The slot is free now: the client sees CANCELLED and may open another call at once,
    // before gRPC gets round to the reactor's OnDone (Forget is idempotent).
    Forget(ticket.get());
  }
  if (cancelled > 0) {
    log::Warning("coordinator", "%d call(s) cancelled after %.0f s without progress", cancelled,
                 limits_.idle_timeout_s);
  }
  return cancelled;
}

size_t StreamRegistry::open() const {
  absl::MutexLock lock(&mu_);
  return open_.size();
}

size_t StreamRegistry::open_for(const std::string& client) const {
  absl::MutexLock lock(&mu_);
  auto it = per_client_.find(client);
  return it == per_client_.end() ? 0 : it->second;
}

uint64_t StreamRegistry::idle_cancelled_total() const {
  absl::MutexLock lock(&mu_);
  return idle_cancelled_;
}

void StreamRegistry::Watch() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Seconds(1));
      if (stop_) return;
    }
    CancelIdle();
  }
}

}  // namespace fedlgc::coordinator
