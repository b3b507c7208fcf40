// fedlgc-load's ledger (see load_book.h).
#include "sim/load_book.h"

#include <algorithm>
#include <cmath>

#include "base/str.h"

namespace fedlgc::sim {
namespace {

// The gap between |x| and the next float up.
double Ulp(float x) {
  const float a = std::fabs(x);
  return static_cast<double>(std::nextafter(a, INFINITY)) - a;
}

// Nearest-rank percentile `q` of `v` (0 when empty).
double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

}  // namespace

AggregateCheck CheckAggregate(const std::vector<float>& old_model,
                              const std::vector<float>& new_model, const std::vector<double>& sum,
                              const std::vector<uint32_t>& count, float lr) {
  AggregateCheck c;
  c.made = true;
  if (old_model.size() != new_model.size() || sum.size() > old_model.size() ||
      count.size() != sum.size()) {
    c.why = StrCat("sizes differ: models ", old_model.size(), " and ", new_model.size(),
                   ", counted coordinates ", sum.size());
    return c;
  }
  std::vector<double> allowed_all(old_model.size());
  for (size_t k = 0; k < old_model.size(); ++k) {
    const float mean =
        k < sum.size() && count[k] > 0 ? static_cast<float>(sum[k] / count[k]) : 0.0f;
    const float expected = lr * mean;
    const double actual = double(new_model[k]) - double(old_model[k]);
    const double allowed = Ulp(new_model[k]) + Ulp(old_model[k]) + Ulp(expected);
    const double gap = std::fabs(actual - double(expected));
    allowed_all[k] = allowed;
    c.worst_gap = std::max(c.worst_gap, gap);
    c.worst_ratio = std::max(c.worst_ratio, gap / allowed);
    if (!(gap <= allowed)) ++c.off;
  }
  c.coordinates = old_model.size();
  c.median_allowed = Percentile(std::move(allowed_all), 0.5);
  c.ok = c.off == 0 && c.coordinates > 0;
  if (!c.ok) {
    c.why = StrCat(c.off, " of ", c.coordinates,
                   " coordinates differ from the mean of the counted chunks");
  }
  return c;
}

LoadBook::LoadBook(bool check, float server_lr)
    : check_(check), server_lr_(server_lr), start_(std::chrono::steady_clock::now()) {}

double LoadBook::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void LoadBook::Started(uint64_t round, uint64_t model_version, uint32_t client) {
  const double now = Now();
  absl::MutexLock lock(&mu_);
  if (round <= taken_) return;  // a start resent after a reconnect, of a round already taken
  Round& r = rounds_[round];
  if (r.clients.empty()) {
    r.model_version = model_version;
    r.figures.opened = now;
  }
  ClientRound& c = r.clients[client];
  if (c.started < 0) c.started = now;
  last_version_ = std::max(last_version_.value_or(0), model_version);
}

void LoadBook::Downloaded(uint64_t round, uint32_t client, uint64_t bytes, double seconds) {
  absl::MutexLock lock(&mu_);
  auto it = rounds_.find(round);
  if (it == rounds_.end()) return;
  it->second.figures.down_bytes += bytes;
  it->second.clients[client].download_s = seconds;
}

bool LoadBook::WantsModel(uint64_t version) const {
  if (!check_) return false;
  absl::MutexLock lock(&mu_);
  return models_.count(version) == 0;
}

void LoadBook::Model(uint64_t version, std::vector<float> values) {
  absl::MutexLock lock(&mu_);
  models_.emplace(version, std::move(values));
}

void LoadBook::Uploaded(uint64_t round, uint32_t client, double seconds, uint64_t bytes,
                        uint32_t chunks) {
  const double now = Now();
  absl::MutexLock lock(&mu_);
  auto it = rounds_.find(round);
  if (it == rounds_.end()) return;
  ClientRound& c = it->second.clients[client];
  if (c.uploaded < 0) {
    it->second.figures.up_bytes += bytes;
    it->second.figures.chunks += chunks;
    c.upload_s = seconds;
  } else {
    c.upload_s += seconds;  // a resumed upload after a reconnect
  }
  c.uploaded = now;
}

void LoadBook::SentNothing(uint64_t round, uint32_t client) {
  absl::MutexLock lock(&mu_);
  auto it = rounds_.find(round);
  if (it != rounds_.end()) it->second.clients[client].sent_nothing = true;
}

void LoadBook::Receipt(uint64_t round, uint32_t client, uint32_t /*chunk_count*/,
                       const std::vector<CountedChunk>& counted) {
  const double now = Now();
  absl::MutexLock lock(&mu_);
  auto it = rounds_.find(round);
  if (it == rounds_.end()) return;
  Round& r = it->second;
  ClientRound& c = r.clients[client];
  if (c.receipt) return;  // a receipt resent after a reconnect
  c.receipt = true;
  RoundFigures& f = r.figures;
  if (f.receipts++ == 0) f.committed = now;
  f.last_receipt = now;
  if (!counted.empty()) ++f.participants;
  f.counted_chunks += counted.size();
  if (!check_) return;
  for (const CountedChunk& chunk : counted) {
    const size_t end = chunk.begin + chunk.values.size();
    if (r.sum.size() < end) {
      r.sum.resize(end, 0.0);
      r.count.resize(end, 0);
    }
    for (size_t i = 0; i < chunk.values.size(); ++i) {
      r.sum[chunk.begin + i] += chunk.values[i];
      ++r.count[chunk.begin + i];
    }
  }
}

void LoadBook::Broke(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  auto& [n, first] = breaks_[absl::StatusCodeToString(status.code())];
  if (n++ == 0) first = std::string(status.message());
}

std::map<std::string, std::string> LoadBook::Breaks() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::string> out;
  for (const auto& [code, b] : breaks_) out[code] = StrCat(b.first, " (first: ", b.second, ")");
  return out;
}

