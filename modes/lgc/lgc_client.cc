// LGC at the edge (see lgc_client.h).
#include "modes/lgc/lgc_client.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "base/log.h"
#include "base/str.h"
#include "codecs/dense_codec.h"
#include "codecs/frame.h"
#include "codecs/registry.h"
#include "core/float_bytes.h"
#include "core/state_message.h"
#include "modes/lgc/lgc_codes.h"
#include "modes/lgc/lgc_stage.h"
#include "modes/lgc/lgc_state.pb.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {
namespace {

// One frame over the whole model (LGC payloads are not chunked).
std::string Framed(std::string_view spec, uint64_t dim, const std::string& body) {
  std::string frame;
  const size_t offset = codecs::BeginFrame(spec, dim, 0, dim, &frame);
  frame += body;
  codecs::FinishFrame(offset, &frame);
  return frame;
}

constexpr char kSlot[] = "lgc";

// A download or weight fetch that ran out of the round's time: the round goes on without
// this client's payload (it stays in the residual).
bool OutOfTime(const absl::Status& st) { return absl::IsDeadlineExceeded(st); }

}  // namespace

absl::Status LgcClient::EnsurePlan(const std::string& codec) {
  if (plan_ && spec_ == codec) return absl::OkStatus();
  auto plan = lgc::ParseLgcSpec(codec);
  if (!plan.ok()) return plan.status();
  if (!plan->has_value()) {
    return absl::InvalidArgumentError(StrCat("an LGC round with codec ", codec));
  }
  plan_ = **plan;
  spec_ = codec;
  return absl::OkStatus();
}

absl::Status LgcClient::OnRoundStart(const protos::RoundStart& start) {
  if (!start.has_lgc()) {
    return absl::InvalidArgumentError("an LGC job's round start carries no LgcRound");
  }
  deadline_ = edge_client::DeadlineOf(start);
  edge_client::ClientState& state = env_.state();
  if (state.pending && (state.pending->round != start.round() ||
                        state.pending->model_version != start.model_version())) {
    // An update whose round ended without a receipt reaching us: nothing of it counted
    // as far as we can know, so all of it goes back into the residual.
    if (absl::Status st = Restore(*state.pending); !st.ok()) return st;
    state.pending.reset();
  }
  const std::optional<LgcStage> stage = FromProto(start.lgc().stage());
  if (!stage) {
    return absl::InvalidArgumentError(StrCat("an LGC round start of stage ",
                                             static_cast<int>(start.lgc().stage()),
                                             ", which this client does not know"));
  }
  if (*stage == LgcStage::kWarmUp) return plain_.OnRoundStart(start);
  return RunPayloadRound(start);
}

absl::Status LgcClient::RunPayloadRound(const protos::RoundStart& start) {
  if (absl::Status st = EnsurePlan(start.codec()); !st.ok()) return st;
  const std::string& sb = start.lgc().support();
  if (sb.size() % 4 != 0) return absl::InvalidArgumentError("LGC round with a torn support");
  round_encoder_version_ = start.lgc().encoder_version();
  round_k_ = start.lgc().support_size();
  edge_client::ClientState& state = env_.state();
  if (!state.pending) {
    if (absl::Status st = BeginUpdate(start); !st.ok() || !state.pending) return st;
  }
  if (state.pending->frames.empty()) return ResumeWaiting(start);
  return env_.UploadPending(start.round(), deadline_);
}

absl::Status LgcClient::BeginUpdate(const protos::RoundStart& start) {
  const protos::LgcRound& lgc = start.lgc();
  const LgcStage stage = FromProto(lgc.stage()).value_or(LgcStage::kWarmUp);
  if (stage == LgcStage::kAutoencoder) {
    // Off the round's critical path: a follower needs its decoder once the leader's latent
    // arrives, a leader with its own (fetched below with the encoder).
    const absl::Status st = EnsureWeights(/*decoder=*/true, lgc.encoder_version(), support_size());
    if (OutOfTime(st)) return absl::OkStatus();
    if (!st.ok()) return st;
  }
  auto update = TrainUpdate(env_, start, deadline_);
  if (!update.ok()) return update.status();
  if (update->empty()) return absl::OkStatus();
  // u = update + residual; what is not sent of it stays in the residual.
  std::vector<float>& u = *update;
  edge_client::ClientState& state = env_.state();
  if (state.residual.size() == u.size()) {
    for (size_t i = 0; i < u.size(); ++i) u[i] += state.residual[i];
  }
  PendingUpdate p = env_.NewPending(start.round(), start.model_version());
  LgcInFlight f;
  f.stage = stage;
  if (lgc.leader()) return SendAsLeader(start, std::move(u), std::move(p), std::move(f));
  // A follower waits for the leader's payload: all of u stays in the residual until
  // then, nothing is taken out for a support yet.
  state.residual = std::move(u);
  plain_.ResidualChanged();
  log::Info(env_.client_id(), "round %llu: waiting for the leader's support",
            static_cast<unsigned long long>(p.round));
  in_flight_.Set(p.update_id, std::move(f));
  state.pending = std::move(p);
  return env_.Persist();
}

