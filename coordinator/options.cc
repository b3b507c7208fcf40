// Coordinator options (see options.h).
#include "coordinator/options.h"

#include <algorithm>
#include <filesystem>

#include "base/str.h"
#include "codecs/priority.h"
#include "codecs/registry.h"
#include "codecs/round_kind.h"
#include "coordinator/codec_ladder.h"
#include "core/export.h"
#include "core/model.h"

namespace fedlgc::coordinator {
namespace {

// The job's codecs: the mode's rules first (ModeTraits::check_codecs), then what holds in
// every mode. `layout`: the model's, which the clients of a mode that takes it give their
// codecs.
absl::Status ValidateCodecs(const RoundPlan& plan, const std::vector<std::string>& ladder,
                            const ModeTraits& traits, const codecs::ModelLayout& layout) {
  if (traits.check_codecs != nullptr) {
    if (absl::Status st = traits.check_codecs(plan, layout); !st.ok()) return st;
  }
  if (!ladder.empty()) {
    if (!traits.codec_ladder) {
      return absl::InvalidArgumentError(
          StrCat("--codec-ladder: --mode ", ModeName(traits.mode),
                 " sends every participant the same codec; the ladder runs with --mode fedavg"));
    }
    if (!plan.warmup_codecs.empty()) {
      return absl::InvalidArgumentError("--codec-ladder takes no --codec-warmup");
    }
    if (plan.codec != ladder.front()) {
      return absl::InvalidArgumentError(StrCat("--codec-ladder: its first rung, ", ladder.front(),
                                               ", is the job codec; --codec is ", plan.codec));
    }
  }
  // TernGrad's shared scale is agreed before anyone encodes: the job codec itself.
  const codecs::RoundKind kind = codecs::RoundKindOf(plan.codec);
  if (kind.shared_scale == codecs::Placement::kNested) {
    return absl::InvalidArgumentError(
        "--codec: give terngrad(..., shared=1) itself, not inside another codec: its rounds "
        "agree on a scale first");
  }
  // The round protocols run as the job codec only (a seeded warm-up aside; which of them
  // combine is FedAvg's table's, modes/fedavg/round_protocols.cc).
  for (const std::string& spec : plan.warmup_codecs) {
    const codecs::RoundKind warmup = codecs::RoundKindOf(spec);
    if (codecs::Present(warmup.shared_scale)) {
      return absl::InvalidArgumentError(
          "--codec-warmup: terngrad(shared=1) agrees its scale as the job codec only");
    }
    if (codecs::Present(warmup.two_phase)) {
      return absl::InvalidArgumentError(
          "--codec-warmup: powersgd(..., phases=2) runs as the job codec only");
    }
    if (codecs::Present(warmup.basis)) {
      return absl::InvalidArgumentError(
          "--codec-warmup: gradiveq's bases belong to the job codec; warm up with another codec");
    }
    if (auto c = codecs::MakeCodec(spec, traits.codecs_take_layout ? &layout : nullptr); !c.ok()) {
      return absl::InvalidArgumentError(
          StrCat("--codec-warmup: ", std::string(c.status().message())));
    }
  }
  return absl::OkStatus();
}

// --bn-stats and its options (coordinator/statistics_phase.h).
absl::Status ValidateStatistics(const CoordinatorOptions& o, const ModeTraits& traits) {
  if (o.bn_stats != "off" && o.bn_stats != "on" && o.bn_stats != "auto") {
    return absl::InvalidArgumentError(
        StrCat("--bn-stats '", o.bn_stats, "': expected auto, on or off"));
  }
  if (o.bn_stats_batches == 0 || o.bn_stats_batch < 2 || !(o.bn_stats_timeout_s > 0)) {
    return absl::InvalidArgumentError(
        "--bn-stats-batches must be >= 1, --bn-stats-batch >= 2 and --bn-stats-timeout > 0");
  }
  if (o.bn_stats == "on" && !traits.summed) {
    return absl::InvalidArgumentError(
        StrCat("--bn-stats on with --mode ", ModeName(traits.mode),
               ": its clients keep models of their own; the statistics phase re-estimates a "
               "committed model every client starts from (--mode fedavg or lgc)"));
  }
  if (o.bn_stats == "on" && o.has_parent()) {
    return absl::InvalidArgumentError(
        "--bn-stats on with --parent: the root re-estimates its model's statistics; an "
        "aggregator's commits go to its parent, not to clients");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CoordinatorOptions::Validate(const ModeTraits& traits) const {
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
  if (absl::Status st = model_options().Validate(); !st.ok()) return st;
  if (!export_path.empty()) {
    if (has_parent()) {
      return absl::InvalidArgumentError(
          "--export with --parent: an aggregator's model is its parent's; export at the root");
    }
    if (auto files = core::ExportFiles::For(export_path); !files.ok()) return files.status();
  }
  if (export_best && export_path.empty()) {
    return absl::InvalidArgumentError("--export-best needs --export PATH");
  }
  if (eval != "auto" && eval != "server" && eval != "clients" && eval != "both") {
    return absl::InvalidArgumentError(
        StrCat("--eval '", eval, "': expected auto, server, clients or both"));
  }
  if ((eval == "server" || eval == "both") && !HasTestData()) {
    return absl::InvalidArgumentError(StrCat("--eval ", eval, " needs --test-data"));
  }
  if (!(eval_fraction >= 0 && eval_fraction <= 0.9)) {
    return absl::InvalidArgumentError("--eval-fraction must be in [0, 0.9]");
  }
  if (!(eval_timeout_s > 0)) return absl::InvalidArgumentError("--eval-timeout must be > 0");
  if (absl::Status st = ValidateStatistics(*this, traits); !st.ok()) return st;
  if (EvalOnClients() && eval_every > 0 && has_parent()) {
    return absl::InvalidArgumentError(
        "--eval clients with --parent: the root asks the clients; an aggregator's own "
        "clients are not asked");
  }
  if (HasTestData() && (EvalOnServer() || (guard.enabled && guard.samples > 0))) {
    if (absl::Status st = test_data_options().Validate(); !st.ok()) {
      return absl::InvalidArgumentError(StrCat("--test-data: ", st.message()));
    }
  }
  auto layout = core::ModelLayoutOf(model_options());
  if (!layout.ok()) return layout.status();
  if (absl::Status st = ValidateCodecs(plan, codec_ladder, traits, *layout); !st.ok()) return st;
  if (!codec_ladder.empty()) {
    // What the coordinator builds at the start, with a book of links it will fill.
    LinkBook links;
    auto ladder = CodecLadder::Create(codec_ladder, layout->dim(), &*layout, &links);
    if (!ladder.ok()) return ladder.status();
  }
  if (!insecure && (tls_ca.empty() || tls_cert.empty() || tls_key.empty())) {
    return absl::InvalidArgumentError(
        "mTLS needs --tls-ca, --tls-cert and --tls-key (or --insecure)");
  }
  if (auto robust = Robust(traits); !robust.ok()) return robust.status();
  if (absl::Status st = guard.Validate(); !st.ok()) return st;
  if (absl::Status st = streams.Validate(); !st.ok()) return st;
  if (max_streams_per_connection < 4) {
    return absl::InvalidArgumentError("--max-streams-per-connection must be >= 4");
  }
  if (!(ratio_target >= 0)) return absl::InvalidArgumentError("--ratio-target must be >= 0");
  if (!(linger_s >= 0)) return absl::InvalidArgumentError("--linger must be >= 0");
  if (torch_threads < 1) return absl::InvalidArgumentError("--torch-threads must be >= 1");
  return ValidateParent(traits);
}

absl::Status CoordinatorOptions::ValidateParent(const ModeTraits& traits) const {
  if (!has_parent()) return absl::OkStatus();
  if (!traits.plain_clients) {
    return absl::InvalidArgumentError(
        StrCat("--parent: an aggregator merges plain updates of the job codec; --mode ",
               ModeName(traits.mode), " needs every client in its own protocol"));
  }
  if (codecs::Present(codecs::RoundKindOf(plan.codec).two_phase)) {
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
  o.freeze = freeze;
  o.local_params = local_params;
  return o;
}

// Under --local-params the global model is no client's (each has a head of its own): auto
// evaluates on the clients.
bool CoordinatorOptions::EvalOnServer() const {
  return eval == "server" || eval == "both" ||
         (eval == "auto" && HasTestData() && local_params.empty());
}

bool CoordinatorOptions::EvalOnClients() const {
  return eval == "clients" || eval == "both" ||
         (eval == "auto" && (!HasTestData() || !local_params.empty()));
}

core::DataOptions CoordinatorOptions::test_data_options() const {
  core::DataOptions d;
  d.spec = test_data;
  d.fashion_dir = data_dir;
  d.label_column = label_column;
  d.targets = targets;
  d.inputs = inputs;
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

absl::StatusOr<AggregatorOptions> CoordinatorOptions::Robust(const ModeTraits& traits) const {
  auto robust = AggregatorOptions::Parse(aggregator, clip_multiplier);
  if (!robust.ok()) {
    return absl::InvalidArgumentError(
        StrCat("--aggregator: ", std::string(robust.status().message())));
  }
  // A mode that does not sum a set of updates (LSGD applies one leader's per group, SGP
  // relays shares) has nothing to take a median of; clipping and the guard still apply.
  if (robust->kind != AggregatorKind::kMean && !traits.robust_aggregators) {
    return absl::InvalidArgumentError(StrCat("--aggregator ", robust->Spec(), " does not apply to ",
                                             ModeName(traits.mode),
                                             " jobs, which sum no set of updates: use mean "
                                             "(clipping still applies)"));
  }
  return robust;
}

std::string JoinSpecs(const std::vector<std::string>& specs) {
  std::string out;
  for (const std::string& s : specs) out += (out.empty() ? "" : ";") + s;
  return out;
}

std::string CoordinatorOptions::JobKey(uint64_t dim, const codecs::ModelLayout* layout,
                                       const ModeTraits& traits,
                                       const std::string& model_sha256) const {
  auto codec = codecs::MakeCodec(plan.codec, layout);
  const std::string model_key = model_sha256.empty() ? model : StrCat("sha256:", model_sha256);
  std::string key = StrCat(model_key, "/", dim, "/",
                           codec.ok() ? (*codec)->wire_spec() : plan.codec, "/seed", init_seed);
  if (buffers != "average") StrAppend(&key, "/buffers:", buffers);
  if (!freeze.empty()) StrAppend(&key, "/freeze:", freeze);
  if (!local_params.empty()) StrAppend(&key, "/local-params:", local_params);
  // FedAvg and LGC jobs (which ran as --mode fedavg before LGC had a mode name) carry no
  // mode, so their checkpoints from before still load.
  if (traits.mode_in_job_key) StrAppend(&key, "/mode:", ModeName(traits.mode));
  for (const std::string& spec : plan.warmup_codecs) {
    auto w = codecs::MakeCodec(spec, layout);
    StrAppend(&key, "/warmup:", w.ok() ? (*w)->wire_spec() : spec);
  }
  // An aggregator's checkpoint is not a root's, nor another aggregator's.
  if (has_parent()) StrAppend(&key, "/parent-id:", parent_id);
  return key;
}

}  // namespace fedlgc::coordinator
