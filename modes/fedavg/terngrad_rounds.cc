// Rounds of terngrad(shared=1) at the coordinator (see terngrad_rounds.h).
#include "modes/fedavg/terngrad_rounds.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/str.h"
#include "codecs/input_error.h"
#include "coordinator/robust.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {

absl::StatusOr<std::unique_ptr<TernGradRounds>> TernGradRounds::Create(const std::string& spec,
                                                                       uint64_t dim, double clip) {
  auto probe = codecs::TernGradRoundCodec::Create(spec, dim);
  if (!probe.ok()) return probe.status();
  return std::unique_ptr<TernGradRounds>(new TernGradRounds((*probe)->spec(), dim, clip));
}

absl::StatusOr<std::shared_ptr<codecs::TernGradRoundCodec>> TernGradRounds::BeginRound(
    uint64_t round, const std::vector<std::string>& participants,
    coordinator::Clock::time_point opened, coordinator::Clock::time_point deadline) {
  auto decoder = codecs::TernGradRoundCodec::Create(spec_, dim_);
  if (!decoder.ok()) return decoder.status();
  absl::MutexLock lock(&mu_);
  round_ = round;
  participants_ = std::set<std::string>(participants.begin(), participants.end());
  reported_.clear();
  opened_ = opened;
  deadline_ = deadline;
  scale_ = 0;
  scale_seconds_ = -1;
  decoder_ = *decoder;
  return *std::move(decoder);
}

absl::Status TernGradRounds::Accept(const std::string& client,
                                    const protos::ProgressReport& report) {
  if (!report.has_fedavg()) {
    return absl::InvalidArgumentError(StrCat(
        "report of ", client, ": a terngrad(shared=1) round takes its scale (FedAvgProgress)"));
  }
  const double s = report.fedavg().terngrad_scale();
  if (!std::isfinite(s) || !(s > 0) || s > 1e30) {
    return codecs::NonFiniteError(
        StrCat("report of ", client, ": scale ", s, " must be finite, positive and at most 1e30"));
  }
  absl::MutexLock lock(&mu_);
  if (report.round() != round_ || round_ == 0 || !participants_.count(client)) {
    return absl::FailedPreconditionError(
        StrCat("round ", report.round(), " takes no scale from ", client));
  }
  if (scale_ > 0) {
    return absl::FailedPreconditionError(
        StrCat("round ", round_, "'s scale is set already: its RoundStart carries it"));
  }
  reported_[client] = s;
  return absl::OkStatus();
}

void TernGradRounds::Tick(coordinator::RoundHost& host) {
  std::vector<std::string> to;
  protos::ServerEvent event;
  {
    absl::MutexLock lock(&mu_);
    if (round_ == 0 || scale_ > 0 || reported_.empty()) return;
    const auto now = host.Now();
    const bool everyone = reported_.size() == participants_.size();
    if (!everyone && now < opened_ + (deadline_ - opened_) / 2) return;
    std::vector<double> values;
    double largest = 0;
    for (const auto& [client, s] : reported_) {
      values.push_back(s);
      largest = std::max(largest, s);
    }
    double scale = largest;
    if (clip_ > 0) scale = std::min(scale, clip_ * coordinator::LowerMedian(values));
    scale_ = static_cast<float>(scale);
    scale_seconds_ = std::chrono::duration<double>(now - opened_).count();
    decoder_->SetScale(scale_);
    auto* e = event.mutable_mode()->mutable_terngrad_scale();
    e->set_round(round_);
    e->set_scale(scale_);
    to.assign(participants_.begin(), participants_.end());
  }
  // Outside the lock: a participant's RoundStart (Decorate) carries it from now on too.
  for (const std::string& client : to) host.Push(client, event);
}

void TernGradRounds::EndRound(RoundReport* report) {
  absl::MutexLock lock(&mu_);
  report->figures["terngrad_scale"] = scale_;
  report->figures["terngrad_reports"] = static_cast<double>(reported_.size());
  report->figures["terngrad_scale_s"] = scale_seconds_;
  for (const auto& [client, s] : reported_) report->per_client["terngrad_local_scale"][client] = s;
  round_ = 0;
  participants_.clear();
  reported_.clear();
  decoder_.reset();
}

void TernGradRounds::Decorate(protos::RoundStart* start) {
  absl::MutexLock lock(&mu_);
  if (start->round() == round_ && scale_ > 0) {
    start->mutable_fedavg()->set_terngrad_scale(scale_);
  }
}

}  // namespace fedlgc::modes
