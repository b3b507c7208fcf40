// Shared-scale TernGrad at the edge (see shared_scale_client.h).
#include "modes/fedavg/shared_scale_client.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "base/str.h"
#include "codecs/registry.h"
#include "codecs/terngrad.h"
#include "modes/fedavg/fedavg_client.h"
#include "modes/fedavg/fedavg_state.pb.h"

namespace fedlgc::modes {

bool SharedScaleClient::Runs(const protos::RoundStart& /*start*/,
                             const codecs::RoundKind& kind) const {
  return kind.shared_scale == codecs::Placement::kTop;
}

absl::Status SharedScaleClient::OnRoundStart(const protos::RoundStart& start, bool trained) {
  edge_client::ClientEnv& env = core_.env();
  edge_client::ClientState& state = env.state();
  const SystemTime deadline = edge_client::DeadlineOf(start);
  if (state.pending) return env.UploadPending(start.round(), deadline);  // a resumed upload
  if (trained) {  // the update of this round went back into the residual: it waits there
    scale_round_ = start.round();
    scale_version_ = start.model_version();
  }
  if (scale_round_ != start.round() || scale_version_ != start.model_version()) {
    auto update = TrainUpdate(env, start, deadline);
    if (!update.ok()) return update.status();
    if (update->empty()) return absl::OkStatus();  // the round moved on
    // The update waits in the residual for the round's scale (a restart finds it there).
    std::vector<float> v(core_.residual().begin(), core_.residual().end());
    if (v.size() != update->size()) v.assign(update->size(), 0.0f);
    for (size_t i = 0; i < v.size(); ++i) v[i] += (*update)[i];
    state.residual = std::move(v);
    core_.ResidualChanged();
    scale_round_ = start.round();
    scale_version_ = start.model_version();
    if (absl::Status st = env.Persist(); !st.ok()) return st;
  }
  scale_start_ = std::make_unique<protos::RoundStart>(start);
  if (start.fedavg().terngrad_scale() > 0) return SendWithScale(start.fedavg().terngrad_scale());
  auto made = codecs::MakeCodec(start.codec());
  if (!made.ok()) return made.status();
  const auto* tern = dynamic_cast<const codecs::TernGrad*>(made->get());
  if (tern == nullptr) return absl::InternalError(StrCat(start.codec(), " is not TernGrad"));
  // A residual of zeros says the smallest scale there is: its codes are zeros whatever
  // the round's.
  const float local = std::max(tern->LocalScale(state.residual), std::numeric_limits<float>::min());
  protos::ProgressReport report;
  report.set_client_id(env.client_id());
  report.set_round(start.round());
  report.mutable_fedavg()->set_terngrad_scale(local);
  const absl::Status st = env.Report(report, deadline);
  // The round moved on or its scale is set: the next RoundStart or the scale event says so.
  if (absl::IsFailedPrecondition(st) || absl::IsDeadlineExceeded(st)) return absl::OkStatus();
  return st;
}

std::optional<absl::Status> SharedScaleClient::OnModeEvent(const protos::ModeEvent& event) {
  if (!event.has_terngrad_scale()) return std::nullopt;
  return OnScale(event.terngrad_scale());
}

absl::Status SharedScaleClient::OnScale(const protos::TernGradScale& scale) {
  const edge_client::ClientState& state = core_.env().state();
  if (!scale_start_ || scale_start_->round() != scale.round() || state.pending ||
      scale_round_ != scale.round() || !(scale.scale() > 0)) {
    return absl::OkStatus();  // not this client's round, or sent already
  }
  return SendWithScale(scale.scale());
}

absl::Status SharedScaleClient::SendWithScale(float scale) {
  // What goes out is the residual, which holds the round's update: no update besides.
  const std::vector<float> none(core_.env().dim(), 0.0f);
  const protos::RoundStart start = *scale_start_;
  scale_start_.reset();
  return core_.EncodeAndUpload(start, none, scale, core_.env().clock().Now());
}

absl::Status SharedScaleClient::Load(const pb::FedAvgClientState* slot,
                                     const edge_client::ClientState& state) {
  if (slot != nullptr) {
    scale_round_ = slot->scale_round();
    scale_version_ = slot->scale_version();
  } else if (state.legacy) {
    scale_round_ = state.legacy->scale_round;
    scale_version_ = state.legacy->scale_version;
  }
  return absl::OkStatus();
}

void SharedScaleClient::Save(const edge_client::ClientState& /*state*/,
                             pb::FedAvgClientState* slot) const {
  slot->set_scale_round(scale_round_);
  slot->set_scale_version(scale_version_);
}

}  // namespace fedlgc::modes
