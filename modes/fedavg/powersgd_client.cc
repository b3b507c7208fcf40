// Two-phase PowerSGD at the edge (see powersgd_client.h).
#include "modes/fedavg/powersgd_client.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "base/log.h"
#include "base/str.h"
#include "codecs/frame.h"
#include "codecs/input_error.h"
#include "core/float_bytes.h"
#include "modes/fedavg/fedavg_client.h"
#include "modes/fedavg/fedavg_state.pb.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {

absl::Status PowerSgdClient::EnsureMath(const std::string& spec) {
  if (math_ && spec_ == spec) return absl::OkStatus();
  auto made = codecs::PowerSgdTwoPhase::Create(spec, env_.layout());
  if (!made.ok()) return made.status();
  math_ = *std::move(made);
  spec_ = spec;
  return absl::OkStatus();
}

namespace {

// The tag a pending payload was made against (the first u32 of its body); 0 when it has
// none that parses.
uint32_t PendingTag(const edge_client::PendingUpdate& p) {
  if (p.frames.size() != 1) return 0;
  auto view = codecs::ParseFrame(p.frames[0], codecs::FrameLimits());
  if (!view.ok() || view->body.size() < 4) return 0;
  uint32_t tag = 0;
  std::memcpy(&tag, view->body.data(), 4);
  return tag;
}

// A factor's columns are orthonormal or zero: no value outside [-1, 1].
absl::Status CheckFactor(std::span<const float> factor) {
  for (float v : factor) {
    if (!std::isfinite(v) || std::fabs(v) > 1.0f + 1e-3f) {
      return absl::InvalidArgumentError("a PowerSGD factor with a value outside [-1, 1]");
    }
  }
  return absl::OkStatus();
}

// What a payload may carry (the coordinator refuses the rest).
bool Sendable(std::span<const float> v) {
  for (float x : v) {
    if (!std::isfinite(x) || std::fabs(x) > 1e30f) return false;
  }
  return true;
}

}  // namespace

absl::Status PowerSgdClient::OnRoundStart(const protos::RoundStart& start) {
  edge_client::ClientState& state = env_.state();
  if (absl::Status st = EnsureMath(start.codec()); !st.ok()) return st;
  deadline_ = edge_client::DeadlineOf(start);
  // The round's query and factor first: nothing trains on a round start that lacks them.
  const protos::PowerSgdRound& round = start.fedavg().powersgd();
  auto query =
      core::FloatsFromBytes(round.query(), math_->query_floats(), "the round's PowerSGD query");
  if (!query.ok()) return query.status();
  std::vector<float> factor;
  if (!round.factor().empty()) {
    auto f = core::FloatsFromBytes(round.factor(), math_->projection_floats(),
                                   "the round's PowerSGD factor");
    if (!f.ok()) return f.status();
    factor = *std::move(f);
    if (absl::Status st = CheckFactor(factor); !st.ok()) return st;
  }
  if (state.pending) {
    // This round's update (the caller restored any other's). The round may have moved past
    // it (a restarted coordinator drew another query, or made another factor): what it sent
    // goes back into the residual and M goes out again against the round's current state.
    const edge_client::PendingUpdate& p = *state.pending;
    const PowerSgdInFlight* f = in_flight_.Of(state);
    const uint32_t phase = f ? f->phase : 0;
    const bool current = phase == 1 ? PendingTag(p) == codecs::PowerSgdTwoPhase::Tag(*query)
                         : phase == 2
                             ? !factor.empty() && codecs::PowerSgdTwoPhase::Tag(factor) ==
                                                      codecs::PowerSgdTwoPhase::Tag(f->factor)
                             : false;
    if (current && (phase == 2 || factor.empty())) {
      // A P resumed is still the round's first half.
      return env_.UploadPending(start.round(), deadline_, std::nullopt,
                                phase == 1 ? ClientEnv::Half::kFirstHalf : ClientEnv::Half::kWhole);
    }
    if (absl::Status st = Restore(p); !st.ok()) return st;
    state.pending.reset();
  } else {
    auto update = TrainUpdate(env_, start, deadline_);
    if (!update.ok()) return update.status();
    if (update->empty()) return absl::OkStatus();  // the round moved on
    const auto t0 = env_.clock().Now();
    // M = update + residual waits in the residual until the factor is in.
    std::vector<float> m = *std::move(update);
    if (state.residual.size() == m.size()) {
      for (size_t i = 0; i < m.size(); ++i) m[i] += state.residual[i];
    }
    if (!Sendable(m)) {
      // Skipped like any non-finite update (the edge client's HandleEvent); the residual
      // stays as it was.
      return codecs::NonFiniteError("update plus residual is not finite (or above 1e30)");
    }
    state.residual = std::move(m);
    state.codec = start.codec();
    residual_changed_();
    env_.ObserveEncode(start.round(), t0);
  }
  if (!factor.empty()) return SendMessage(start.round(), start.model_version(), std::move(factor));
  return SendProjection(start.round(), start.model_version(), *query);
}

