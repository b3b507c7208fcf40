// The coordinator's RoundHost (see coordinator_host.h).
#include "coordinator/coordinator_host.h"

#include <algorithm>

#include "base/log.h"
#include "coordinator/downlink.h"
#include "coordinator/progress.h"
#include "coordinator/service.h"
#include "monitoring/metrics.h"

namespace fedlgc::coordinator {

void CoordinatorHost::WakeUp() {
  absl::MutexLock lock(&mu_);
  cv_.SignalAll();
}

void CoordinatorHost::Stop() {
  stop_ = true;
  WakeUp();
}

void CoordinatorHost::Nap(Clock::time_point until) {
  absl::MutexLock lock(&mu_);
  if (!stop_) parts_.clock->WaitUntil(&cv_, &mu_, until);
}

void CoordinatorHost::WriteProgress(bool force) {
  absl::Status st = parts_.progress->WriteIfDue(parts_.state_dir + "/progress.json",
                                                std::chrono::milliseconds(250), force);
  if (!st.ok() && !progress_error_logged_.exchange(true)) {
    log::Warning("coordinator", "progress file: %s", st.ToString().c_str());
  }
}

absl::Status CoordinatorHost::StartRound(const std::vector<std::string>& participants,
                                         Clock::time_point deadline,
                                         std::shared_ptr<Collector> collector,
                                         const std::set<std::string>* uploaders) {
  RoundEngine& engine = *parts_.engine;
  const uint64_t round = engine.current_round();
  if (absl::Status st = engine.OpenRound(participants, deadline, std::move(collector)); !st.ok())
    return st;
  if (uploaders != nullptr) engine.SetUploaders(*uploaders);
  parts_.metrics->SetRound(round);
  for (const std::string& c : participants) parts_.service->SendRoundStart(c);
  return absl::OkStatus();
}

absl::Status CoordinatorHost::StartRollingRound(const std::vector<std::string>& participants,
                                                Clock::time_point deadline,
                                                std::shared_ptr<Collector> collector) {
  if (absl::Status st =
          parts_.engine->OpenRound(participants, deadline, std::move(collector), /*rolling=*/true);
      !st.ok()) {
    return st;
  }
  parts_.metrics->SetRound(parts_.engine->current_round());
  for (const std::string& c : participants) parts_.service->SendRoundStart(c);
  return absl::OkStatus();
}

absl::StatusOr<size_t> CoordinatorHost::AskMore(const std::vector<std::string>& clients,
                                                Clock::time_point deadline) {
  auto added = parts_.engine->AddParticipants(clients, deadline);
  if (!added.ok()) return added.status();
  for (const std::string& c : *added) parts_.service->SendRoundStart(c);
  return added->size();
}

void CoordinatorHost::WaitUntil(Clock::time_point deadline, const std::function<bool()>& done,
                                const std::function<void()>& tick) {
  absl::MutexLock lock(&mu_);
  core::Clock& clock = *parts_.clock;
  while (!stop_ && clock.Now() < deadline && !done()) {
    clock.WaitUntil(&cv_, &mu_, std::min(deadline, clock.Now() + std::chrono::milliseconds(100)));
    mu_.Unlock();
    if (tick) tick();
    WriteProgress();
    mu_.Lock();
  }
}

std::vector<std::string> CoordinatorHost::Connected() const {
  return parts_.service->events().Connected();
}

std::set<std::string> CoordinatorHost::Vanished(const std::set<std::string>& watched,
                                                Clock::time_point since) const {
  const auto now = parts_.clock->Now();
  std::set<std::string> gone;
  for (const std::string& c : watched) {
    // Neither an event stream nor a call for 3 s (a client busy uploading through a cut
    // link has no event stream until it is done, but its chunks keep arriving).
    if (now - std::max(since, parts_.service->events().LastSeen(c)) > std::chrono::seconds(3)) {
      gone.insert(c);
    }
  }
  return gone;
}

bool CoordinatorHost::Push(const std::string& client, const protos::ServerEvent& event) {
  return parts_.service->events().Push(client, event);
}

double CoordinatorHost::LinkBytesPerSecond(const std::string& client) const {
  return parts_.service->LinkBytesPerSecond(client);
}

absl::StatusOr<GuardVerdict> CoordinatorHost::CheckModel(std::span<const float> candidate) {
  RoundEngine& engine = *parts_.engine;
  const auto blob = engine.model();
  auto verdict = parts_.guard->Check(engine.ModelVector(), blob->version, candidate);
  if (!verdict.ok()) return verdict.status();
  if (!verdict->passed()) {
    parts_.metrics->AddGuardRefusal(GuardCheckName(verdict->check));
    log::Warning("coordinator", "round %llu: the model guard refused a candidate (%s): %s",
                 static_cast<unsigned long long>(engine.current_round()),
                 std::string(GuardCheckName(verdict->check)).c_str(), verdict->detail);
  }
  return verdict;
}

std::vector<float> CoordinatorHost::ServedModel() const {
  return parts_.downlinks != nullptr ? parts_.downlinks->global()->Held()
                                     : parts_.engine->ModelVector();
}

void CoordinatorHost::Quarantine(const std::set<std::string>& clients, const std::string& why) {
  for (const std::string& c : clients) {
    parts_.engine->roster().Quarantine(c, why);
    parts_.metrics->SetQuarantined(c);
    log::Warning("coordinator", "client %s quarantined for the rest of the job: %s", c, why);
  }
}

}  // namespace fedlgc::coordinator
