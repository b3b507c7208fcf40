// The edge client in LSGD and SGP jobs, where it keeps its own model between rounds
// (see edge_client.h, coordinator/lsgd_driver.h and coordinator/sgp_driver.h).
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstring>

#include "codecs/codec.h"
#include "codecs/error_feedback.h"
#include "codecs/registry.h"
#include "codecs/str.h"
#include "core/mixing.h"
#include "core/model.h"
#include "edge_client/edge_client.h"
#include "edge_client/grpc_status.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.grpc.pb.h"

namespace fedlgc::edge_client {
namespace {

std::chrono::system_clock::time_point DeadlineOf(const protos::RoundStart& start) {
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(start.deadline_unix_ms()));
}

// A download or report that cannot finish because the round moved on or ended.
bool RoundOver(const absl::Status& st) {
  return absl::IsNotFound(st) || absl::IsDeadlineExceeded(st) || absl::IsFailedPrecondition(st);
}

}  // namespace

absl::StatusOr<std::vector<float>> EdgeClient::DownloadFloats(const std::string& blob,
                                                              uint64_t version) {
  auto bytes = DownloadBlob(blob, version, round_deadline_);
  if (!bytes.ok()) return bytes.status();
  if (bytes->size() != model_->dim() * 4) {
    return absl::DataLossError(
        StrCat(blob, " ", version, ": ", bytes->size(), " bytes for ", model_->dim(), " floats"));
  }
  std::vector<float> v(model_->dim());
  std::memcpy(v.data(), bytes->data(), bytes->size());
  return v;
}

absl::StatusOr<codecs::Codec*> EdgeClient::PlainCodec(const std::string& spec) {
  if (!plain_codec_ || plain_codec_spec_ != spec) {
    auto c = codecs::MakeCodec(spec);
    if (!c.ok()) return c.status();
    plain_codec_ = std::move(c).value();
    plain_codec_spec_ = spec;
  }
  return plain_codec_.get();
}

absl::StatusOr<bool> EdgeClient::EnsureLocalModel(const protos::RoundStart& start) {
  round_deadline_ = DeadlineOf(start);
  mode_round_ = {start.round(), start.model_version(), start.seed(), start.codec(),
                 start.max_chunk_bytes()};
  LocalModel& m = state_.local;
  if (!m.x.empty() && m.x.size() == model_->dim()) return true;
  auto x = Download(start.model_version(), round_deadline_);
  if (!x.ok()) {
    if (RoundOver(x.status())) return false;
    return x.status();
  }
  m = LocalModel();
  m.x = std::move(x).value();
  m.contributed = m.x;
  // A fresh model is the run's model: the pulls of this round are already in it.
  m.pulled_round = start.round();
  if (absl::Status st = Persist(); !st.ok()) return st;
  return true;
}

// ---- LSGD ----

absl::Status EdgeClient::HandleLsgdRound(const protos::RoundStart& start) {
  if (state_.pending && state_.pending->round != start.round()) {
    // A leader upload whose receipt never came. Nothing goes back: the next lead sends
    // its model minus the reference, which holds exactly what the coordinator decoded.
    state_.pending.reset();
    if (absl::Status st = Persist(); !st.ok()) return st;
  }
  auto ready = EnsureLocalModel(start);
  if (!ready.ok() || !*ready) return ready.status();
  LocalModel& m = state_.local;
  if (m.pulled_round < start.round()) {
    for (const protos::Pull& pull : start.pulls()) {
      if (!(pull.strength() > 0 && pull.strength() <= 1)) {
        return absl::InvalidArgumentError(StrCat("pull strength ", pull.strength()));
      }
      auto leader = DownloadFloats(pull.blob(), pull.version());
      if (!leader.ok()) return RoundOver(leader.status()) ? absl::OkStatus() : leader.status();
      core::Pull(m.x, *leader, pull.strength());
    }
    m.pulled_round = start.round();
    if (absl::Status st = Persist(); !st.ok()) return st;
  }
  if (m.trained_round < start.round()) {
    auto loss = TrainLocal(start, &m.x);
    if (!loss.ok()) return loss.status();
    m.loss = *loss;
    m.trained_round = start.round();
    if (absl::Status st = Persist(); !st.ok()) return st;
  }
  if (absl::Status st = ReportProgress(start.round(), m.loss); !st.ok()) return st;
  // Elected before this start reached us (after a reconnect): lead now.
  if (start.has_lead()) return HandleLsgdLead(start.lead());
  return absl::OkStatus();
}

