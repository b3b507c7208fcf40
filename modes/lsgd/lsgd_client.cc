// LSGD at the edge (see lsgd_client.h).
#include "modes/lsgd/lsgd_client.h"

#include <cmath>

#include "base/str.h"
#include "core/mixing.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {
namespace {

constexpr char kSlot[] = "lsgd";

}  // namespace

absl::Status LsgdClient::LoadState(const edge_client::ClientState& state) {
  auto m = LoadLocalModel(state, kSlot);
  if (!m.ok()) return m.status();
  local_ = *std::move(m);
  return absl::OkStatus();
}

absl::Status LsgdClient::SaveState(std::map<std::string, std::string>* slots) const {
  return SaveLocalModel(local_, kSlot, slots);
}

absl::Status LsgdClient::OnRoundStart(const protos::RoundStart& start) {
  if (!start.has_lsgd()) {
    return absl::InvalidArgumentError("an LSGD job's round start carries no LsgdRound");
  }
  edge_client::ClientState& state = env_.state();
  if (state.pending && state.pending->round != start.round()) {
    // A leader upload whose receipt never came. Nothing goes back: the next lead sends
    // its model minus the reference, which holds exactly what the coordinator decoded.
    state.pending.reset();
    if (absl::Status st = env_.Persist(); !st.ok()) return st;
  }
  round_ = {start.round(), start.model_version(),   start.seed(),
            start.codec(), start.max_chunk_bytes(), edge_client::DeadlineOf(start)};
  auto ready = EnsureLocalModel(env_, start, &local_);
  if (!ready.ok() || !*ready) return ready.status();
  LocalModel& m = local_;
  if (m.pulled_round < start.round()) {
    if (absl::Status st = ApplyPulls(start); !st.ok()) return RoundOver(st) ? absl::OkStatus() : st;
  }
  if (m.trained_round < start.round()) {
    auto loss = env_.TrainLocal(start, &m.x);
    if (!loss.ok()) return loss.status();
    m.loss = *loss;
    m.trained_round = start.round();
    if (absl::Status st = env_.Persist(); !st.ok()) return st;
  }
  if (absl::Status st = ReportLoss(start.round(), m.loss); !st.ok()) return st;
  // Elected before this start reached us (after a reconnect): lead now.
  if (start.lsgd().has_lead()) return OnLead(start.lsgd().lead());
  return absl::OkStatus();
}

absl::Status LsgdClient::ApplyPulls(const protos::RoundStart& start) {
  LocalModel& m = local_;
  for (const protos::Pull& pull : start.lsgd().pulls()) {
    if (!(pull.strength() > 0 && pull.strength() <= 1)) {
      return absl::InvalidArgumentError(StrCat("pull strength ", pull.strength()));
    }
    auto leader = env_.DownloadFloats(pull.blob(), pull.version(), round_.deadline);
    if (!leader.ok()) return leader.status();
    core::Pull(m.x, *leader, pull.strength());
  }
  m.pulled_round = start.round();
  return env_.Persist();
}

absl::Status LsgdClient::ReportLoss(uint64_t round, double loss) {
  if (!std::isfinite(loss)) return absl::OkStatus();
  protos::ProgressReport report;
  report.set_round(round);
  report.mutable_lsgd()->set_loss(loss);
  return env_.Report(report, round_.deadline);
}

absl::Status LsgdClient::OnModeEvent(const protos::ModeEvent& event) {
  if (event.has_lsgd_lead()) return OnLead(event.lsgd_lead());
  return absl::OkStatus();
}

absl::Status LsgdClient::OnLead(const protos::LsgdLead& lead) {
  edge_client::ClientState& state = env_.state();
  const LocalModel& m = local_;
  if (lead.round() != m.trained_round || lead.round() != round_.round) {
    return absl::OkStatus();  // stale
  }
  if (!state.pending || state.pending->round != lead.round()) {
    auto ref =
        env_.DownloadFloats(lead.reference_blob(), lead.reference_version(), round_.deadline);
    if (!ref.ok()) return RoundOver(ref.status()) ? absl::OkStatus() : ref.status();
    auto codec = codec_.Get(round_.codec);
    if (!codec.ok()) return codec.status();
    std::vector<float> delta(m.x.size());
    for (size_t i = 0; i < delta.size(); ++i) delta[i] = m.x[i] - (*ref)[i];
    const auto t0 = env_.clock().Now();
    auto scaled = core::EncodeScaled(delta, **codec,
                                     RoundEncodeOptions(round_.seed, round_.max_chunk_bytes, env_));
    if (!scaled.ok()) return scaled.status();
    env_.ObserveEncode(lead.round(), t0);
    edge_client::PendingUpdate p = env_.NewPending(lead.round(), round_.model_version);
    p.frames = std::move(scaled->frames);
    p.scales = std::move(scaled->scales);
    state.pending = std::move(p);
    if (absl::Status st = env_.Persist(); !st.ok()) return st;
  }
  return env_.UploadPending(lead.round(), round_.deadline);
}

absl::Status LsgdClient::OnReceipt(const protos::RoundReceipt& receipt) {
  edge_client::ClientState& state = env_.state();
  if (!state.pending || state.pending->round != receipt.round()) return absl::OkStatus();
  // A lead's receipt: nothing to restore (the reference holds what the coordinator
  // decoded, so the next lead carries what this one lost).
  state.pending.reset();
  return env_.Persist();
}

}  // namespace fedlgc::modes
