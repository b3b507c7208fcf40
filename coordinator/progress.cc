// The coordinator's progress file (see progress.h).
#include "coordinator/progress.h"

#include <algorithm>

#include "base/file.h"
#include "nlohmann/json.hpp"

namespace fedlgc::coordinator {

const char* Progress::Name(State s) {
  switch (s) {
    case State::kStarting:
      return "starting";
    case State::kWaiting:
      return "waiting";
    case State::kRound:
      return "round";
    case State::kDone:
      return "done";
  }
  return "?";
}

void Progress::Waiting(size_t connected, size_t needed) {
  absl::MutexLock lock(&mu_);
  if (state_ != State::kWaiting) {
    state_ = State::kWaiting;
    waiting_since_ = clock_->Now();
    ++changes_;
  }
  if (connected != connected_ || needed != needed_) {
    connected_ = connected;
    needed_ = needed;
    ++changes_;
  }
}

void Progress::StartRound(uint64_t round, const std::vector<std::string>& participants) {
  absl::MutexLock lock(&mu_);
  state_ = State::kRound;
  round_ = round;
  round_start_ = clock_->Now();
  connected_ = std::max(connected_, participants.size());
  clients_.clear();
  taken_ = false;
  for (const std::string& c : participants) clients_[c];
  ++changes_;
}

void Progress::Downloaded(const std::string& client, uint64_t bytes, bool complete) {
  absl::MutexLock lock(&mu_);
  auto it = clients_.find(client);
  if (it == clients_.end() || taken_) {  // not asked this round, or the round is reported
    carried_[client].second += bytes;
    return;
  }
  it->second.down += bytes;
  it->second.downloaded = it->second.downloaded || complete;
  ++changes_;
}

void Progress::Uploaded(const std::string& client, uint64_t bytes, bool complete) {
  absl::MutexLock lock(&mu_);
  auto it = clients_.find(client);
  if (it == clients_.end() || taken_) {
    carried_[client].first += bytes;
    return;
  }
  it->second.up += bytes;
  it->second.uploaded = it->second.uploaded || complete;
  ++changes_;
}

void Progress::Committed(uint64_t round) {
  absl::MutexLock lock(&mu_);
  committed_ = std::max(committed_, round);
  ++changes_;
}

void Progress::Done() {
  absl::MutexLock lock(&mu_);
  state_ = State::kDone;
  ++changes_;
}

std::map<std::string, std::pair<uint64_t, uint64_t>> Progress::TakeTraffic() {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::pair<uint64_t, uint64_t>> out = std::move(carried_);
  carried_.clear();
  if (!taken_) {
    for (const auto& [id, c] : clients_) {
      out[id].first += c.up;
      out[id].second += c.down;
    }
  }
  taken_ = true;
  return out;
}

void Progress::ForgetCarried() {
  absl::MutexLock lock(&mu_);
  carried_.clear();
}

std::string Progress::ToJson() const {
  absl::MutexLock lock(&mu_);
  const auto now = clock_->Now();
  uint64_t down = 0, up = 0;
  size_t downloaded = 0, uploading = 0, uploaded = 0;
  nlohmann::json listed = nlohmann::json::object();
  for (const auto& [id, c] : clients_) {
    down += c.down;
    up += c.up;
    downloaded += c.downloaded;
    uploaded += c.uploaded;
    uploading += c.up > 0 && !c.uploaded;
    if (clients_.size() <= kMaxListedClients) {
      listed[id] = {{"down", c.down},
                    {"downloaded", c.downloaded},
                    {"up", c.up},
                    {"uploaded", c.uploaded}};
    }
  }
  nlohmann::json j = {
      {"state", Name(state_)},
      {"round", round_},
      {"rounds", rounds_},
      {"committed", committed_},
      {"connected", connected_},
      {"needed", needed_},
      {"waiting_seconds",
       state_ == State::kWaiting ? std::chrono::duration<double>(now - waiting_since_).count() : 0.0},
      {"participants", clients_.size()},
      {"downloaded", downloaded},
      {"uploading", uploading},
      {"uploaded", uploaded},
      {"down_bytes", down},
      {"up_bytes", up},
      {"round_seconds",
       state_ == State::kRound ? std::chrono::duration<double>(now - round_start_).count() : 0.0}};
  if (clients_.size() <= kMaxListedClients) j["clients"] = std::move(listed);
  return j.dump() + "\n";
}

absl::Status Progress::WriteIfDue(const std::string& path, std::chrono::milliseconds every,
                                  bool force) {
  {
    absl::MutexLock lock(&mu_);
    const auto now = clock_->Now();
    // While waiting the file changes by its clock alone: rewrite it every second.
    const bool ticking = state_ == State::kWaiting && now - last_write_ >= std::chrono::seconds(1);
    if (!force && ((changes_ == written_ && !ticking) || now - last_write_ < every)) {
      return absl::OkStatus();
    }
    written_ = changes_;
    last_write_ = now;
  }
  // Not synced: it says what is happening now, and an fsync per write would slow the
  // round loop.
  return fedlgc::AtomicWriteFile(path, ToJson(), fedlgc::Durability::kVisible);
}

}  // namespace fedlgc::coordinator