uint64_t LoadBook::breaks() const {
  absl::MutexLock lock(&mu_);
  uint64_t n = 0;
  for (const auto& [code, b] : breaks_) n += b.first;
  return n;
}

std::optional<uint64_t> LoadBook::last_version() const {
  absl::MutexLock lock(&mu_);
  return last_version_;
}

bool LoadBook::SettledLocked(const Round& r) const {
  for (const auto& [client, c] : r.clients) {
    if (!c.receipt && !c.sent_nothing) return false;
  }
  return !check_ || (models_.count(r.model_version) && models_.count(r.model_version + 1));
}

RoundFigures LoadBook::FinishLocked(uint64_t round, Round& r) {
  RoundFigures f = r.figures;
  f.round = round;
  f.model_version = r.model_version;
  std::vector<double> downloads, uploads;
  for (const auto& [client, c] : r.clients) {
    ++f.started;
    if (c.download_s >= 0) downloads.push_back(c.download_s);
    if (c.uploaded < 0) continue;
    ++f.uploaded;
    uploads.push_back(c.upload_s);
    if (c.receipt) f.slowest_client = std::max(f.slowest_client, c.uploaded - c.started);
  }
  f.seconds = f.receipts > 0 ? f.committed - f.opened : 0;
  f.overhead = f.receipts > 0 ? f.seconds - f.slowest_client : 0;
  f.download_p50 = Percentile(downloads, 0.5);
  f.upload_p50 = Percentile(uploads, 0.5);
  f.upload_p99 = Percentile(uploads, 0.99);
  if (!check_) return f;
  auto old_model = models_.find(r.model_version), new_model = models_.find(r.model_version + 1);
  uint32_t waited = 0;  // receipts the round waited for
  for (const auto& [client, c] : r.clients) waited += c.receipt || !c.sent_nothing;
  if (f.receipts < waited) {
    f.check.why = StrCat(waited - f.receipts, " receipts never arrived");
  } else if (old_model == models_.end() || new_model == models_.end()) {
    f.check.why = StrCat("the model of version ",
                         old_model == models_.end() ? r.model_version : r.model_version + 1,
                         " was never downloaded");
  } else {
    f.check = CheckAggregate(old_model->second, new_model->second, r.sum, r.count, server_lr_);
  }
  return f;
}

std::vector<RoundFigures> LoadBook::TakeSettled(bool final) {
  absl::MutexLock lock(&mu_);
  std::vector<RoundFigures> out;
  while (!rounds_.empty()) {
    auto it = rounds_.begin();
    if (!final && !SettledLocked(it->second)) break;
    out.push_back(FinishLocked(it->first, it->second));
    taken_ = it->first;
    rounds_.erase(it);
  }
  // Models older than the oldest round still open are needed no more.
  const uint64_t keep =
      rounds_.empty() ? last_version_.value_or(0) : rounds_.begin()->second.model_version;
  models_.erase(models_.begin(), models_.lower_bound(keep));
  return out;
}

}  // namespace fedlgc::sim