absl::Status PowerSgdClient::SendProjection(uint64_t round, uint64_t model_version,
                                            std::span<const float> query) {
  edge_client::ClientState& state = env_.state();
  if (state.residual.size() != math_->dim()) {
    return absl::InvalidArgumentError("the residual does not match the job's model");
  }
  const std::vector<float> p = math_->Project(state.residual, query);
  if (!Sendable(p)) return codecs::NonFiniteError("the PowerSGD projection P overflowed");
  edge_client::PendingUpdate pending = env_.NewPending(round, model_version);
  pending.frames = {
      math_->Frame(codecs::kPowerSgdProjectionSpec, codecs::PowerSgdTwoPhase::Tag(query), p)};
  in_flight_.Set(pending.update_id, {1, {}});
  state.pending = std::move(pending);
  if (absl::Status st = env_.Persist(); !st.ok()) return st;
  return env_.UploadPending(round, deadline_, std::nullopt, ClientEnv::Half::kFirstHalf);
}

bool PowerSgdClient::Runs(const protos::RoundStart& /*start*/,
                          const codecs::RoundKind& kind) const {
  return kind.two_phase == codecs::Placement::kTop;
}

std::optional<absl::Status> PowerSgdClient::OnModeEvent(const protos::ModeEvent& event) {
  if (!event.has_powersgd_factor()) return std::nullopt;
  return OnFactor(event.powersgd_factor());
}

absl::Status PowerSgdClient::Load(const pb::FedAvgClientState* slot,
                                  const edge_client::ClientState& state) {
  if (slot == nullptr) {
    const auto& l = state.legacy;
    if (l && l->psgd_phase != 0 && state.pending) {
      in_flight_.Set(state.pending->update_id, {l->psgd_phase, l->psgd_factor});
    }
    return absl::OkStatus();
  }
  if (slot->psgd_phase() > 2) {
    return absl::DataLossError("the client state's fedavg slot is malformed");
  }
  if (slot->psgd_phase() != 0) {
    auto factor = core::FloatsFromBytes(slot->psgd_factor(), "the saved PowerSGD factor");
    if (!factor.ok()) return factor.status();
    in_flight_.Set(slot->psgd_update_id(), {slot->psgd_phase(), *std::move(factor)});
  }
  return absl::OkStatus();
}

void PowerSgdClient::Save(const edge_client::ClientState& state,
                          pb::FedAvgClientState* slot) const {
  if (const PowerSgdInFlight* f = in_flight_.Of(state)) {
    slot->set_psgd_update_id(in_flight_.update_id());
    slot->set_psgd_phase(f->phase);
    slot->set_psgd_factor(core::FloatsToBytes(f->factor));
  }
}

absl::Status PowerSgdClient::OnFactor(const protos::PowerSgdFactor& f) {
  edge_client::ClientState& state = env_.state();
  const PowerSgdInFlight* in_flight = in_flight_.Of(state);
  if (!state.pending || state.pending->round != f.round() || in_flight == nullptr || !math_) {
    return absl::OkStatus();  // not waiting for this one
  }
  auto factor =
      core::FloatsFromBytes(f.factor(), math_->projection_floats(), "the PowerSGD factor");
  if (!factor.ok()) return factor.status();
  const edge_client::PendingUpdate& p = *state.pending;
  if (in_flight->phase == 2) {
    // Sent against this factor already; another one (a restarted coordinator's) replaces it.
    if (codecs::PowerSgdTwoPhase::Tag(*factor) ==
        codecs::PowerSgdTwoPhase::Tag(in_flight->factor)) {
      return absl::OkStatus();
    }
    if (absl::Status st = Restore(p); !st.ok()) return st;
  }
  return SendMessage(f.round(), p.model_version, *std::move(factor));
}

