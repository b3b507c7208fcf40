// LGC at the edge (see lgc_client.h).
#include "modes/lgc/lgc_client.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "autoencoder/lgc_codes.h"
#include "codecs/dense_codec.h"
#include "codecs/frame.h"
#include "codecs/registry.h"
#include "codecs/str.h"
#include "core/float_bytes.h"
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

// A download or weight fetch that ran out of the round's time: the round goes on without
// this client's payload (it stays in the residual).
bool OutOfTime(const absl::Status& st) { return absl::IsDeadlineExceeded(st); }

}  // namespace

absl::Status LgcClient::EnsurePlan(const std::string& codec) {
  if (plan_ && spec_ == codec) return absl::OkStatus();
  auto plan = autoencoder::ParseLgcSpec(codec);
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
  if (start.lgc().stage() < 2) return plain_.OnRoundStart(start);
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
  if (lgc.stage() == 3) {
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
  p.lgc_stage = lgc.stage();
  if (lgc.leader()) return SendAsLeader(start, std::move(u), std::move(p));
  // A follower waits for the leader's payload: all of u stays in the residual until
  // then, nothing is taken out for a support yet.
  state.residual = std::move(u);
  plain_.ResidualChanged();
  std::fprintf(stderr, "%s: round %llu: waiting for the leader's support\n",
               env_.client_id().c_str(), static_cast<unsigned long long>(p.round));
  state.pending = std::move(p);
  return env_.Persist();
}

absl::Status LgcClient::SendAsLeader(const protos::RoundStart& start, std::vector<float> u,
                                     PendingUpdate p) {
  const protos::LgcRound& lgc = start.lgc();
  // The leader picks this round's support: its own top-k.
  p.lgc_support = autoencoder::SelectSupport(u, round_support_size());
  p.lgc_values = autoencoder::Gather(u, p.lgc_support);
  if (p.lgc_stage == 3) {
    // Fetched before the clock starts: the encode time is the encoder's, not the link's.
    const absl::Status st =
        EnsureWeights(/*decoder=*/false, lgc.encoder_version(), p.lgc_support.size());
    if (OutOfTime(st)) return KeepForLater(std::move(u));
    if (!st.ok()) return st;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto frame = LeaderFrame(p.lgc_stage, lgc.encoder_version(), u, &p);
  if (!frame.ok()) return OutOfTime(frame.status()) ? KeepForLater(std::move(u)) : frame.status();
  env_.ObserveEncode(start.round(), t0);
  p.frames = {std::move(frame).value()};
  SetResidual(u, p);
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

void LgcClient::SetResidual(std::span<const float> u, const PendingUpdate& p) {
  // The support's values minus what the coordinator rebuilds of them (lgc_values): the
  // miss. sent + residual == u.
  edge_client::ClientState& state = env_.state();
  state.residual.assign(u.begin(), u.end());
  for (size_t j = 0; j < p.lgc_support.size(); ++j) {
    state.residual[p.lgc_support[j]] = u[p.lgc_support[j]] - p.lgc_values[j];
  }
  plain_.ResidualChanged();
}

absl::Status LgcClient::OnLatent(const protos::LgcLatent& latent) {
  edge_client::ClientState& state = env_.state();
  if (!state.pending || state.pending->round != latent.round() || state.pending->lgc_stage < 2 ||
      !state.pending->frames.empty() || !plan_) {
    return absl::OkStatus();  // not waiting for this one
  }
  PendingUpdate& p = *state.pending;
  absl::StatusOr<std::vector<uint32_t>> support;
  absl::StatusOr<std::vector<float>> z;
  if (p.lgc_stage == 2) {
    // The leader's body; its decoded values are the prediction.
    const std::string& cells = latent.leader_cells();
    auto lc = autoencoder::UnpackLeaderCells(
        *plan_,
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(cells.data()), cells.size()),
        env_.dim(), round_support_size());
    if (!lc.ok()) return absl::InvalidArgumentError(lc.status().message());
    support = std::move(lc->support);
    z = std::move(lc->values);
  } else {
    support = autoencoder::SupportFromBytes(latent.support(), round_support_size(), env_.dim());
    if (!support.ok()) return absl::InvalidArgumentError(support.status().message());
    const std::string& bytes = latent.latent();
    z = core::FloatsFromBytes(bytes.substr(0, bytes.size() / 4 * 4), bytes.size() / 4,
                              "LGC latent");
  }
  if (!z.ok()) return z.status();
  const uint32_t reference = autoencoder::ReferenceOf(*support, *z);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> v = autoencoder::Gather(state.residual, *support);
  std::vector<float> sent;
  std::string body;
  std::string_view spec;
  if (p.lgc_stage == 2) {
    // The leader's decoded values are the prediction: send the miss in plan_->bits bits.
    if (z->size() != v.size()) {
      return absl::InvalidArgumentError(
          StrCat("LGC leader values: ", z->size(), " for a support of ", v.size()));
    }
    autoencoder::BitCorrection c = autoencoder::CorrectBits(v, *z, plan_->bits);
    c.reference = reference;
    auto encoded = autoencoder::EncodeBitCorrection(c);
    if (encoded.ok()) encoded = autoencoder::PackBody(*plan_, std::move(encoded).value());
    if (!encoded.ok()) return encoded.status();
    spec = autoencoder::kBitCorrectionSpec;
    body = std::move(encoded).value();
    LogMiss(p.round, v, c.sent, false);
    sent = std::move(c.sent);
  } else {
    auto c = PredictAndCorrect(p.round, v, *z, round_encoder_version_, false);
    if (OutOfTime(c.status())) return absl::OkStatus();
    if (!c.ok()) return c.status();
    c->reference = reference;
    auto encoded = autoencoder::EncodeCorrection(*c);
    if (!encoded.ok()) return encoded.status();
    spec = autoencoder::kCorrectionSpec;
    body = std::move(encoded).value();
    sent = std::move(c->sent);
  }
  std::string frame = Framed(spec, env_.dim(), body);
  env_.ObserveEncode(p.round, t0);
  // The residual held all of u: what is sent of the support leaves it.
  const std::vector<float> u = state.residual;
  p.lgc_support = *std::move(support);
  p.lgc_values = std::move(sent);
  p.frames = {std::move(frame)};
  SetResidual(u, p);
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
  std::fprintf(stderr, "%s: round %llu: LGC reconstruction error %.3f (%s)\n",
               env_.client_id().c_str(), static_cast<unsigned long long>(round), rel,
               leader ? "leader" : "follower");
  env_.AppendRoundLog({round, {{"lgc_relative_error", rel}, {"lgc_leader", leader ? 1.0 : 0.0}}});
}

absl::Status LgcClient::OnPromote(const protos::LgcPromote& promote) {
  edge_client::ClientState& state = env_.state();
  if (!state.pending || state.pending->round != promote.round() || !plan_ ||
      state.pending->lgc_stage < 2) {
    return absl::OkStatus();  // nothing of that round here
  }
  PendingUpdate& p = *state.pending;
  // u again: the residual plus what was taken out for the support (none while waiting).
  std::vector<float> u = state.residual;
  for (size_t j = 0; j < p.lgc_support.size(); ++j) u[p.lgc_support[j]] += p.lgc_values[j];
  PendingUpdate lead = p;
  // A leader's support is its own top-k.
  lead.lgc_support = autoencoder::SelectSupport(u, round_support_size());
  lead.lgc_values = autoencoder::Gather(u, lead.lgc_support);
  auto frame = LeaderFrame(p.lgc_stage, promote.encoder_version(), u, &lead);
  if (!frame.ok()) return OutOfTime(frame.status()) ? absl::OkStatus() : frame.status();
  p.lgc_support = std::move(lead.lgc_support);
  p.lgc_values = std::move(lead.lgc_values);
  p.frames = {std::move(frame).value()};
  SetResidual(u, p);
  p.update_id = env_.transport().NewUpdateId();
  if (absl::Status st = env_.Persist(); !st.ok()) return st;
  std::fprintf(stderr, "%s: leading LGC round %llu\n", env_.client_id().c_str(),
               static_cast<unsigned long long>(promote.round()));
  return env_.UploadPending(promote.round(), deadline_);
}

absl::Status LgcClient::OnReceipt(const protos::RoundReceipt& receipt) {
  edge_client::ClientState& state = env_.state();
  if (!state.pending || state.pending->round != receipt.round()) return absl::OkStatus();
  if (state.pending->lgc_stage == 0) return plain_.OnReceipt(receipt);
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
  if (p.lgc_stage == 0) return plain_.Restore(p);
  edge_client::ClientState& state = env_.state();
  if (state.residual.size() != env_.dim()) state.residual.assign(env_.dim(), 0.0f);
  for (size_t j = 0; j < p.lgc_support.size(); ++j) {
    state.residual[p.lgc_support[j]] += p.lgc_values[j];
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
  auto bytes =
      env_.transport().DownloadBlob(decoder ? "lgc-decoder" : "encoder", version, deadline_);
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

absl::StatusOr<std::string> LgcClient::LeaderFrame(uint32_t stage, uint64_t encoder_version,
                                                   std::span<const float> u,
                                                   PendingUpdate* pending) {
  auto body = LeaderBody(stage, encoder_version, u, pending);
  if (!body.ok()) return body.status();
  return Framed(stage == 2 ? autoencoder::kLeaderCellsSpec : autoencoder::kLeaderSpec, env_.dim(),
                *body);
}

absl::StatusOr<std::string> LgcClient::LeaderBody(uint32_t stage, uint64_t encoder_version,
                                                  std::span<const float> u,
                                                  PendingUpdate* pending) {
  const PendingUpdate& p = *pending;
  const size_t k = p.lgc_support.size();
  if (stage == 2) {
    // The support as a set, the values in cells; what they decode to is what counts.
    pending->lgc_support = autoencoder::SelectSupportSet(u, k);
    const std::vector<float> v = autoencoder::Gather(u, pending->lgc_support);
    std::vector<float> sent;
    std::string body = autoencoder::EncodeLeaderCells(pending->lgc_support, v, env_.dim(), &sent);
    LogMiss(p.round, v, sent, true);
    pending->lgc_values = std::move(sent);
    return autoencoder::PackBody(*plan_, std::move(body));
  }
  // Stage 3: the support in value order and the latent of the values on it.
  autoencoder::LeaderPayload lp;
  lp.support = p.lgc_support;
  auto latent_codec = codecs::MakeCodec(plan_->latent);
  if (!latent_codec.ok()) return latent_codec.status();
  if (absl::Status st = EnsureWeights(false, encoder_version, k); !st.ok()) return st;
  std::vector<float> normalized = p.lgc_values;
  const float scale = autoencoder::RmsScale(normalized);
  for (float& x : normalized) x /= scale;
  auto latent = encoder_->Encode(normalized);
  if (!latent.ok()) return latent.status();
  lp.latent = std::move(latent).value();
  lp.innovation.assign(k, 0.0f);  // first the latent alone (see below)
  const auto& dense = static_cast<const codecs::DenseCodec&>(**latent_codec);
  auto encoded = autoencoder::EncodeLeader(lp, env_.dim(), dense, p.round);
  if (!encoded.ok()) return encoded;
  // The latent as the coordinator will decode it, and this client's prediction from it
  // (the latent's bytes do not depend on the innovation: same codec, same seed).
  const auto view =
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(encoded->data()), encoded->size());
  auto sent = autoencoder::DecodeLeader(view, env_.dim(), dense, lp.latent.size());
  if (!sent.ok()) return sent.status();
  auto c = PredictAndCorrect(p.round, p.lgc_values, sent->latent, encoder_version, true);
  if (!c.ok()) return c.status();
  lp.scale = c->gain;
  lp.step = c->step;
  lp.sent_crc = c->sent_crc;
  lp.innovation = std::move(c->innovation);
  encoded = autoencoder::EncodeLeader(lp, env_.dim(), dense, p.round);
  if (encoded.ok()) pending->lgc_values = std::move(c->sent);
  return encoded;
}

absl::StatusOr<autoencoder::Correction> LgcClient::PredictAndCorrect(uint64_t round,
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
  autoencoder::Correction c = autoencoder::Correct(v, *prediction, plan_->InnovationSize(k));
  LogMiss(round, v, c.sent, leader);
  return c;
}

}  // namespace fedlgc::modes