absl::Status EdgeClient::ReportProgress(uint64_t round, double loss, uint64_t inbox_applied,
                                        double distance_sq) {
  // A diverged model reports nothing to elect it by; the mail ack still goes.
  if (!std::isfinite(loss)) {
    if (inbox_applied == 0) return absl::OkStatus();
    loss = 0;
  }
  if (!std::isfinite(distance_sq)) distance_sq = -1;
  auto stub = protos::Coordinator::NewStub(channel_);
  for (int attempt = 0; !stop_; ++attempt) {
    if (std::chrono::system_clock::now() > round_deadline_) return absl::OkStatus();
    if (attempt > 0) {
      Backoff(attempt - 1);
      if (RefreshChannelIfDown()) stub = protos::Coordinator::NewStub(channel_);
    }
    protos::ProgressReport req;
    req.set_client_id(options_.client_id);
    req.set_round(round);
    req.set_loss(loss);
    req.set_rtt_ms(min_rtt_ms_);
    req.set_inbox_applied(inbox_applied);
    req.set_distance_sq(distance_sq);
    protos::ReportAck ack;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, 10);
    const auto t0 = std::chrono::steady_clock::now();
    const grpc::Status st = stub->Report(&ctx, req, &ack);
    if (st.ok()) {
      NoteRoundTrip(t0);
      return absl::OkStatus();
    }
    const absl::Status as = FromGrpc(st, "report");
    if (absl::IsFailedPrecondition(as)) return absl::OkStatus();  // the round moved on
    if (absl::IsInvalidArgument(as) || absl::IsPermissionDenied(as)) return as;
  }
  return absl::OkStatus();
}

absl::Status EdgeClient::HandleLsgdLead(const protos::LsgdLead& lead) {
  LocalModel& m = state_.local;
  if (lead.round() != m.trained_round || lead.round() != mode_round_.round) {
    return absl::OkStatus();  // stale
  }
  if (!state_.pending || state_.pending->round != lead.round()) {
    auto ref = DownloadFloats(lead.reference_blob(), lead.reference_version());
    if (!ref.ok()) return RoundOver(ref.status()) ? absl::OkStatus() : ref.status();
    auto codec = PlainCodec(mode_round_.codec);
    if (!codec.ok()) return codec.status();
    std::vector<float> delta(m.x.size());
    for (size_t i = 0; i < delta.size(); ++i) delta[i] = m.x[i] - (*ref)[i];
    codecs::EncodeOptions eopts;
    eopts.seed = mode_round_.seed;
    eopts.max_frame_bytes = mode_round_.max_chunk_bytes;
    const auto t0 = std::chrono::steady_clock::now();
    auto scaled = core::EncodeScaled(delta, **codec, eopts);
    if (!scaled.ok()) return scaled.status();
    ObserveEncode(lead.round(), t0);
    PendingUpdate p = NewPending(lead.round(), mode_round_.model_version);
    p.frames = std::move(scaled->frames);
    p.scales = std::move(scaled->scales);
    p.lead = true;
    state_.pending = std::move(p);
    if (absl::Status st = Persist(); !st.ok()) return st;
  }
  return UploadPending(lead.round(), round_deadline_);
}

// ---- SGP ----

void EdgeClient::ReabsorbShare() {
  LocalModel& m = state_.local;
  if (m.share.size() == m.x.size()) {
    for (size_t i = 0; i < m.x.size(); ++i) m.x[i] += m.share[i];
    m.w += m.share_pw;
  }
  if (state_.pending)
    metrics_->AddChunks(options_.client_id, "lost", state_.pending->frames.size());
  state_.pending.reset();
  m.share.clear();
  m.share_pw = 0;
}

void EdgeClient::JoinShareUpload() {
  if (!share_upload_.joinable()) return;
  share_upload_.join();
  ++rounds_uploaded_;
  last_round_ = share_upload_round_;
}

absl::Status EdgeClient::TrainSgpPeriod(const protos::RoundStart& start, uint64_t round,
                                        uint64_t seed) {
  LocalModel& m = state_.local;
  // Train on z = x / w; the step lands on the numerator as w (z' - z).
  protos::RoundStart period = start;
  period.set_seed(seed);
  std::vector<float> z = core::Debias(m.x, m.w);
  const std::vector<float> before = m.x;
  auto loss = TrainLocal(period, &z);
  if (!loss.ok()) return loss.status();
  if (m.contributed.size() != m.x.size()) m.contributed = before;
  for (size_t i = 0; i < m.x.size(); ++i) {
    m.x[i] = static_cast<float>(m.w * z[i]);
    m.contributed[i] += m.x[i] - before[i];
  }
  m.loss = *loss;
  m.trained_round = round;
  return Persist();
}