absl::Status PowerSgdClient::SendMessage(uint64_t round, uint64_t model_version,
                                         std::vector<float> factor) {
  edge_client::ClientState& state = env_.state();
  if (absl::Status st = CheckFactor(factor); !st.ok()) return st;
  if (state.residual.size() != math_->dim()) {
    return absl::InvalidArgumentError("the residual does not match the job's model");
  }
  std::vector<float>& m = state.residual;
  const std::vector<float> message = math_->Message(m, factor);
  if (!Sendable(message)) return codecs::NonFiniteError("the PowerSGD message Q overflowed");
  std::vector<float> sent(m.size(), 0.0f);
  math_->AddRebuilt(factor, message, 1.0, sent);
  for (size_t i = 0; i < m.size(); ++i) m[i] -= sent[i];
  // A new update id: the coordinator's copy of this client's P is replaced.
  edge_client::PendingUpdate pending = env_.NewPending(round, model_version);
  pending.frames = {
      math_->Frame(codecs::kPowerSgdMessageSpec, codecs::PowerSgdTwoPhase::Tag(factor), message)};
  in_flight_.Set(pending.update_id, {2, std::move(factor)});
  state.pending = std::move(pending);
  residual_changed_();
  if (absl::Status st = env_.Persist(); !st.ok()) return st;
  return env_.UploadPending(round, deadline_);
}

absl::Status PowerSgdClient::OnReceipt(const protos::RoundReceipt& receipt) {
  edge_client::ClientState& state = env_.state();
  if (!state.pending || state.pending->round != receipt.round()) return absl::OkStatus();
  const edge_client::PendingUpdate& p = *state.pending;
  bool counted = false;
  if (receipt.update_id() == p.update_id) {
    for (uint32_t c : receipt.counted_chunks()) counted |= c == 0;
  }
  if (!counted) {
    if (absl::Status st = Restore(p); !st.ok()) return st;
  }
  state.pending.reset();
  return env_.Persist();
}

absl::Status PowerSgdClient::Restore(const edge_client::PendingUpdate& p) {
  // Phase 1 sent nothing the residual lacks: M is still all there.
  edge_client::ClientState& state = env_.state();
  const PowerSgdInFlight* f =
      state.pending && state.pending->update_id == p.update_id ? in_flight_.Of(state) : nullptr;
  if (f == nullptr || f->phase != 2) return absl::OkStatus();
  const std::vector<float>& factor = f->factor;
  absl::Status st = EnsureMath(state.codec);
  absl::StatusOr<std::vector<float>> message = absl::DataLossError("no frame");
  if (st.ok() && p.frames.size() == 1) {
    auto view = codecs::ParseFrame(p.frames[0], codecs::FrameLimits());
    if (view.ok()) {
      message = codecs::PowerSgdTwoPhase::ReadBody(
          view->body, codecs::PowerSgdTwoPhase::Tag(factor), math_->message_floats());
    } else {
      message = view.status();
    }
  }
  if (st.ok()) st = message.status();
  if (st.ok() &&
      (factor.size() != math_->projection_floats() || state.residual.size() != math_->dim())) {
    st = absl::DataLossError("it does not match the job's model");
  }
  if (!st.ok()) {
    // A state file of another job or damaged past its checksum: its values are lost, and
    // keeping the update would stall every later round.
    log::Warning(env_.client_id(), "a PowerSGD update in flight cannot be restored (%s): dropped",
                 std::string(st.message()).c_str());
    env_.metrics().AddChunks(env_.client_id(), "dropped", 1);
    return absl::OkStatus();
  }
  math_->AddRebuilt(factor, *message, 1.0, state.residual);
  residual_changed_();
  return absl::OkStatus();
}

}  // namespace fedlgc::modes
