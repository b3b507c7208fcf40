// The job's clients (see roster.h).
#include "coordinator/roster.h"

namespace fedlgc::coordinator {

void Roster::Register(const std::string& client_id, uint64_t num_samples) {
  absl::MutexLock lock(&mu_);
  clients_[client_id] = num_samples;
}

uint64_t Roster::RegisteredSamples() const {
  absl::MutexLock lock(&mu_);
  uint64_t total = 0;
  for (const auto& [client, samples] : clients_) total += samples;
  return total;
}

std::map<std::string, uint64_t> Roster::SamplesOf(const std::set<std::string>& clients) const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, uint64_t> samples;
  for (const std::string& c : clients) {
    auto it = clients_.find(c);
    samples[c] = it == clients_.end() ? 0 : it->second;
  }
  return samples;
}

std::map<std::string, uint64_t> Roster::Clients() const {
  absl::MutexLock lock(&mu_);
  return clients_;
}

size_t Roster::size() const {
  absl::MutexLock lock(&mu_);
  return clients_.size();
}

void Roster::Quarantine(const std::string& client_id, const std::string& why) {
  absl::MutexLock lock(&mu_);
  quarantined_[client_id] = why;
}

bool Roster::IsQuarantined(const std::string& client_id) const {
  absl::MutexLock lock(&mu_);
  return quarantined_.count(client_id) > 0;
}

std::optional<std::string> Roster::QuarantineReason(const std::string& client_id) const {
  absl::MutexLock lock(&mu_);
  auto it = quarantined_.find(client_id);
  if (it == quarantined_.end()) return std::nullopt;
  return it->second;
}

std::map<std::string, std::string> Roster::Quarantined() const {
  absl::MutexLock lock(&mu_);
  return quarantined_;
}

}  // namespace fedlgc::coordinator
