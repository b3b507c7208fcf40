// The smooth mode at the edge (see smooth_client.h).
#include "modes/smooth/smooth_client.h"

#include <cmath>
#include <utility>

#include "core/mixing.h"
#include "modes/fedavg/fedavg_client.h"
#include "modes/smooth/smooth_driver.h"
#include "modes/smooth/smooth_state.pb.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {
namespace {

constexpr char kSlot[] = "smooth";

}  // namespace

absl::Status SmoothClient::LoadState(const edge_client::ClientState& state) {
  auto it = state.modes.find(kSlot);
  if (it == state.modes.end()) return absl::OkStatus();  // a client's first run
  SmoothClientState s;
  if (!s.ParseFromString(it->second)) {
    return absl::DataLossError("the client state's smooth slot does not parse");
  }
  average_.values.assign(s.average().begin(), s.average().end());
  average_.folded = s.folded();
  if (s.has_in_flight()) {
    next_.Set(s.in_flight_update_id(),
              Average{{s.in_flight_average().begin(), s.in_flight_average().end()},
                      s.in_flight_folded()});
  }
  return absl::OkStatus();
}

absl::Status SmoothClient::SaveState(std::map<std::string, std::string>* slots) const {
  SmoothClientState s;
  s.mutable_average()->Assign(average_.values.begin(), average_.values.end());
  s.set_folded(average_.folded);
  if (next_.held()) {
    s.set_has_in_flight(true);
    s.set_in_flight_update_id(next_.update_id());
    s.mutable_in_flight_average()->Assign(next_.held()->values.begin(), next_.held()->values.end());
    s.set_in_flight_folded(next_.held()->folded);
  }
  if (!s.SerializeToString(&(*slots)[kSlot])) {
    return absl::ResourceExhaustedError("the smooth slot is past protobuf's 2 GiB");
  }
  return absl::OkStatus();
}

absl::Status SmoothClient::OnRoundStart(const protos::RoundStart& start) {
  edge_client::ClientState& state = env_.state();
  const edge_client::SystemTime deadline = edge_client::DeadlineOf(start);
  if (state.pending && state.pending->round == start.round() &&
      state.pending->model_version == start.model_version() && next_.Of(state) != nullptr) {
    return env_.UploadPending(start.round(), deadline);  // the round's start again
  }
  if (state.pending) {
    // An update whose receipt never came: as far as this client knows nothing of it
    // counted, so the average stays where it was.
    state.pending.reset();
    next_.Clear();
  }
  auto update = TrainUpdate(env_, start, deadline);
  if (!update.ok()) return update.status();
  if (update->empty()) return absl::OkStatus();  // the round moved on
  Average next{std::vector<float>(update->size(), 0.0f), average_.folded + 1};
  if (average_.values.size() != update->size()) next.folded = 1;  // a model of another size
  const std::vector<float>& past =
      average_.values.size() == update->size() ? average_.values : next.values;
  const double correction = 1.0 / (1.0 - std::pow(kSmoothBeta, static_cast<double>(next.folded)));
  std::vector<float> sent(update->size());
  for (size_t i = 0; i < sent.size(); ++i) {
    next.values[i] = static_cast<float>(kSmoothBeta * past[i] + (1 - kSmoothBeta) * (*update)[i]);
    sent[i] = static_cast<float>(next.values[i] * correction);
  }
  auto codec = codec_.Get(start.codec());
  if (!codec.ok()) return codec.status();
  const auto t0 = env_.clock().Now();
  auto scaled = core::EncodeScaled(sent, **codec,
                                   RoundEncodeOptions(start.seed(), start.max_chunk_bytes(), env_));
  if (!scaled.ok()) return scaled.status();
  env_.ObserveEncode(start.round(), t0);
  edge_client::PendingUpdate p = env_.NewPending(start.round(), start.model_version());
  p.frames = std::move(scaled->frames);
  p.scales = std::move(scaled->scales);
  next_.Set(p.update_id, std::move(next));
  state.pending = std::move(p);
  if (absl::Status st = env_.Persist(); !st.ok()) return st;
  return env_.UploadPending(start.round(), deadline);
}

absl::Status SmoothClient::OnReceipt(const protos::RoundReceipt& receipt) {
  edge_client::ClientState& state = env_.state();
  if (!state.pending || state.pending->round != receipt.round()) return absl::OkStatus();
  const Average* next = next_.Of(state);
  // The driver counts whole updates or nothing.
  if (next != nullptr &&
      static_cast<size_t>(receipt.counted_chunks_size()) == state.pending->frames.size()) {
    average_ = *next;
  }
  next_.Clear();
  state.pending.reset();
  return env_.Persist();
}

}  // namespace fedlgc::modes
