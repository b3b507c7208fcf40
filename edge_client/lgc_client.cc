// The LGC path of the edge client (see edge_client.h and autoencoder/lgc_plan.h): values
// on the round's support, leader and follower payloads, promotion, error feedback.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "autoencoder/lgc_payload.h"
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
  const std::string& sb = start.lgc_support();
  if (sb.empty() || sb.size() % 4 != 0) {
    return absl::InvalidArgumentError("LGC round without a support");
  }
  if (!state_.pending) {
    if (absl::Status st = MeasureLgcEcho(); !st.ok()) return st;
    std::vector<uint32_t> support(sb.size() / 4);
    std::memcpy(support.data(), sb.data(), sb.size());
    for (uint32_t i : support) {
      if (i >= model_->dim()) return absl::InvalidArgumentError("LGC support out of range");
    }
    auto update = TrainRound(start, round_deadline_);
    if (!update.ok()) return update.status();
    if (update->empty()) return absl::OkStatus();
    // u = update + residual; the support counts as sent, the rest stays in the residual.
    std::vector<float>& u = *update;
    if (state_.residual.size() == u.size()) {
      for (size_t i = 0; i < u.size(); ++i) u[i] += state_.residual[i];
    }
    PendingUpdate p = NewPending(start.round(), start.model_version());
    p.lgc_stage = start.lgc_stage();
    p.lgc_values = autoencoder::Gather(u, support);
    p.lgc_support = std::move(support);
    if (p.lgc_stage == 3 && start.lgc_leader()) {
      // Fetched before the clock starts: the encode time is the encoder's, not the link's.
      const absl::Status st =
          EnsureEncoder(start.lgc_encoder_version(), p.lgc_support.size(), round_deadline_);
      if (absl::IsDeadlineExceeded(st)) return absl::OkStatus();
      if (!st.ok()) return st;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto frame = LgcFrame(p.lgc_stage, start.lgc_leader(), start.lgc_encoder_version(), u, p,
                          round_deadline_);
    if (!frame.ok()) {
      if (absl::IsDeadlineExceeded(frame.status())) return absl::OkStatus();
      return frame.status();
    }
    ObserveEncode(start.round(), t0);
    p.frames = {std::move(frame).value()};
    state_.residual = autoencoder::ResidualAfter(u, p.lgc_support);
    if (codec_) codec_->SetResidual(state_.residual);
    state_.pending = std::move(p);
    if (absl::Status st = Persist(); !st.ok()) return st;
  }
  return UploadPending(start.round(), round_deadline_);
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
  if (lgc_plan_ && lgc_plan_->echo) {
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
      double vv = 0, ee = 0;
      for (size_t j = 0; j < echo.size(); ++j) {
        vv += double(e.values[j]) * e.values[j];
        ee += (double(e.values[j]) - echo[j]) * (double(e.values[j]) - echo[j]);
      }
      const double rel = std::sqrt(ee / std::max(vv, 1e-30));
      std::fprintf(stderr, "%s: round %llu: LGC reconstruction error %.3f (%s)\n",
                   options_.client_id.c_str(), static_cast<unsigned long long>(e.round), rel,
                   e.leader ? "leader" : "follower");
      if (std::isfinite(rel)) {
        AppendRoundLog(StrCat("{\"round\": ", e.round, ", \"lgc_relative_error\": ", rel,
                              ", \"lgc_leader\": ", e.leader ? 1 : 0, "}"));
      }
    }
  }
  e = LgcEcho();
  return Persist();
}

absl::Status EdgeClient::HandleLgcPromote(const protos::LgcPromote& promote) {
  if (!state_.pending || state_.pending->round != promote.round() ||
      state_.pending->lgc_stage != 3 || !lgc_plan_) {
    return absl::OkStatus();  // nothing of that round here
  }
  PendingUpdate& p = *state_.pending;
  // u again: the residual plus what was taken out for the support.
  std::vector<float> u = state_.residual;
  for (size_t j = 0; j < p.lgc_support.size(); ++j) u[p.lgc_support[j]] += p.lgc_values[j];
  auto frame = LgcFrame(3, true, promote.encoder_version(), u, p, round_deadline_);
  if (!frame.ok()) {
    if (absl::IsDeadlineExceeded(frame.status())) return absl::OkStatus();
    return frame.status();
  }
  p.frames = {std::move(frame).value()};
  p.update_id = rng_() | 1;
  if (absl::Status st = Persist(); !st.ok()) return st;
  std::fprintf(stderr, "%s: leading LGC round %llu\n", options_.client_id.c_str(),
               static_cast<unsigned long long>(promote.round()));
  return UploadPending(promote.round(), round_deadline_);
}

absl::Status EdgeClient::EnsureEncoder(uint64_t version, size_t k,
                                       std::chrono::system_clock::time_point deadline) {
  if (encoder_ && encoder_version_ == version && encoder_->length() == static_cast<int64_t>(k))
    return absl::OkStatus();
  auto bytes = DownloadBlob("encoder", version, deadline);
  if (!bytes.ok()) return bytes.status();
  autoencoder::AeOptions ao;
  ao.device = device_;
  auto ae = autoencoder::Autoencoder::Create(static_cast<int64_t>(k), ao);
  if (!ae.ok()) return ae.status();
  if (absl::Status st = (*ae)->LoadEncoder(*bytes); !st.ok()) return st;
  encoder_ = std::move(ae).value();
  encoder_version_ = version;
  return absl::OkStatus();
}

absl::StatusOr<std::string> EdgeClient::LgcFrame(uint32_t stage, bool leader,
                                                 uint64_t encoder_version, std::span<const float> u,
                                                 const PendingUpdate& p,
                                                 std::chrono::system_clock::time_point deadline) {
  const size_t k = p.lgc_support.size();
  const size_t k_inn = lgc_plan_->InnovationSize(k);
  std::string body;
  std::string_view spec;
  if (leader) {
    spec = autoencoder::kLeaderSpec;
    autoencoder::LeaderPayload lp;
    lp.support = autoencoder::SelectSupport(u, k);  // the next round's support
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
    auto encoded = autoencoder::EncodeLeader(
        lp, model_->dim(), static_cast<const codecs::DenseCodec&>(**latent_codec), p.round);
    if (!encoded.ok()) return encoded.status();
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
  std::string frame;
  const size_t offset = codecs::BeginFrame(spec, model_->dim(), 0, model_->dim(), &frame);
  frame += body;
  codecs::FinishFrame(offset, &frame);
  return frame;
}

}  // namespace fedlgc::edge_client