absl::Status LgcClient::SendAsLeader(const protos::RoundStart& start, std::vector<float> u,
                                     PendingUpdate p, LgcInFlight f) {
  const protos::LgcRound& lgc = start.lgc();
  // The leader picks this round's support: its own top-k.
  f.support = lgc::SelectSupport(u, round_support_size());
  f.values = lgc::Gather(u, f.support);
  if (f.stage == LgcStage::kAutoencoder) {
    // Fetched before the clock starts: the encode time is the encoder's, not the link's.
    const absl::Status st =
        EnsureWeights(/*decoder=*/false, lgc.encoder_version(), f.support.size());
    if (OutOfTime(st)) return KeepForLater(std::move(u));
    if (!st.ok()) return st;
  }
  const auto t0 = env_.clock().Now();
  auto frame = LeaderFrame(p.round, lgc.encoder_version(), u, &f);
  if (!frame.ok()) return OutOfTime(frame.status()) ? KeepForLater(std::move(u)) : frame.status();
  env_.ObserveEncode(start.round(), t0);
  p.frames = {std::move(frame).value()};
  SetResidual(u, f);
  in_flight_.Set(p.update_id, std::move(f));
  env_.state().pending = std::move(p);
  return env_.Persist();
}

absl::Status LgcClient::KeepForLater(std::vector<float> u) {
  // The round ran out of time before this update could be sent: all of it (update plus
  // residual) waits in the residual for the next round.
  env_.state().residual = std::move(u);
  plain_.ResidualChanged();
  return env_.Persist();
}

absl::Status LgcClient::ResumeWaiting(const protos::RoundStart& start) {
  const protos::LgcRound& lgc = start.lgc();
  // Promoted while away: it leads now.
  if (lgc.leader()) {
    protos::LgcPromote promote;
    promote.set_round(start.round());
    promote.set_encoder_version(lgc.encoder_version());
    return OnPromote(promote);
  }
  // The leader's support came with the RoundStart (this client reconnected after the
  // leader delivered), or it comes as an LgcLatent event.
  if (lgc.support().empty() && lgc.leader_cells().empty()) return absl::OkStatus();
  protos::LgcLatent latent;
  latent.set_round(start.round());
  latent.set_support(lgc.support());
  latent.set_latent(lgc.latent());
  latent.set_leader_cells(lgc.leader_cells());
  return OnLatent(latent);
}

absl::Status LgcClient::OnModeEvent(const protos::ModeEvent& event) {
  if (event.has_lgc_promote()) return OnPromote(event.lgc_promote());
  if (event.has_lgc_latent()) return OnLatent(event.lgc_latent());
  return absl::OkStatus();
}

void LgcClient::SetResidual(std::span<const float> u, const LgcInFlight& f) {
  // The support's values minus what the coordinator rebuilds of them (f.values): the
  // miss. sent + residual == u.
  edge_client::ClientState& state = env_.state();
  state.residual.assign(u.begin(), u.end());
  for (size_t j = 0; j < f.support.size(); ++j) {
    state.residual[f.support[j]] = u[f.support[j]] - f.values[j];
  }
  plain_.ResidualChanged();
}

