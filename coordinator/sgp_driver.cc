// SGP relay at the coordinator (see sgp_driver.h).
#include "coordinator/sgp_driver.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "codecs/crc32c.h"
#include "codecs/str.h"
#include "core/atomic_file.h"
#include "core/mixing.h"

namespace fedlgc::coordinator {
namespace {

constexpr uint32_t kMagic = 0x53475050;  // "SGPP"
constexpr uint32_t kVersion = 1;

}  // namespace

absl::StatusOr<std::unique_ptr<SgpDriver>> SgpDriver::Create(bool reference, uint32_t overlap,
                                                             size_t dim, std::string state_dir,
                                                             uint64_t committed_round) {
  if (overlap > 1) {
    return absl::InvalidArgumentError(StrCat(
        "--sgp-overlap ", overlap, ": 0, or 1 (the next period trains while a share travels)"));
  }
  std::unique_ptr<SgpDriver> d(new SgpDriver(reference, overlap, dim, std::move(state_dir)));
  if (committed_round > 0) {
    if (absl::Status st = d->Load(committed_round); !st.ok()) return st;
  }
  return d;
}

void SgpDriver::BeginRound(uint64_t round, std::vector<std::string> participants) {
  std::sort(participants.begin(), participants.end());
  std::lock_guard<std::mutex> lock(mu_);
  round_ = round;
  participants_ = std::move(participants);
  peer_.clear();
  distance_sq_.clear();
  const size_t n = participants_.size();
  for (size_t k = 0; k < n && n >= 2; ++k) {
    peer_[participants_[k]] = participants_[core::ExponentialPeer(k, n, round)];
  }
}

std::set<std::string> SgpDriver::Senders() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> out;
  for (const auto& [c, peer] : peer_) out.insert(c);
  return out;
}

std::string SgpDriver::PeerOf(const std::string& client) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = peer_.find(client);
  return it == peer_.end() ? "" : it->second;
}

void SgpDriver::Seal(uint64_t round, Mail* mail) {
  auto blob = std::make_shared<ModelBlob>();
  blob->version = round;
  blob->bytes.resize(8 + mail->x.size() * 4);
  std::memcpy(blob->bytes.data(), &mail->w, 8);
  std::memcpy(blob->bytes.data() + 8, mail->x.data(), mail->x.size() * 4);
  blob->crc32c = codecs::Crc32c(blob->bytes.data(), blob->bytes.size());
  mail->blob = std::move(blob);
}

SgpDriver::Outcome SgpDriver::Commit(
    uint64_t round, const std::map<std::string, RoundEngine::SeparateUpdate>& shares,
    const std::set<std::string>& live, std::span<const float> reference) {
  Outcome out;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::vector<float>> full;  // complete shares, reconstructed
  std::vector<double> weights;
  std::vector<double> sum(dim_, 0.0);
  double wsum = 0;
  std::set<std::string> touched;
  for (const auto& [sender, peer] : peer_) {
    auto it = shares.find(sender);
    if (it == shares.end() || !it->second.complete) continue;
    const RoundEngine::SeparateUpdate& u = it->second;
    std::vector<float> f(dim_);
    core::ReconstructShare(u.values, u.weight_share,
                           reference_ ? reference : std::span<const float>(), f);
    auto box = mail_.find(peer);
    const bool full_box =
        box != mail_.end() && box->second.size() >= kMaxMailRounds && !box->second.count(round);
    if (live.count(peer) && !full_box) {
      Mail& mail = mail_[peer][round];
      if (mail.x.empty()) mail.x.assign(dim_, 0.0f);
      for (size_t i = 0; i < dim_; ++i) mail.x[i] += f[i];
      mail.w += u.weight_share;
      touched.insert(peer);
      out.delivered.insert(sender);
    }
    // Every complete share is p times its sender's model: together they give the mean.
    for (size_t i = 0; i < dim_; ++i) sum[i] += f[i];
    wsum += u.weight_share;
    full.push_back(std::move(f));
    weights.push_back(u.weight_share);
  }
  for (const std::string& peer : touched) Seal(round, &mail_[peer][round]);
  if (!distance_sq_.empty()) {
    double sum_sq = 0;
    for (const auto& [c, d] : distance_sq_) sum_sq += d;
    out.consensus_distance = std::sqrt(sum_sq / static_cast<double>(distance_sq_.size()));
  } else if (full.size() >= 2) {
    std::vector<std::span<const float>> views(full.begin(), full.end());
    out.consensus_distance = core::ConsensusDistance(views, weights);
  }
  out.model.assign(reference.begin(), reference.end());
  if (wsum > 0) {
    for (size_t i = 0; i < dim_; ++i) out.model[i] = static_cast<float>(sum[i] / wsum);
  }
  return out;
}

