// Measured links (see link_book.h).
#include "coordinator/link_book.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace fedlgc::coordinator {
namespace {

// A rate falls at once to a slower measurement (a link that dropped is planned for in
// the next round) and climbs halfway to a faster one (one quick transfer does not make a
// link fast).
void Blend(double* known, double measured) {
  *known = *known > 0 && measured > *known ? 0.5 * *known + 0.5 * measured : measured;
}

bool Measurable(uint64_t bytes, double seconds) {
  return bytes >= LinkBook::kMinMeasured && seconds > 0;
}

}  // namespace

void LinkBook::RecordDownload(const std::string& client, uint64_t bytes, double seconds) {
  if (!Measurable(bytes, seconds)) return;
  const double rate = static_cast<double>(bytes) / seconds;
  absl::MutexLock lock(&mu_);
  LinkEstimate& e = links_[client];
  Blend(&e.down_bps, rate);
  e.down_bps_mean = e.down_bps_mean > 0 ? 0.5 * e.down_bps_mean + 0.5 * rate : rate;
}

void LinkBook::RecordUpload(const std::string& client, uint64_t bytes, double seconds) {
  if (!Measurable(bytes, seconds)) return;
  absl::MutexLock lock(&mu_);
  Blend(&links_[client].up_bps, static_cast<double>(bytes) / seconds);
}

void LinkBook::NoteUploadSoFar(const std::string& client, uint64_t bytes, double seconds) {
  // Mid-upload, a rate needs more bytes behind it: it can only lower the estimate.
  if (bytes < 4 * kMinMeasured || !Measurable(bytes, seconds)) return;
  const double rate = static_cast<double>(bytes) / seconds;
  absl::MutexLock lock(&mu_);
  double& up = links_[client].up_bps;
  if (up <= 0 || rate < up) up = rate;
}

void LinkBook::RecordBusy(const std::string& client, double seconds) {
  if (!(seconds >= 0)) return;
  absl::MutexLock lock(&mu_);
  LinkEstimate& e = links_[client];
  e.busy_seconds = e.busy_known ? 0.5 * e.busy_seconds + 0.5 * seconds : seconds;
  e.busy_known = true;
}

LinkEstimate LinkBook::Estimate(const std::string& client) const {
  absl::MutexLock lock(&mu_);
  auto it = links_.find(client);
  return it == links_.end() ? LinkEstimate{} : it->second;
}

LinkEstimate LinkBook::Typical() const {
  std::vector<double> rates, busy;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [client, e] : links_) {
      if (e.PlanningUpBps() > 0) rates.push_back(e.PlanningUpBps());
      if (e.busy_known) busy.push_back(e.busy_seconds);
    }
  }
  LinkEstimate typical;
  if (rates.empty()) return typical;
  auto at = [](std::vector<double>& v, size_t i) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
    return v[i];
  };
  // The highest rate that at least three in four of them reach, and the lower median.
  const size_t reach = static_cast<size_t>(std::ceil(0.75 * static_cast<double>(rates.size())));
  typical.up_bps = at(rates, rates.size() - reach);
  if (!busy.empty()) {
    typical.busy_seconds = at(busy, (busy.size() - 1) / 2);
    typical.busy_known = true;
  }
  return typical;
}

std::map<std::string, LinkEstimate> LinkBook::All() const {
  absl::MutexLock lock(&mu_);
  return links_;
}

}  // namespace fedlgc::coordinator