absl::Status LgcClient::OnLatent(const protos::LgcLatent& latent) {
  edge_client::ClientState& state = env_.state();
  LgcInFlight* f = in_flight_.Of(state);
  if (!state.pending || state.pending->round != latent.round() || f == nullptr ||
      !state.pending->frames.empty() || !plan_) {
    return absl::OkStatus();  // not waiting for this one
  }
  PendingUpdate& p = *state.pending;
  absl::StatusOr<std::vector<uint32_t>> support;
  absl::StatusOr<std::vector<float>> z;
  if (f->stage == LgcStage::kCells) {
    // The leader's body; its decoded values are the prediction.
    const std::string& cells = latent.leader_cells();
    auto lc = lgc::UnpackLeaderCells(
        *plan_,
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(cells.data()), cells.size()),
        env_.dim(), round_support_size());
    if (!lc.ok()) return absl::InvalidArgumentError(lc.status().message());
    support = std::move(lc->support);
    z = std::move(lc->values);
  } else {
    support = lgc::SupportFromBytes(latent.support(), round_support_size(), env_.dim());
    if (!support.ok()) return absl::InvalidArgumentError(support.status().message());
    const std::string& bytes = latent.latent();
    z = core::FloatsFromBytes(bytes.substr(0, bytes.size() / 4 * 4), bytes.size() / 4,
                              "LGC latent");
  }
  if (!z.ok()) return z.status();
  const uint32_t reference = lgc::ReferenceOf(*support, *z);
  const auto t0 = env_.clock().Now();
  const std::vector<float> v = lgc::Gather(state.residual, *support);
  std::vector<float> sent;
  std::string body;
  std::string_view spec;
  if (f->stage == LgcStage::kCells) {
    // The leader's decoded values are the prediction: send the miss in plan_->bits bits.
    if (z->size() != v.size()) {
      return absl::InvalidArgumentError(
          StrCat("LGC leader values: ", z->size(), " for a support of ", v.size()));
    }
    lgc::BitCorrection c = lgc::CorrectBits(v, *z, plan_->bits);
    c.reference = reference;
    auto encoded = lgc::EncodeBitCorrection(c);
    if (encoded.ok()) encoded = lgc::PackBitCorrection(*plan_, std::move(encoded).value(), c);
    if (!encoded.ok()) return encoded.status();
    spec = lgc::kBitCorrectionSpec;
    body = std::move(encoded).value();
    LogMiss(p.round, v, c.sent, false);
    sent = std::move(c.sent);
  } else {
    auto c = PredictAndCorrect(p.round, v, *z, round_encoder_version_, false);
    if (OutOfTime(c.status())) return absl::OkStatus();
    if (!c.ok()) return c.status();
    c->reference = reference;
    auto encoded = lgc::EncodeCorrection(*c);
    if (!encoded.ok()) return encoded.status();
    spec = lgc::kCorrectionSpec;
    body = std::move(encoded).value();
    sent = std::move(c->sent);
  }
  std::string frame = Framed(spec, env_.dim(), body);
  env_.ObserveEncode(p.round, t0);
  // The residual held all of u: what is sent of the support leaves it.
  const std::vector<float> u = state.residual;
  f->support = *std::move(support);
  f->values = std::move(sent);
  p.frames = {std::move(frame)};
  SetResidual(u, *f);
  if (absl::Status st = env_.Persist(); !st.ok()) return st;
  return env_.UploadPending(p.round, deadline_);
}

void LgcClient::LogMiss(uint64_t round, std::span<const float> v, std::span<const float> sent,
                        bool leader) {
  double vv = 0, ee = 0;
  for (size_t j = 0; j < v.size(); ++j) {
    vv += double(v[j]) * v[j];
    ee += (double(v[j]) - sent[j]) * (double(v[j]) - sent[j]);
  }
  const double rel = std::sqrt(ee / std::max(vv, 1e-30));
  if (!std::isfinite(rel)) return;
  log::Info(env_.client_id(), "round %llu: LGC reconstruction error %.3f (%s)",
            static_cast<unsigned long long>(round), rel, leader ? "leader" : "follower");
  env_.AppendRoundLog({round, {{"lgc_relative_error", rel}, {"lgc_leader", leader ? 1.0 : 0.0}}});
}

absl::Status LgcClient::OnPromote(const protos::LgcPromote& promote) {
  edge_client::ClientState& state = env_.state();
  LgcInFlight* f = in_flight_.Of(state);
  if (!state.pending || state.pending->round != promote.round() || !plan_ || f == nullptr) {
    return absl::OkStatus();  // nothing of that round here
  }
  PendingUpdate& p = *state.pending;
  // u again: the residual plus what was taken out for the support (none while waiting).
  std::vector<float> u = state.residual;
  for (size_t j = 0; j < f->support.size(); ++j) u[f->support[j]] += f->values[j];
  LgcInFlight lead;
  lead.stage = f->stage;
  // A leader's support is its own top-k.
  lead.support = lgc::SelectSupport(u, round_support_size());
  lead.values = lgc::Gather(u, lead.support);
  auto frame = LeaderFrame(p.round, promote.encoder_version(), u, &lead);
  if (!frame.ok()) return OutOfTime(frame.status()) ? absl::OkStatus() : frame.status();
  *f = std::move(lead);
  p.frames = {std::move(frame).value()};
  SetResidual(u, *f);
  p.update_id = env_.NewUpdateId();
  in_flight_.Rebind(p.update_id);
  if (absl::Status st = env_.Persist(); !st.ok()) return st;
  log::Info(env_.client_id(), "leading LGC round %llu",
            static_cast<unsigned long long>(promote.round()));
  return env_.UploadPending(promote.round(), deadline_);
}

