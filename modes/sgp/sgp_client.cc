// SGP at the edge (see sgp_client.h).
#include "modes/sgp/sgp_client.h"

#include <cmath>

#include "base/str.h"
#include "core/mixing.h"
#include "modes/sgp/inbox.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {

using edge_client::SystemTime;

namespace {

constexpr char kSlot[] = "sgp";

}  // namespace

SgpClient::SgpClient(edge_client::ClientEnv& env)
    : env_(env),
      overlapped_(env.metrics().CounterFamily(
          "fedlgc_sgp_overlapped_periods_total",
          "SGP with overlap: local periods trained while the client's last share was "
          "uploading")) {}

absl::Status SgpClient::LoadState(const edge_client::ClientState& state) {
  auto m = LoadLocalModel(state, kSlot);
  if (!m.ok()) return m.status();
  local_ = *std::move(m);
  return absl::OkStatus();
}

absl::Status SgpClient::SaveState(std::map<std::string, std::string>* slots) const {
  return SaveLocalModel(local_, kSlot, slots);
}

void SgpClient::Settle() {
  if (!upload_.joinable()) return;
  upload_.join();
  env_.CountUploaded(upload_round_);
}

void SgpClient::Reabsorb() {
  edge_client::ClientState& state = env_.state();
  LocalModel& m = local_;
  if (m.share.size() == m.x.size()) {
    for (size_t i = 0; i < m.x.size(); ++i) m.x[i] += m.share[i];
    m.w += m.share_pw;
  }
  if (state.pending)
    env_.metrics().AddChunks(env_.client_id(), "lost", state.pending->frames.size());
  state.pending.reset();
  m.share.clear();
  m.share_pw = 0;
}

absl::Status SgpClient::TrainPeriod(const protos::RoundStart& start, uint64_t round,
                                    uint64_t seed) {
  LocalModel& m = local_;
  // Train on z = x / w; the step lands on the numerator as w (z' - z).
  protos::RoundStart period = start;
  period.set_seed(seed);
  std::vector<float> z = core::Debias(m.x, m.w);
  const std::vector<float> before = m.x;
  auto loss = env_.TrainLocal(period, &z);
  if (!loss.ok()) return loss.status();
  if (m.contributed.size() != m.x.size()) m.contributed = before;
  for (size_t i = 0; i < m.x.size(); ++i) {
    m.x[i] = static_cast<float>(m.w * z[i]);
    m.contributed[i] += m.x[i] - before[i];
  }
  m.loss = *loss;
  m.trained_round = round;
  return env_.Persist();
}

