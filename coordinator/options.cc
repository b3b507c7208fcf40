// Coordinator options (see options.h).
#include "coordinator/options.h"

#include <algorithm>
#include <filesystem>

#include "autoencoder/lgc_plan.h"
#include "codecs/gradiveq.h"
#include "codecs/powersgd_two_phase.h"
#include "codecs/priority.h"
#include "codecs/registry.h"
#include "codecs/sparse_codec.h"
#include "codecs/str.h"
#include "codecs/terngrad.h"
#include "core/model.h"

namespace fedlgc::coordinator {
namespace {

// Two-phase PowerSGD is a round protocol of the FedAvg driver, for the job codec, whose
// messages go as one chunk each.
absl::Status ValidateTwoPhasePowerSgd(const RoundPlan& plan, Mode mode,
                                      const codecs::ModelLayout& layout) {
  if (!codecs::NamesTwoPhasePowerSgd(plan.codec)) return absl::OkStatus();
  if (mode != Mode::kFedAvg || !codecs::IsTwoPhasePowerSgd(plan.codec)) {
    return absl::InvalidArgumentError(
        "powersgd(..., phases=2) is a round protocol of --mode fedavg: give it as the job's "
        "--codec itself, unwrapped");
  }
  auto two = codecs::PowerSgdTwoPhase::Create(plan.codec, layout);
  if (!two.ok()) return two.status();
  const uint64_t bytes =
      std::max(two->FrameBytes(codecs::kPowerSgdMessageSpec, two->message_floats()),
               two->FrameBytes(codecs::kPowerSgdProjectionSpec, two->projection_floats()));
  if (bytes > plan.max_chunk_bytes) {
    return absl::InvalidArgumentError(
        StrCat("powersgd(..., phases=2) sends P, then Q and the dense tensors, as one chunk "
               "each, of up to ",
               bytes, " bytes: raise --chunk-bytes to at least that"));
  }
  return absl::OkStatus();
}

// `layout`: the model's. The edge client and the round engine give it to the codecs of
// FedAvg, LSGD and SGP jobs; LGC's warm-up rounds build their codecs without one.
absl::Status ValidateCodecs(const RoundPlan& plan, Mode mode, const codecs::ModelLayout& layout) {
  const bool lgc = mode == Mode::kLgc;
  if (absl::Status st = ValidateTwoPhasePowerSgd(plan, mode, layout); !st.ok()) return st;
  if (!lgc) {
    auto c = codecs::MakeCodec(plan.codec, &layout);
    if (!c.ok()) return c.status();
    // LSGD and SGP clients encode with the plain codec: their protocols account for what a
    // codec loses, so a codec that keeps its own residual would count it twice.
    if ((mode == Mode::kLsgd || mode == Mode::kSgp) && (*c)->traits().stateful) {
      return absl::InvalidArgumentError(
          StrCat((*c)->spec(), " keeps sender state (a residual); --mode ", ModeName(mode),
                 " encodes with stateless codecs only (use it with --mode fedavg)"));
    }
  } else if (auto lgc_plan = autoencoder::ParseLgcSpec(plan.codec); !lgc_plan.ok()) {
    return lgc_plan.status();  // LGC needs no warm-up rounds
  }
  // GradiVeQ's bases are fitted, served and saved by the FedAvg driver, for the job codec.
  if (codecs::IsGradiveq(plan.codec)) {
    if (mode != Mode::kFedAvg) {
      return absl::InvalidArgumentError(
          StrCat("gradiveq(...) runs with --mode fedavg (its bases are fitted and served by the "
                 "FedAvg coordinator), not ",
                 ModeName(mode)));
    }
    if (plan.codec.rfind("gradiveq", 0) != 0) {
      return absl::InvalidArgumentError(
          "--codec: give gradiveq(...) itself; clients add what they keep of its error");
    }
  }
  // TernGrad's shared scale is agreed in each FedAvg round (modes/fedavg/terngrad_rounds.h).
  if (codecs::IsSharedScaleTernGrad(plan.codec)) {
    if (mode != Mode::kFedAvg) {
      return absl::InvalidArgumentError(
          StrCat("terngrad(shared=1) runs with --mode fedavg (its clients agree on each round's "
                 "scale through the FedAvg coordinator), not ",
                 ModeName(mode)));
    }
  } else if (auto c = codecs::MakeCodec(plan.codec, &layout);
             c.ok() && (*c)->spec().find("terngrad/") != std::string::npos &&
             (*c)->spec().find("shared=1") != std::string::npos) {
    return absl::InvalidArgumentError(
        "--codec: give terngrad(..., shared=1) itself, not inside another codec: its rounds "
        "agree on a scale first");
  }
  for (const std::string& spec : plan.warmup_codecs) {
    if (codecs::IsSharedScaleTernGrad(spec)) {
      return absl::InvalidArgumentError(
          "--codec-warmup: terngrad(shared=1) agrees its scale as the job codec only");
    }
  }
  // A kept set drawn from each round's seed is named by the FedAvg driver.
  const bool seeded_job = codecs::NamesRoundSeed(plan.codec);
  bool seeded_warmup = false;
  for (const std::string& spec : plan.warmup_codecs) seeded_warmup |= codecs::NamesRoundSeed(spec);
  if ((seeded_job || seeded_warmup) && mode != Mode::kFedAvg) {
    return absl::InvalidArgumentError(
        StrCat("randk(seed=round) runs with --mode fedavg (the FedAvg coordinator names each "
               "round's seed), not ",
               ModeName(mode)));
  }
  if (seeded_warmup && codecs::IsGradiveq(plan.codec)) {
    return absl::InvalidArgumentError(
        "--codec-warmup: randk(seed=round) cannot warm up a gradiveq job; use another codec");
  }
  for (const std::string& spec : plan.warmup_codecs) {
    if (codecs::NamesTwoPhasePowerSgd(spec)) {
      return absl::InvalidArgumentError(
          "--codec-warmup: powersgd(..., phases=2) runs as the job codec only");
    }
    if (codecs::IsGradiveq(spec)) {
      return absl::InvalidArgumentError(
          "--codec-warmup: gradiveq's bases belong to the job codec; warm up with another codec");
    }
    if (auto c = codecs::MakeCodec(spec, lgc ? nullptr : &layout); !c.ok()) {
      return absl::InvalidArgumentError(
          StrCat("--codec-warmup: ", std::string(c.status().message())));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Mode> CoordinatorOptions::JobMode() const {
  const std::optional<Mode> named = ParseMode(mode);
  if (!named) {
    std::string names;
    for (const ModeInfo& m : kModes) StrAppend(&names, names.empty() ? "" : ", ", m.name);
    return absl::InvalidArgumentError(StrCat("--mode must be one of ", names, ", not ", mode));
  }
  auto lgc = autoencoder::ParseLgcSpec(plan.codec);
  if (!lgc.ok()) return lgc.status();
  if (lgc->has_value()) {
    if (*named != Mode::kFedAvg && *named != Mode::kLgc) {
      return absl::InvalidArgumentError(StrCat("lgc(...) runs with --mode lgc, not ", mode));
    }
    return Mode::kLgc;
  }
  if (*named == Mode::kLgc) {
    return absl::InvalidArgumentError("--mode lgc needs an lgc(...) --codec");
  }
  return *named;
}

absl::Status CoordinatorOptions::Validate() const {
  if (rounds == 0) return absl::InvalidArgumentError("--rounds must be >= 1");
  if (min_clients == 0) return absl::InvalidArgumentError("--min-clients must be >= 1");
  if (!(fraction > 0 && fraction <= 1))
    return absl::InvalidArgumentError("--fraction must be in (0, 1]");
  if (!(round_timeout_s > 0)) return absl::InvalidArgumentError("--round-timeout must be > 0");
  if (!(max_client_weight > 0 && max_client_weight <= 1)) {
    return absl::InvalidArgumentError("--max-client-weight must be in (0, 1]");
  }
  if (!(plan.lr > 0) || plan.batch_size == 0)
    return absl::InvalidArgumentError("--lr and --batch must be > 0");
  if (max_message_bytes < 4096) {
    return absl::InvalidArgumentError("--max-message-bytes must be >= 4096");
  }
  if (plan.max_chunk_bytes < 1024 || plan.max_chunk_bytes > max_message_bytes - 1024) {
    return absl::InvalidArgumentError(
        StrCat("--chunk-bytes must be in [1024, ", max_message_bytes - 1024, "]"));
  }
  if (auto order = codecs::ParseUploadOrder(plan.upload_order); !order.ok()) {
    return absl::InvalidArgumentError(
        StrCat("--upload-order: ", std::string(order.status().message())));
  }
  auto job_mode = JobMode();
  if (!job_mode.ok()) return job_mode.status();
  if (absl::Status st = model_options().Validate(); !st.ok()) return st;
  if (eval_every > 0 || (guard.enabled && guard.samples > 0)) {
    if (absl::Status st = test_data_options().Validate(); !st.ok()) {
      return absl::InvalidArgumentError(StrCat("--test-data: ", st.message()));
    }
  }
  auto layout = core::ModelLayoutOf(model_options());
  if (!layout.ok()) return layout.status();
  if (absl::Status st = ValidateCodecs(plan, *job_mode, *layout); !st.ok()) return st;
  if (!insecure && (tls_ca.empty() || tls_cert.empty() || tls_key.empty())) {
    return absl::InvalidArgumentError(
        "mTLS needs --tls-ca, --tls-cert and --tls-key (or --insecure)");
  }
  if (auto robust = Robust(); !robust.ok()) return robust.status();
  if (absl::Status st = guard.Validate(); !st.ok()) return st;
  if (absl::Status st = streams.Validate(); !st.ok()) return st;
  if (max_streams_per_connection < 4) {
    return absl::InvalidArgumentError("--max-streams-per-connection must be >= 4");
  }
  if (!(ratio_target >= 0)) return absl::InvalidArgumentError("--ratio-target must be >= 0");
  if (!(linger_s >= 0)) return absl::InvalidArgumentError("--linger must be >= 0");
  if (torch_threads < 1) return absl::InvalidArgumentError("--torch-threads must be >= 1");
  return ValidateParent(*job_mode);
}

absl::Status CoordinatorOptions::ValidateParent(Mode job_mode) const {
  if (!has_parent()) return absl::OkStatus();
  if (job_mode != Mode::kFedAvg) {
    return absl::InvalidArgumentError(
        StrCat("--parent: an aggregator merges FedAvg updates; this job runs --mode ",
               ModeName(job_mode)));
  }
  if (codecs::NamesTwoPhasePowerSgd(plan.codec)) {
    return absl::InvalidArgumentError(
        "--parent: powersgd(..., phases=2) needs every client in one round; use it at the root "
        "or the one-phase powersgd(...)");
  }
  if (parent_id.empty() || parent_id.size() > 64) {
    return absl::InvalidArgumentError("--parent needs --parent-id, 1-64 characters");
  }
  if (!insecure && (parent_tls_cert.empty() || parent_tls_key.empty())) {
    return absl::InvalidArgumentError(
        "--parent needs --parent-tls-cert and --parent-tls-key: this coordinator's client "
        "certificate at its parent (or --insecure)");
  }
  if (!(parent_reserve > 0 && parent_reserve < 1)) {
    return absl::InvalidArgumentError("--parent-reserve must be in (0, 1)");
  }
  return absl::OkStatus();
}

core::ModelOptions CoordinatorOptions::model_options() const {
  core::ModelOptions o;
  o.model = model;
  o.buffers = buffers;
  o.loss = loss;
  return o;
}

core::DataOptions CoordinatorOptions::test_data_options() const {
  core::DataOptions d;
  d.spec = test_data;
  d.fashion_dir = data_dir;
  d.label_column = label_column;
  d.targets = targets;
  return d;
}

std::string CoordinatorOptions::ModelName() const {
  return std::filesystem::path(model).filename().string();
}

std::string CoordinatorOptions::JobId(const std::string& model_sha256) const {
  std::string id = StrCat("fedlgc-", ModelName());
  if (!model_sha256.empty()) StrAppend(&id, "-", model_sha256.substr(0, 12));
  if (has_parent()) StrAppend(&id, "@", parent_id);
  return id;
}

absl::StatusOr<AggregatorOptions> CoordinatorOptions::Robust() const {
  auto robust = AggregatorOptions::Parse(aggregator, clip_multiplier);
  if (!robust.ok()) {
    return absl::InvalidArgumentError(
        StrCat("--aggregator: ", std::string(robust.status().message())));
  }
  auto m = JobMode();
  if (!m.ok()) return m.status();
  // LSGD applies one leader's update per group and SGP relays shares: there is nothing to
  // take a median of (both clip, and both run under the model guard).
  if (robust->kind != AggregatorKind::kMean && *m != Mode::kFedAvg && *m != Mode::kLgc) {
    return absl::InvalidArgumentError(StrCat("--aggregator ", robust->Spec(), " works with ",
                                             "fedavg and lgc jobs; ", ModeName(*m),
                                             " takes mean (clipping still applies)"));
  }
  return robust;
}

std::string CoordinatorOptions::JobKey(uint64_t dim, const codecs::ModelLayout* layout,
                                       const std::string& model_sha256) const {
  auto codec = codecs::MakeCodec(plan.codec, layout);
  const std::string model_key = model_sha256.empty() ? model : StrCat("sha256:", model_sha256);
  std::string key = StrCat(model_key, "/", dim, "/",
                           codec.ok() ? (*codec)->wire_spec() : plan.codec, "/seed", init_seed);
  if (buffers != "average") StrAppend(&key, "/buffers:", buffers);
  // FedAvg and LGC jobs (which ran as --mode fedavg before LGC had a mode name) carry no
  // mode, so their checkpoints from before still load.
  const auto m = JobMode();
  if (m.ok() && *m != Mode::kFedAvg && *m != Mode::kLgc) StrAppend(&key, "/mode:", mode);
  for (const std::string& spec : plan.warmup_codecs) {
    auto w = codecs::MakeCodec(spec, layout);
    StrAppend(&key, "/warmup:", w.ok() ? (*w)->wire_spec() : spec);
  }
  // An aggregator's checkpoint is not a root's, nor another aggregator's.
  if (has_parent()) StrAppend(&key, "/parent-id:", parent_id);
  return key;
}

}  // namespace fedlgc::coordinator