absl::Status LgcClient::OnReceipt(const protos::RoundReceipt& receipt) {
  edge_client::ClientState& state = env_.state();
  if (!state.pending || state.pending->round != receipt.round()) return absl::OkStatus();
  if (in_flight_.Of(state) == nullptr) return plain_.OnReceipt(receipt);
  const PendingUpdate& p = *state.pending;
  // One chunk: it counted or the whole update goes back (a follower that never got its
  // leader's payload has no chunk: its update is all in the residual already).
  const bool counted = receipt.update_id() == p.update_id && !p.frames.empty() &&
                       std::find(receipt.counted_chunks().begin(), receipt.counted_chunks().end(),
                                 0u) != receipt.counted_chunks().end();
  if (!counted) {
    if (absl::Status st = Restore(p); !st.ok()) return st;
    if (!p.frames.empty()) env_.metrics().AddChunks(env_.client_id(), "lost", p.frames.size());
  }
  state.pending.reset();
  return env_.Persist();
}

absl::Status LgcClient::Restore(const PendingUpdate& p) {
  edge_client::ClientState& state = env_.state();
  const LgcInFlight* f =
      state.pending && state.pending->update_id == p.update_id ? in_flight_.Of(state) : nullptr;
  if (f == nullptr) return plain_.Restore(p);
  if (state.residual.size() != env_.dim()) state.residual.assign(env_.dim(), 0.0f);
  for (size_t j = 0; j < f->support.size(); ++j) {
    state.residual[f->support[j]] += f->values[j];
  }
  // A codec used again later starts from this residual.
  plain_.ResidualChanged();
  return absl::OkStatus();
}

absl::Status LgcClient::EnsureWeights(bool decoder, uint64_t version, size_t k) {
  std::unique_ptr<autoencoder::Autoencoder>& held = decoder ? decoder_ : encoder_;
  uint64_t& held_version = decoder ? decoder_version_ : encoder_version_;
  if (held && held_version == version && held->length() == static_cast<int64_t>(k))
    return absl::OkStatus();
  auto bytes = env_.DownloadBlob(decoder ? "lgc-decoder" : "encoder", version, deadline_);
  if (!bytes.ok()) return bytes.status();
  autoencoder::AeOptions ao;
  // A decoder runs on the CPU, as the coordinator's rebuild of its output does.
  ao.device = decoder ? "cpu" : env_.device();
  auto ae = autoencoder::Autoencoder::Create(static_cast<int64_t>(k), ao);
  if (!ae.ok()) return ae.status();
  const absl::Status st =
      decoder ? (*ae)->LoadDecoder(env_.client_id(), *bytes) : (*ae)->LoadEncoder(*bytes);
  if (!st.ok()) return st;
  held = std::move(ae).value();
  held_version = version;
  return absl::OkStatus();
}

absl::StatusOr<std::string> LgcClient::LeaderFrame(uint64_t round, uint64_t encoder_version,
                                                   std::span<const float> u, LgcInFlight* f) {
  auto body = LeaderBody(round, encoder_version, u, f);
  if (!body.ok()) return body.status();
  return Framed(f->stage == LgcStage::kCells ? lgc::kLeaderCellsSpec : lgc::kLeaderSpec, env_.dim(),
                *body);
}

absl::StatusOr<std::string> LgcClient::LeaderBody(uint64_t round, uint64_t encoder_version,
                                                  std::span<const float> u, LgcInFlight* f) {
  const size_t k = f->support.size();
  if (f->stage == LgcStage::kCells) {
    // The support as a set, the values in cells; what they decode to is what counts.
    f->support = lgc::SelectSupportSet(u, k);
    const std::vector<float> v = lgc::Gather(u, f->support);
    std::vector<float> sent;
    std::string body = lgc::EncodeLeaderCells(f->support, v, env_.dim(), &sent);
    LogMiss(round, v, sent, true);
    f->values = std::move(sent);
    return lgc::PackLeaderCells(*plan_, std::move(body), f->support, env_.dim());
  }
  // Stage 3: the support in value order and the latent of the values on it.
  lgc::LeaderPayload lp;
  lp.support = f->support;
  auto latent_codec = codecs::MakeCodec(plan_->latent);
  if (!latent_codec.ok()) return latent_codec.status();
  if (absl::Status st = EnsureWeights(false, encoder_version, k); !st.ok()) return st;
  std::vector<float> normalized = f->values;
  const float scale = lgc::RmsScale(normalized);
  for (float& x : normalized) x /= scale;
  auto latent = encoder_->Encode(normalized);
  if (!latent.ok()) return latent.status();
  lp.latent = std::move(latent).value();
  lp.innovation.assign(k, 0.0f);  // first the latent alone (see below)
  const auto& dense = static_cast<const codecs::DenseCodec&>(**latent_codec);
  auto encoded = lgc::EncodeLeader(lp, env_.dim(), dense, round);
  if (!encoded.ok()) return encoded;
  // The latent as the coordinator will decode it, and this client's prediction from it
  // (the latent's bytes do not depend on the innovation: same codec, same seed).
  const auto view =
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(encoded->data()), encoded->size());
  auto sent = lgc::DecodeLeader(view, env_.dim(), dense, lp.latent.size());
  if (!sent.ok()) return sent.status();
  auto c = PredictAndCorrect(round, f->values, sent->latent, encoder_version, true);
  if (!c.ok()) return c.status();
  lp.scale = c->gain;
  lp.step = c->step;
  lp.sent_crc = c->sent_crc;
  lp.innovation = std::move(c->innovation);
  encoded = lgc::EncodeLeader(lp, env_.dim(), dense, round);
  if (encoded.ok()) f->values = std::move(c->sent);
  return encoded;
}