void SgpDriver::Decorate(const std::string& client, protos::RoundStart* s) const {
  s->set_mode("sgp");
  std::lock_guard<std::mutex> lock(mu_);
  s->set_sgp_share(peer_.count(client) ? 0.5 : 1.0);
  s->set_sgp_reference(reference_);
  s->set_sgp_overlap(overlap_);
  if (auto it = mail_.find(client); it != mail_.end()) {
    for (const auto& [round, mail] : it->second) s->add_sgp_inbox_rounds(round);
  }
}

std::shared_ptr<const ModelBlob> SgpDriver::Inbox(const std::string& client, uint64_t round) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = mail_.find(client);
  if (it == mail_.end()) return nullptr;
  auto m = it->second.find(round);
  return m == it->second.end() ? nullptr : m->second.blob;
}

void SgpDriver::InboxApplied(const std::string& client, uint64_t round) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = mail_.find(client);
  if (it == mail_.end()) return;
  it->second.erase(it->second.begin(), it->second.upper_bound(round));
  if (it->second.empty()) mail_.erase(it);
}

absl::Status SgpDriver::AcceptReport(const std::string& client,
                                     const protos::ProgressReport& report) {
  const double d = report.distance_sq();
  if (std::isnan(d) || std::isinf(d)) {
    return absl::InvalidArgumentError(StrCat("report of ", client, ": distance ", d));
  }
  InboxApplied(client, report.inbox_applied());
  std::lock_guard<std::mutex> lock(mu_);
  if (d >= 0 && report.round() == round_ &&
      std::find(participants_.begin(), participants_.end(), client) != participants_.end()) {
    distance_sq_[client] = d;
  }
  return absl::OkStatus();
}

std::pair<std::vector<double>, double> SgpDriver::MailTotals() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<double> x(dim_, 0.0);
  double w = 0;
  for (const auto& [client, box] : mail_) {
    for (const auto& [round, mail] : box) {
      for (size_t i = 0; i < dim_; ++i) x[i] += mail.x[i];
      w += mail.w;
    }
  }
  return {std::move(x), w};
}

absl::Status SgpDriver::Save(uint64_t round) const {
  core::StateWriter w = core::BeginRoundState(kMagic, kVersion, round);
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const auto& [client, box] : mail_) n += box.size();
  w.U64(n);
  for (const auto& [client, box] : mail_) {
    for (const auto& [r, mail] : box) {
      w.Str(client);
      w.U64(r);
      w.F64(mail.w);
      w.Floats(mail.x);
    }
  }
  return core::SaveRoundState(state_dir_, "sgp", round, w.Finish());
}

absl::Status SgpDriver::Load(uint64_t round) {
  const std::string path = core::RoundStatePath(state_dir_, "sgp", round);
  std::string bytes;
  auto reader = core::ReadRoundState(state_dir_, "sgp", round, kMagic, kVersion, &bytes);
  if (!reader.ok()) return reader.status();
  core::StateReader& r = *reader;
  uint64_t n;
  if (!r.U64(&n)) return absl::DataLossError(StrCat(path, ": malformed SGP state"));
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t i = 0; i < n; ++i) {
    std::string client;
    uint64_t mail_round;
    Mail mail;
    if (!r.Str(&client) || !r.U64(&mail_round) || !r.F64(&mail.w) || !r.Floats(&mail.x) ||
        mail.x.size() != dim_ || !(mail.w > 0)) {
      return absl::DataLossError(StrCat(path, ": malformed SGP mail"));
    }
    Seal(mail_round, &mail);
    mail_[client][mail_round] = std::move(mail);
  }
  if (!r.done()) return absl::DataLossError(StrCat(path, ": trailing bytes"));
  return absl::OkStatus();
}

}  // namespace fedlgc::coordinator