absl::Status SgpClient::ApplyInbox(const protos::RoundStart& start) {
  LocalModel& m = local_;
  for (uint64_t round : start.sgp().inbox_rounds()) {
    if (round <= m.inbox_applied) continue;
    auto bytes = env_.DownloadBlob("inbox", round, edge_client::DeadlineOf(start));
    if (!bytes.ok()) return bytes.status();
    auto inbox = DecodeInbox(*bytes, m.x.size());
    if (!inbox.ok()) return inbox.status();
    for (size_t i = 0; i < m.x.size(); ++i) m.x[i] += inbox->x[i];
    m.w += inbox->w;
    m.inbox_applied = round;
    if (absl::Status st = env_.Persist(); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status SgpClient::Report(uint64_t round, SystemTime deadline, double distance_sq) {
  const LocalModel& m = local_;
  // A diverged model reports nothing but the mail it added.
  if (!std::isfinite(m.loss) && m.inbox_applied == 0) return absl::OkStatus();
  protos::ProgressReport report;
  report.set_round(round);
  report.mutable_sgp()->set_inbox_applied(m.inbox_applied);
  report.mutable_sgp()->set_distance_sq(std::isfinite(distance_sq) ? distance_sq : -1);
  return env_.Report(report, deadline);
}

absl::Status SgpClient::OnRoundStart(const protos::RoundStart& start) {
  if (!start.has_sgp()) {
    return absl::InvalidArgumentError("an SGP job's round start carries no SgpRound");
  }
  Settle();
  edge_client::ClientState& state = env_.state();
  if (state.pending && state.pending->round != start.round()) {
    // A share whose receipt never came was not delivered: its sender takes it back.
    Reabsorb();
    if (absl::Status st = env_.Persist(); !st.ok()) return st;
  }
  auto ready = EnsureLocalModel(env_, start, &local_);
  if (!ready.ok() || !*ready) return ready.status();
  if (absl::Status st = ApplyInbox(start); !st.ok()) return RoundOver(st) ? absl::OkStatus() : st;
  if (!state.pending) {
    auto went_on = TrainAndShare(start);
    if (!went_on.ok() || !*went_on) return went_on.status();
  }
  return SendShare(start);
}

absl::StatusOr<bool> SgpClient::TrainAndShare(const protos::RoundStart& start) {
  const protos::SgpRound& sgp = start.sgp();
  LocalModel& m = local_;
  const bool sends = sgp.share() < 1;
  const SystemTime deadline = edge_client::DeadlineOf(start);
  std::vector<float> reference;
  if (sgp.reference() && sends) {
    auto ref = env_.DownloadFloats("", start.model_version(), deadline);
    if (!ref.ok()) {
      if (RoundOver(ref.status())) return false;
      return ref.status();
    }
    reference = std::move(ref).value();
  }
  // One report per round: the mail added (so the relay drops it before we could die
  // training) and, against the network mean, how far this model is from consensus.
  double distance_sq = -1;
  if (!reference.empty()) {
    const std::vector<float> z = core::Debias(m.x, m.w);
    distance_sq = 0;
    for (size_t i = 0; i < z.size(); ++i) {
      distance_sq += (double(z[i]) - reference[i]) * (double(z[i]) - reference[i]);
    }
  }
  if (absl::Status st = Report(start.round(), deadline, distance_sq); !st.ok()) return st;
  if (m.trained_round < start.round()) {
    if (absl::Status st = TrainPeriod(start, start.round(), start.seed()); !st.ok()) return st;
  }
  if (!sends) return true;
  auto codec = codec_.Get(start.codec());
  if (!codec.ok()) return codec.status();
  const auto t0 = env_.clock().Now();
  auto share = core::MakeShare(m.x, m.w, sgp.share(), reference, **codec,
                               RoundEncodeOptions(start.seed(), start.max_chunk_bytes(), env_));
  if (!share.ok()) return share.status();
  env_.ObserveEncode(start.round(), t0);
  edge_client::PendingUpdate p = env_.NewPending(start.round(), start.model_version());
  p.frames = std::move(share->frames);
  p.scales = std::move(share->scales);
  edge_client::ClientState& state = env_.state();
  state.pending = std::move(p);
  state.codec = start.codec();
  // The share leaves x now; it comes back if its receipt says it was not delivered.
  for (size_t i = 0; i < m.x.size(); ++i) m.x[i] -= share->full[i];
  m.w -= share->pw;
  m.share = std::move(share->full);
  m.share_pw = share->pw;
  if (absl::Status st = env_.Persist(); !st.ok()) return st;
  return true;
}

absl::Status SgpClient::SendShare(const protos::RoundStart& start) {
  edge_client::ClientState& state = env_.state();
  const LocalModel& m = local_;
  const SystemTime deadline = edge_client::DeadlineOf(start);
  // Overlap: the next local period trains while the share travels (gossip one round
  // behind: the next period does not see this round's mail). Not after the last round.
  const bool ahead = start.sgp().overlap() > 0 && m.trained_round == start.round() &&
                     (env_.total_rounds() == 0 || start.round() < env_.total_rounds());
  if (!state.pending) {
    if (ahead) return TrainPeriod(start, start.round() + 1, start.next_seed());
    return absl::OkStatus();
  }
  const edge_client::ShareFields share{m.share_pw, state.pending->model_version, m.inbox_applied};
  if (!ahead) return env_.UploadPending(start.round(), deadline, share);
  upload_round_ = start.round();
  upload_ = std::thread([this, p = *state.pending, codec = state.codec, deadline, share] {
    (void)env_.UploadCopy(p, codec, deadline, share);
  });
  overlapped_.Add({{"client", env_.metrics().CounterClient(env_.client_id())}}).Increment();
  return TrainPeriod(start, start.round() + 1, start.next_seed());
}

absl::Status SgpClient::OnReceipt(const protos::RoundReceipt& receipt) {
  edge_client::ClientState& state = env_.state();
  if (!state.pending || state.pending->round != receipt.round()) return absl::OkStatus();
  const edge_client::PendingUpdate& p = *state.pending;
  // Delivered means every chunk counted; the coordinator delivers whole shares only.
  const bool delivered = receipt.update_id() == p.update_id &&
                         receipt.counted_chunks_size() == static_cast<int>(p.frames.size());
  if (delivered) {
    state.pending.reset();
    local_.share.clear();
    local_.share_pw = 0;
  } else {
    Reabsorb();
  }
  return env_.Persist();
}

absl::Status SgpClient::OnJobOver() {
  const LocalModel& m = local_;
  if (m.inbox_applied == 0) return absl::OkStatus();
  return Report(0, env_.clock().WallNow() + std::chrono::seconds(10), -1);
}

}  // namespace fedlgc::modes