absl::StatusOr<lgc::Correction> LgcClient::PredictAndCorrect(uint64_t round,
                                                             std::span<const float> v,
                                                             std::span<const float> latent,
                                                             uint64_t encoder_version,
                                                             bool leader) {
  const size_t k = v.size();
  if (absl::Status st = EnsureWeights(true, encoder_version, k); !st.ok()) return st;
  if (latent.size() != static_cast<size_t>(decoder_->latent_size())) {
    return absl::InvalidArgumentError(
        StrCat("LGC latent of ", latent.size(), " floats for a support of ", k));
  }
  auto prediction = decoder_->Decode(env_.client_id(), latent, std::vector<float>(k, 0.0f));
  if (!prediction.ok()) return prediction.status();
  lgc::Correction c = lgc::Correct(v, *prediction, plan_->InnovationSize(k));
  LogMiss(round, v, c.sent, leader);
  return c;
}

absl::Status LgcClient::LoadState(const edge_client::ClientState& state) {
  if (absl::Status st = plain_.LoadState(state); !st.ok()) return st;
  const auto it = state.modes.find(kSlot);
  if (it == state.modes.end()) {
    const std::optional<LgcStage> stage =
        state.legacy ? FromProto(static_cast<int>(state.legacy->lgc_stage)) : std::nullopt;
    if (stage && *stage != LgcStage::kWarmUp && state.pending) {
      const edge_client::LegacyModeFields& l = *state.legacy;
      in_flight_.Set(state.pending->update_id, {*stage, l.lgc_support, l.lgc_values});
    }
    return absl::OkStatus();
  }
  pb::LgcClientState in;
  const auto bad = [] { return absl::DataLossError("the client state's lgc slot is malformed"); };
  if (!in.ParseFromString(it->second) || in.support().size() % 4 != 0) return bad();
  if (in.stage() == 0) return absl::OkStatus();
  const std::optional<LgcStage> stage = FromProto(static_cast<int>(in.stage()));
  if (!stage || *stage == LgcStage::kWarmUp) return bad();
  LgcInFlight f;
  f.stage = *stage;
  f.support.resize(in.support().size() / 4);
  if (!f.support.empty()) std::memcpy(f.support.data(), in.support().data(), in.support().size());
  auto values = core::FloatsFromBytes(in.values(), "LGC values");
  if (!values.ok() || values->size() != f.support.size()) return bad();
  f.values = *std::move(values);
  for (uint32_t j : f.support) {
    if (j >= env_.dim()) return bad();
  }
  in_flight_.Set(in.update_id(), std::move(f));
  return absl::OkStatus();
}

absl::Status LgcClient::SaveState(std::map<std::string, std::string>* slots) const {
  if (absl::Status st = plain_.SaveState(slots); !st.ok()) return st;
  pb::LgcClientState out;
  if (const LgcInFlight* f = in_flight_.Of(env_.state())) {
    out.set_update_id(in_flight_.update_id());
    out.set_stage(static_cast<uint32_t>(f->stage));
    out.set_support(
        std::string(reinterpret_cast<const char*>(f->support.data()), f->support.size() * 4));
    out.set_values(core::FloatsToBytes(f->values));
  }
  auto bytes = core::SerializeMessage(out, "the lgc slot");
  if (!bytes.ok()) return bytes.status();
  (*slots)[kSlot] = *std::move(bytes);
  return absl::OkStatus();
}

}  // namespace fedlgc::modes
