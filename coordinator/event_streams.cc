// The book of the coordinator's event streams (see event_streams.h).
#include "coordinator/event_streams.h"

namespace fedlgc::coordinator {

bool EventStreams::Open(const std::string& client, EventSink* stream,
                        const std::function<std::vector<protos::ServerEvent>()>& receipts,
                        const std::function<std::optional<protos::ServerEvent>()>& round_start) {
  // Register and queue the catch-up under one lock, so nothing pushed meanwhile can
  // overtake it: the client's recent receipts first, then the open round if it takes part,
  // or the end of the job.
  absl::MutexLock lock(&mu_);
  auto old = streams_.find(client);
  const bool resumed = old != streams_.end();
  if (resumed) {
    old->second->Close(absl::CancelledError("replaced by a newer event stream of this client"));
  }
  streams_[client] = stream;
  for (const protos::ServerEvent& e : receipts()) stream->Push(e);
  // A job that is over says so, even to a client of a round still open (buffered rounds
  // end with clients still training).
  if (done_) {
    stream->Push(done_event_);
  } else if (auto start = round_start()) {
    stream->Push(*start);
  }
  return resumed;
}

void EventStreams::Unregister(const std::string& client, const EventSink* stream) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(client);
  if (it != streams_.end() && it->second == stream) streams_.erase(it);
}

bool EventStreams::Push(const std::string& client, const protos::ServerEvent& event) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(client);
  if (it == streams_.end()) return false;
  it->second->Push(event);
  return true;
}

void EventStreams::BroadcastDone(uint64_t rounds, float accuracy, uint64_t model_version) {
  absl::MutexLock lock(&mu_);
  done_event_.mutable_done()->set_rounds(rounds);
  done_event_.mutable_done()->set_final_accuracy(accuracy);
  done_event_.mutable_done()->set_model_version(model_version);
  done_ = true;
  for (const auto& [id, stream] : streams_) stream->Push(done_event_);
}

std::vector<std::string> EventStreams::Connected() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [id, stream] : streams_) out.push_back(id);
  return out;
}

void EventStreams::Touch(const std::string& client) {
  absl::MutexLock lock(&mu_);
  last_call_[client] = clock_->Now();
}

Clock::time_point EventStreams::LastSeen(const std::string& client) const {
  absl::MutexLock lock(&mu_);
  if (streams_.count(client)) return clock_->Now();
  auto it = last_call_.find(client);
  return it == last_call_.end() ? Clock::time_point() : it->second;
}

void EventStreams::AddFinalModelTaker(const std::string& client) {
  absl::MutexLock lock(&mu_);
  final_takers_.insert(client);
}

std::set<std::string> EventStreams::FinalModelTakers() const {
  absl::MutexLock lock(&mu_);
  return final_takers_;
}

}  // namespace fedlgc::coordinator
