// The LGC path of the edge client (see edge_client.h and autoencoder/lgc_plan.h): values
// on the round's support, leader and follower payloads, promotion, error feedback.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "autoencoder/lgc_payload.h"
#include "codecs/crc32c.h"
#include "codecs/dense_codec.h"
#include "codecs/error_feedback.h"
#include "codecs/frame.h"
#include "codecs/registry.h"
#include "codecs/str.h"
#include "core/model.h"
#include "edge_client/edge_client.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.grpc.pb.h"

namespace fedlgc::edge_client {
namespace {

// One frame over the whole model (LGC payloads are not chunked).
std::string Framed(std::string_view spec, uint64_t dim, const std::string& body) {
  std::string frame;
  const size_t offset = codecs::BeginFrame(spec, dim, 0, dim, &frame);
  frame += body;
  codecs::FinishFrame(offset, &frame);
  return frame;
}

}  // namespace

absl::Status EdgeClient::HandleLgcRound(const protos::RoundStart& start) {
  if (lgc_spec_ != start.codec()) {
    auto plan = autoencoder::ParseLgcSpec(start.codec());
    if (!plan.ok()) return plan.status();
    if (!plan->has_value()) {
      return absl::InvalidArgumentError(StrCat("an LGC round with codec ", start.codec()));
    }
    lgc_plan_ = **plan;
    lgc_spec_ = start.codec();
  }
  const bool predict = lgc_plan_->predict;
  const std::string& sb = start.lgc_support();
  if (sb.size() % 4 != 0 || (sb.empty() && !predict)) {
    return absl::InvalidArgumentError("LGC round without a support");
  }
  lgc_encoder_version_ = start.lgc_encoder_version();
  if (!state_.pending) {
    if (absl::Status st = MeasureLgcEcho(); !st.ok()) return st;
    if (predict && start.lgc_stage() == 3) {
      // Off the round's critical path: a follower needs its decoder once the leader's
      // latent arrives, a leader with its own (fetched below with the encoder).
      const absl::Status st = EnsureDecoder(start.lgc_encoder_version(),
                                            lgc_plan_->SupportSize(model_->dim()), round_deadline_);
      if (absl::IsDeadlineExceeded(st)) return absl::OkStatus();
      if (!st.ok()) return st;
    }
    auto update = TrainRound(start, round_deadline_);
    if (!update.ok()) return update.status();
    if (update->empty()) return absl::OkStatus();
    // u = update + residual; what is not sent of it stays in the residual.
    std::vector<float>& u = *update;
    if (state_.residual.size() == u.size()) {
      for (size_t i = 0; i < u.size(); ++i) u[i] += state_.residual[i];
    }
    PendingUpdate p = NewPending(start.round(), start.model_version());
    p.lgc_stage = start.lgc_stage();
    if (predict && !start.lgc_leader()) {
      // A predict=1 follower waits for the leader's support (and latent): all of u stays
      // in the residual until then, nothing is taken out for a support yet.
      state_.residual = std::move(u);
      if (codec_) codec_->SetResidual(state_.residual);
      std::fprintf(stderr, "%s: round %llu: waiting for the leader's support\n",
                   options_.client_id.c_str(), static_cast<unsigned long long>(p.round));
      state_.pending = std::move(p);
      if (absl::Status st = Persist(); !st.ok()) return st;
    } else {
      // predict=1 leaders pick this round's support; otherwise it is the round's.
      if (predict) {
        p.lgc_support = autoencoder::SelectSupport(u, lgc_plan_->SupportSize(model_->dim()));
      } else {
        p.lgc_support.resize(sb.size() / 4);
        std::memcpy(p.lgc_support.data(), sb.data(), sb.size());
      }
      for (uint32_t i : p.lgc_support) {
        if (i >= model_->dim()) return absl::InvalidArgumentError("LGC support out of range");
      }
      p.lgc_values = autoencoder::Gather(u, p.lgc_support);
      if (p.lgc_stage == 3 && start.lgc_leader()) {
        // Fetched before the clock starts: the encode time is the encoder's, not the link's.
        const absl::Status st =
            EnsureEncoder(start.lgc_encoder_version(), p.lgc_support.size(), round_deadline_);
        if (absl::IsDeadlineExceeded(st)) return absl::OkStatus();
        if (!st.ok()) return st;
      }
      const auto t0 = std::chrono::steady_clock::now();
      auto frame = LgcFrame(p.lgc_stage, start.lgc_leader(), start.lgc_encoder_version(), u, &p,
                            round_deadline_);
      if (!frame.ok()) {
        if (absl::IsDeadlineExceeded(frame.status())) return absl::OkStatus();
        return frame.status();
      }
      ObserveEncode(start.round(), t0);
      p.frames = {std::move(frame).value()};
      SetLgcResidual(u, p);
      state_.pending = std::move(p);
      if (absl::Status st = Persist(); !st.ok()) return st;
    }
  }
  if (state_.pending->frames.empty()) {
    // A predict=1 follower still waiting. Promoted while away: it leads now.
    if (start.lgc_leader()) {
      protos::LgcPromote promote;
      promote.set_round(start.round());
      promote.set_encoder_version(start.lgc_encoder_version());
      return HandleLgcPromote(promote);
    }
    // The leader's support came with the RoundStart (this client reconnected after the
    // leader delivered), or it comes as an LgcLatent event.
    if (sb.empty()) return absl::OkStatus();
    protos::LgcLatent latent;
    latent.set_round(start.round());
    latent.set_support(sb);
    latent.set_latent(start.lgc_latent());
    return HandleLgcLatent(latent);
  }
  return UploadPending(start.round(), round_deadline_);
}

void EdgeClient::SetLgcResidual(std::span<const float> u, const PendingUpdate& p) {
  // The support's values minus what the coordinator rebuilds of them (lgc_values): zero
  // with predict=0, where the support counts as sent (ALGORITHMS.md); the miss with
  // predict=1. Either way sent + residual == u.
  state_.residual.assign(u.begin(), u.end());
  for (size_t j = 0; j < p.lgc_support.size(); ++j) {
    state_.residual[p.lgc_support[j]] = u[p.lgc_support[j]] - p.lgc_values[j];
  }
  if (codec_) codec_->SetResidual(state_.residual);
}

absl::Status EdgeClient::HandleLgcLatent(const protos::LgcLatent& latent) {
  if (!state_.pending || state_.pending->round != latent.round() || state_.pending->lgc_stage < 2 ||
      !state_.pending->frames.empty() || !lgc_plan_ || !lgc_plan_->predict) {
    return absl::OkStatus();  // not waiting for this one
  }
  PendingUpdate& p = *state_.pending;
  const size_t k = lgc_plan_->SupportSize(model_->dim());
  const std::string& sb = latent.support();
  if (sb.size() != k * 4) {
    return absl::InvalidArgumentError(
        StrCat("LGC support of ", sb.size(), " bytes, expected ", k * 4));
  }
  std::vector<uint32_t> support(k);
  std::memcpy(support.data(), sb.data(), sb.size());
  for (uint32_t i : support) {
    if (i >= model_->dim()) return absl::InvalidArgumentError("LGC support out of range");
  }
  const std::string& bytes = latent.latent();
  std::vector<float> z(bytes.size() / 4);
  if (!z.empty()) std::memcpy(z.data(), bytes.data(), z.size() * 4);
  const uint32_t reference = autoencoder::ReferenceOf(support, z);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> v = autoencoder::Gather(state_.residual, support);
  std::vector<float> sent;
  std::string body;
  std::string_view spec;
  if (p.lgc_stage == 2) {
    spec = autoencoder::kValuesSpec;
    body = autoencoder::EncodeReferencedValues(reference, v);
    sent = v;
  } else {
    auto c = PredictAndCorrect(p.round, v, z, lgc_encoder_version_, false, round_deadline_);
    if (absl::IsDeadlineExceeded(c.status())) return absl::OkStatus();
    if (!c.ok()) return c.status();
    c->reference = reference;
    auto encoded = autoencoder::EncodeCorrection(*c);
    if (!encoded.ok()) return encoded.status();
    spec = autoencoder::kCorrectionSpec;
    body = std::move(encoded).value();
    sent = std::move(c->sent);
  }
  std::string frame = Framed(spec, model_->dim(), body);
  ObserveEncode(p.round, t0);
  // The residual held all of u: what is sent of the support leaves it.
  const std::vector<float> u = state_.residual;
  p.lgc_support = std::move(support);
  p.lgc_values = std::move(sent);
  p.frames = {std::move(frame)};
  SetLgcResidual(u, p);
  if (absl::Status st = Persist(); !st.ok()) return st;
  return UploadPending(p.round, round_deadline_);
}

void EdgeClient::LogLgcMiss(uint64_t round, std::span<const float> v, std::span<const float> sent,
                            bool leader) {
  double vv = 0, ee = 0;
  for (size_t j = 0; j < v.size(); ++j) {
    vv += double(v[j]) * v[j];
    ee += (double(v[j]) - sent[j]) * (double(v[j]) - sent[j]);
  }
  const double rel = std::sqrt(ee / std::max(vv, 1e-30));
  if (!std::isfinite(rel)) return;
  std::fprintf(stderr, "%s: round %llu: LGC reconstruction error %.3f (%s)\n",
               options_.client_id.c_str(), static_cast<unsigned long long>(round), rel,
               leader ? "leader" : "follower");
  AppendRoundLog(StrCat("{\"round\": ", round, ", \"lgc_relative_error\": ", rel,
                        ", \"lgc_leader\": ", leader ? 1 : 0, "}"));
}

// How well the coordinator rebuilt this client's last counted stage-3 values: |v - echo| /
// |v| goes to the client's rounds.jsonl (and its log). Measured, not fed back: putting
// v - echo back into the residual (exact error feedback through the autoencoder) made the
// runs diverge (README, "LGC"). An echo that cannot be had is skipped. "leader" is the
// role the client sent in; a leader overtaken by a promoted one is decoded with the
// promoted leader's latent but still logged as a leader.
absl::Status EdgeClient::MeasureLgcEcho() {
  LgcEcho& e = state_.lgc_echo;
  if (e.round == 0) return absl::OkStatus();
  // predict=1 logs its miss when it sends: the echo would only repeat it.
  if (lgc_plan_ && lgc_plan_->echo && !lgc_plan_->predict) {
    auto bytes = DownloadBlob("lgc-echo", e.round, round_deadline_);
    if (absl::IsDeadlineExceeded(bytes.status()) || absl::IsCancelled(bytes.status())) {
      return absl::OkStatus();  // tried again next round
    }
    if (!bytes.ok()) {
      // A diagnostic: whatever went wrong, the round goes on without it.
      if (!absl::IsNotFound(bytes.status())) {
        std::fprintf(stderr, "%s: lgc-echo %llu: %s\n", options_.client_id.c_str(),
                     static_cast<unsigned long long>(e.round), bytes.status().ToString().c_str());
      }
    } else if (bytes->size() != e.values.size() * 4) {
      std::fprintf(stderr, "%s: lgc-echo %llu: %zu bytes for %zu values; ignored\n",
                   options_.client_id.c_str(), static_cast<unsigned long long>(e.round),
                   bytes->size(), e.values.size());
    } else {
      std::vector<float> echo(e.values.size());
      std::memcpy(echo.data(), bytes->data(), bytes->size());
      LogLgcMiss(e.round, e.values, echo, e.leader);
    }
  }
  e = LgcEcho();
  return Persist();
}

absl::Status EdgeClient::HandleLgcPromote(const protos::LgcPromote& promote) {
  // Stage 3, and with predict=1 stage 2 too, wait for a leader.
  if (!state_.pending || state_.pending->round != promote.round() || !lgc_plan_ ||
      !(state_.pending->lgc_stage == 3 || (state_.pending->lgc_stage == 2 && lgc_plan_->predict))) {
    return absl::OkStatus();  // nothing of that round here
  }
  PendingUpdate& p = *state_.pending;
  // u again: the residual plus what was taken out for the support (none while waiting).
  std::vector<float> u = state_.residual;
  for (size_t j = 0; j < p.lgc_support.size(); ++j) u[p.lgc_support[j]] += p.lgc_values[j];
  PendingUpdate lead = p;
  // predict=1: a leader's support is its own top-k.
  if (lgc_plan_->predict) {
    lead.lgc_support = autoencoder::SelectSupport(u, lgc_plan_->SupportSize(model_->dim()));
  }
  lead.lgc_values = autoencoder::Gather(u, lead.lgc_support);
  auto frame = LgcFrame(p.lgc_stage, true, promote.encoder_version(), u, &lead, round_deadline_);
  if (!frame.ok()) {
    if (absl::IsDeadlineExceeded(frame.status())) return absl::OkStatus();
    return frame.status();
  }
  p.lgc_support = std::move(lead.lgc_support);
  p.lgc_values = std::move(lead.lgc_values);
  p.frames = {std::move(frame).value()};
  SetLgcResidual(u, p);
  p.update_id = rng_() | 1;
  if (absl::Status st = Persist(); !st.ok()) return st;
  std::fprintf(stderr, "%s: leading LGC round %llu\n", options_.client_id.c_str(),
               static_cast<unsigned long long>(promote.round()));
  return UploadPending(promote.round(), round_deadline_);
}

absl::Status EdgeClient::EnsureLgcWeights(bool decoder, uint64_t version, size_t k,
                                          std::chrono::system_clock::time_point deadline) {
  std::unique_ptr<autoencoder::Autoencoder>& held = decoder ? decoder_ : encoder_;
  uint64_t& held_version = decoder ? decoder_version_ : encoder_version_;
  if (held && held_version == version && held->length() == static_cast<int64_t>(k))
    return absl::OkStatus();
  auto bytes = DownloadBlob(decoder ? "lgc-decoder" : "encoder", version, deadline);
  if (!bytes.ok()) return bytes.status();
  autoencoder::AeOptions ao;
  // A decoder runs on the CPU, as the coordinator's rebuild of its output does.
  ao.device = decoder ? "cpu" : device_;
  auto ae = autoencoder::Autoencoder::Create(static_cast<int64_t>(k), ao);
  if (!ae.ok()) return ae.status();
  const absl::Status st =
      decoder ? (*ae)->LoadDecoder(options_.client_id, *bytes) : (*ae)->LoadEncoder(*bytes);
  if (!st.ok()) return st;
  held = std::move(ae).value();
  held_version = version;
  return absl::OkStatus();
}

absl::StatusOr<std::string> EdgeClient::LgcFrame(uint32_t stage, bool leader,
                                                 uint64_t encoder_version, std::span<const float> u,
                                                 PendingUpdate* pending,
                                                 std::chrono::system_clock::time_point deadline) {
  const PendingUpdate& p = *pending;
  const size_t k = p.lgc_support.size();
  const size_t k_inn = lgc_plan_->InnovationSize(k);
  std::string body;
  std::string_view spec;
  if (leader) {
    spec = autoencoder::kLeaderSpec;
    autoencoder::LeaderPayload lp;
    // The next round's support; with predict=1 this one's (p.lgc_support, the same top-k).
    lp.support = lgc_plan_->predict ? p.lgc_support : autoencoder::SelectSupport(u, k);
    auto latent_codec = codecs::MakeCodec(stage == 2 ? "fp32" : lgc_plan_->latent);
    if (!latent_codec.ok()) return latent_codec.status();
    if (stage == 2) {
      lp.latent = p.lgc_values;
      lp.innovation.assign(k, 0.0f);
    } else {
      if (absl::Status st = EnsureEncoder(encoder_version, k, deadline); !st.ok()) return st;
      lp.scale = autoencoder::RmsScale(p.lgc_values);
      std::vector<float> normalized = p.lgc_values;
      for (float& x : normalized) x /= lp.scale;
      auto latent = encoder_->Encode(normalized);
      if (!latent.ok()) return latent.status();
      lp.latent = std::move(latent).value();
      lp.innovation = autoencoder::InnovationOfValues(p.lgc_values, k_inn);
    }
    const auto& dense = static_cast<const codecs::DenseCodec&>(**latent_codec);
    const bool predict = stage == 3 && lgc_plan_->predict;
    if (predict) lp.innovation.assign(k, 0.0f);  // first the latent alone (see below)
    auto encoded = autoencoder::EncodeLeader(lp, model_->dim(), dense, p.round, predict);
    if (!encoded.ok()) return encoded.status();
    if (predict) {
      // The latent as the coordinator will decode it, and this client's prediction from it
      // (the latent's bytes do not depend on the innovation: same codec, same seed).
      const auto view = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(encoded->data()),
                                                 encoded->size());
      auto sent = autoencoder::DecodeLeader(view, model_->dim(), dense, lp.latent.size(), true);
      if (!sent.ok()) return sent.status();
      auto c =
          PredictAndCorrect(p.round, p.lgc_values, sent->latent, encoder_version, true, deadline);
      if (!c.ok()) return c.status();
      lp.scale = c->gain;
      lp.step = c->step;
      lp.sent_crc = c->sent_crc;
      lp.innovation = std::move(c->innovation);
      encoded = autoencoder::EncodeLeader(lp, model_->dim(), dense, p.round, true);
      if (!encoded.ok()) return encoded.status();
      pending->lgc_values = std::move(c->sent);
    }
    body = std::move(encoded).value();
  } else if (stage == 2) {
    spec = autoencoder::kValuesSpec;
    body.assign(reinterpret_cast<const char*>(p.lgc_values.data()), p.lgc_values.size() * 4);
  } else {
    spec = autoencoder::kInnovationSpec;
    auto encoded = autoencoder::EncodeInnovation(
        autoencoder::InnovationOfValues(p.lgc_values, k_inn), autoencoder::RmsScale(p.lgc_values));
    if (!encoded.ok()) return encoded.status();
    body = std::move(encoded).value();
  }
  return Framed(spec, model_->dim(), body);
}

absl::StatusOr<autoencoder::Correction> EdgeClient::PredictAndCorrect(
    uint64_t round, std::span<const float> v, std::span<const float> latent,
    uint64_t encoder_version, bool leader, std::chrono::system_clock::time_point deadline) {
  const size_t k = v.size();
  if (absl::Status st = EnsureDecoder(encoder_version, k, deadline); !st.ok()) return st;
  if (latent.size() != static_cast<size_t>(decoder_->latent_size())) {
    return absl::InvalidArgumentError(
        StrCat("LGC latent of ", latent.size(), " floats for a support of ", k));
  }
  auto prediction = decoder_->Decode(options_.client_id, latent, std::vector<float>(k, 0.0f));
  if (!prediction.ok()) return prediction.status();
  autoencoder::Correction c = autoencoder::Correct(v, *prediction, lgc_plan_->InnovationSize(k));
  LogLgcMiss(round, v, c.sent, leader);
  return c;
}

}  // namespace fedlgc::edge_client