absl::Status EdgeClient::HandleSgpRound(const protos::RoundStart& start) {
  JoinShareUpload();
  LocalModel& m = state_.local;
  if (state_.pending && state_.pending->round != start.round()) {
    // A share whose receipt never came was not delivered: its sender takes it back.
    ReabsorbShare();
    if (absl::Status st = Persist(); !st.ok()) return st;
  }
  auto ready = EnsureLocalModel(start);
  if (!ready.ok() || !*ready) return ready.status();
  // Shares relayed to us in earlier rounds, each added once.
  for (uint64_t round : start.sgp_inbox_rounds()) {
    if (round <= m.inbox_applied) continue;
    auto bytes = DownloadBlob("inbox", round, round_deadline_);
    if (!bytes.ok()) return RoundOver(bytes.status()) ? absl::OkStatus() : bytes.status();
    double w = 0;
    if (bytes->size() != 8 + m.x.size() * 4) {
      return absl::DataLossError(StrCat("inbox ", round, ": ", bytes->size(), " bytes"));
    }
    std::memcpy(&w, bytes->data(), 8);
    if (!(w > 0) || !std::isfinite(w)) return absl::DataLossError(StrCat("inbox weight ", w));
    std::vector<float> x(m.x.size());
    std::memcpy(x.data(), bytes->data() + 8, x.size() * 4);
    for (size_t i = 0; i < x.size(); ++i) m.x[i] += x[i];
    m.w += w;
    m.inbox_applied = round;
    if (absl::Status st = Persist(); !st.ok()) return st;
  }
  const bool sends = start.sgp_share() < 1;
  if (!state_.pending) {
    std::vector<float> reference;
    if (start.sgp_reference() && sends) {
      auto ref = Download(start.model_version(), round_deadline_);
      if (!ref.ok()) return RoundOver(ref.status()) ? absl::OkStatus() : ref.status();
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
    if (absl::Status st = ReportProgress(start.round(), m.loss, m.inbox_applied, distance_sq);
        !st.ok()) {
      return st;
    }
    if (m.trained_round < start.round()) {
      if (absl::Status st = TrainSgpPeriod(start, start.round(), start.seed()); !st.ok()) return st;
    }
    if (sends) {
      auto codec = PlainCodec(start.codec());
      if (!codec.ok()) return codec.status();
      codecs::EncodeOptions eopts;
      eopts.seed = start.seed();
      eopts.max_frame_bytes = start.max_chunk_bytes();
      const auto t0 = std::chrono::steady_clock::now();
      auto share = core::MakeShare(m.x, m.w, start.sgp_share(), reference, **codec, eopts);
      if (!share.ok()) return share.status();
      ObserveEncode(start.round(), t0);
      PendingUpdate p = NewPending(start.round(), start.model_version());
      p.frames = std::move(share->frames);
      p.scales = std::move(share->scales);
      p.gossip = true;
      state_.pending = std::move(p);
      state_.codec = start.codec();
      // The share leaves x now; it comes back if its receipt says it was not delivered.
      for (size_t i = 0; i < m.x.size(); ++i) m.x[i] -= share->full[i];
      m.w -= share->pw;
      m.share = std::move(share->full);
      m.share_pw = share->pw;
      if (absl::Status st = Persist(); !st.ok()) return st;
    }
  }
  // Overlap: the next local period trains while the share travels (gossip one round
  // behind: the next period does not see this round's mail). Not after the last round.
  const bool ahead = start.sgp_overlap() > 0 && m.trained_round == start.round() &&
                     (total_rounds_ == 0 || start.round() < total_rounds_);
  if (!state_.pending) {
    if (ahead) return TrainSgpPeriod(start, start.round() + 1, start.next_seed());
    return absl::OkStatus();
  }
  if (!ahead) return UploadPending(start.round(), round_deadline_);
  share_upload_round_ = start.round();
  const auto deadline = round_deadline_;
  share_upload_ = std::thread([this, deadline] { (void)Upload(deadline); });
  metrics_->AddOverlappedPeriod(options_.client_id);
  return TrainSgpPeriod(start, start.round() + 1, start.next_seed());
}

absl::Status EdgeClient::HandleShareReceipt(const protos::RoundReceipt& receipt) {
  const PendingUpdate& p = *state_.pending;
  // Delivered means every chunk counted; the coordinator delivers whole shares only.
  const bool delivered = receipt.update_id() == p.update_id &&
                         receipt.counted_chunks_size() == static_cast<int>(p.frames.size());
  if (delivered) {
    state_.pending.reset();
    state_.local.share.clear();
    state_.local.share_pw = 0;
  } else {
    ReabsorbShare();
  }
  return Persist();
}

}  // namespace fedlgc::edge_client
