// SCAFFOLD at the edge (see scaffold_client.h).
#include "modes/fedavg/scaffold_client.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/log.h"
#include "base/str.h"
#include "codecs/input_error.h"
#include "codecs/residual_codec.h"
#include "core/float_bytes.h"
#include "modes/fedavg/algorithm.h"
#include "modes/fedavg/fedavg_client.h"
#include "modes/fedavg/fedavg_state.pb.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {
namespace {

// Part 1's codec draws its randomness apart from part 0's (stochastic rounding, random
// selection): the same seed would give both parts the same draws. Frames decode without
// the encode's seed (codecs::Codec::Decode takes none): randk without seed= writes its
// indices into the frame, and randk(seed=S) names S in the spec both parts share.
constexpr uint64_t kChangeSeedSalt = 0x5CAFF01D5CAFF01DULL;

bool MovedOn(const absl::Status& st) {
  return absl::IsNotFound(st) || absl::IsDeadlineExceeded(st);
}

}  // namespace

absl::StatusOr<std::vector<float>> ControlChange(std::span<const float> x, std::span<const float> y,
                                                 std::span<const float> c, double lr_sum,
                                                 uint64_t trainable_end) {
  if (y.size() != x.size() || c.size() != x.size()) {
    return absl::InvalidArgumentError(StrCat("SCAFFOLD's change of c_i: ", x.size(), " weights, ",
                                             y.size(), " trained, ", c.size(), " values of c"));
  }
  std::vector<float> change(x.size(), 0.0f);
  if (!(lr_sum > 0)) return change;
  const size_t end = std::min<uint64_t>(trainable_end, x.size());
  for (size_t j = 0; j < end; ++j) {
    const double v = -static_cast<double>(c[j]) +
                     (static_cast<double>(x[j]) - static_cast<double>(y[j])) / lr_sum;
    change[j] = static_cast<float>(v);
    if (!std::isfinite(change[j])) {
      return codecs::NonFiniteError(
          StrCat("SCAFFOLD's change of c_i is not finite at coordinate ", j));
    }
  }
  return change;
}

uint64_t TrainableEnd(const edge_client::ClientEnv& env) {
  // The flat vector holds the parameters first and the averaged buffers after them, and
  // the scale cuts are where the buffers begin (ClientEnv::scale_cuts).
  const std::vector<uint64_t>& cuts = env.scale_cuts();
  return cuts.empty() ? env.dim() : cuts.front();
}

ScaffoldClient::ScaffoldClient(FedAvgClientCore& core) : core_(core) {}
ScaffoldClient::~ScaffoldClient() = default;

bool ScaffoldClient::Runs(const protos::RoundStart& start,
                          const codecs::RoundKind& /*kind*/) const {
  return start.objective().has_scaffold();
}

bool ScaffoldClient::Owns(const edge_client::ClientState& state) const {
  if (!state.pending) return false;
  const std::vector<uint32_t>& parts = state.pending->parts;
  return std::find(parts.begin(), parts.end(), 1u) != parts.end();
}

absl::Status ScaffoldClient::EnsureCodec(const std::string& spec) {
  if (codec_ && codec_spec_ == spec) return absl::OkStatus();
  // Full error feedback whatever the codec: c_i has moved by the whole change, and the
  // coordinator's sum must come to it (scaffold_rounds.h). An unbiased codec's error goes
  // into the residual too: unlike the model update's, it would not average out, since every
  // later correction c - c_i carries it.
  auto made = MakeSenderCodec(spec, core_.env().layout(), /*basis=*/nullptr,
                              /*full_error_feedback=*/true);
  if (!made.ok()) return made.status();
  codec_ = *std::move(made);
  codec_spec_ = spec;
  return absl::OkStatus();
}

void ScaffoldClient::LoadResidual(size_t n) {
  if (residual_.size() == n) {
    codec_->SetResidual(residual_);
  } else {
    codec_->SetResidual(std::vector<float>(n, 0.0f));
  }
}

absl::StatusOr<std::optional<ScaffoldClient::Trained>> ScaffoldClient::Train(
    const protos::RoundStart& start, edge_client::SystemTime deadline) {
  edge_client::ClientEnv& env = core_.env();
  auto x = env.DownloadFloats("", start.model_version(), deadline);
  if (!x.ok()) {
    if (MovedOn(x.status())) return std::optional<Trained>();  // the round moved on
    return x.status();
  }
  auto c = env.DownloadFloats(kScaffoldControlBlob, start.objective().scaffold().control_version(),
                              deadline);
  if (!c.ok()) {
    if (MovedOn(c.status())) return std::optional<Trained>();  // the round moved on
    return c.status();
  }
  const size_t n = x->size();
  if (c->size() != n) {
    return absl::DataLossError(
        StrCat(kScaffoldControlBlob, ": ", c->size(), " values for a model of ", n));
  }
  std::vector<float> correction(*c);
  if (control_.size() == n) {
    for (size_t j = 0; j < n; ++j) correction[j] -= control_[j];
  }
  std::vector<float> y = *x;
  auto trained = env.TrainLocalWith(start, &y, edge_client::LocalTerms{.correction = correction});
  if (!trained.ok()) {
    // Nothing to send this round (an aggregator whose own round counted no update).
    if (absl::IsNotFound(trained.status())) return std::optional<Trained>();
    return trained.status();
  }
  if (trained->steps == 0) {
    log::Warning(env.client_id(), "round %llu: no local step taken: c_i stays as it is",
                 static_cast<unsigned long long>(start.round()));
  }
  auto change = ControlChange(*x, y, *c, trained->lr_sum, TrainableEnd(env));
  if (!change.ok()) return change.status();
  Trained out;
  out.update = std::move(y);
  for (size_t j = 0; j < n; ++j) out.update[j] -= (*x)[j];
  out.change = *std::move(change);
  return std::optional<Trained>(std::move(out));
}

absl::Status ScaffoldClient::Stage(const protos::RoundStart& start, std::span<const float> change) {
  edge_client::ClientEnv& env = core_.env();
  const size_t n = change.size();
  if (absl::Status st = EnsureCodec(start.codec()); !st.ok()) return st;
  // The codec's residual is ours, set before each use: an encode that fails leaves nothing
  // of it behind.
  LoadResidual(n);
  auto frames = EncodeRoundFrames(*codec_, env, start, change, /*shared_scale=*/0,
                                  start.seed() ^ kChangeSeedSalt);
  if (!frames.ok()) return frames.status();
  Staged s;
  for (codecs::Frame& f : *frames) s.frames.push_back(std::move(f.bytes));
  s.control = control_.size() == n ? control_ : std::vector<float>(n, 0.0f);
  // c_i+ = c_i + delta c_i, as the coordinator adds it (not c_i - c + (x - y) / (K lr)
  // computed apart, which rounds differently).
  for (size_t j = 0; j < n; ++j) s.control[j] += change[j];
  s.residual.assign(codec_->residual().begin(), codec_->residual().end());
  s.round = start.round();
  staged_ = std::move(s);
  return absl::OkStatus();
}

absl::Status ScaffoldClient::OnRoundStart(const protos::RoundStart& start, bool trained) {
  edge_client::ClientEnv& env = core_.env();
  edge_client::ClientState& state = env.state();
  const edge_client::SystemTime deadline = edge_client::DeadlineOf(start);
  // FedAvgClient put back every update in flight but this round's own: a resumed upload.
  if (state.pending) return env.UploadPending(start.round(), deadline);
  if (start.round() < round_) {
    // Rounds go on within a job (a round that ended without a commit runs again under its
    // own number): c_i of a later round is another job's, whose coordinator summed it.
    log::Warning(env.client_id(),
                 "SCAFFOLD state of round %llu in round %llu: another job's, c_i starts at 0",
                 static_cast<unsigned long long>(round_),
                 static_cast<unsigned long long>(start.round()));
    control_.clear();
    residual_.clear();
    round_ = 0;
  }
  Trained t;
  if (trained) {
    // The round's update and change went back into the residuals (a restore of this
    // round's own update in flight): they go out from there, c_i has moved already.
    t.update.assign(env.dim(), 0.0f);
    t.change.assign(env.dim(), 0.0f);
  } else {
    auto got = Train(start, deadline);
    if (!got.ok()) return got.status();
    if (!got->has_value()) return absl::OkStatus();  // the round moved on
    t = **std::move(got);
  }
  const auto encode_began = env.clock().Now();  // the round's encode: both parts
  if (absl::Status st = Stage(start, t.change); !st.ok()) return st;
  // Part 0 through FedAvgClient's codec and residual; OnEncoded adds part 1 to the update
  // in flight before EncodeAndUpload persists and uploads it.
  const absl::Status st = core_.EncodeAndUpload(start, t.update, /*shared_scale=*/0, encode_began);
  staged_.reset();  // joined the update, or the encode failed: c_i and the residual unmoved
  return st;
}

void ScaffoldClient::OnEncoded() {
  if (!staged_) return;  // another protocol's encode, or a round without SCAFFOLD
  edge_client::ClientState& state = core_.env().state();
  // EncodeAndUpload sets state.pending before it calls the protocols' OnEncoded, and
  // persists after it.
  if (!state.pending) return;
  edge_client::PendingUpdate& p = *state.pending;
  p.parts.resize(p.frames.size(), 0);  // part 0: the model update's frames
  for (std::string& f : staged_->frames) {
    p.frames.push_back(std::move(f));
    p.parts.push_back(1);
  }
  control_ = std::move(staged_->control);
  residual_ = std::move(staged_->residual);
  round_ = staged_->round;
  staged_.reset();
}

absl::StatusOr<uint64_t> ScaffoldClient::RestoreUncounted(const edge_client::PendingUpdate& p,
                                                          const std::vector<bool>& counted) {
  std::vector<uint32_t> model_part;
  std::vector<uint32_t> change_part;
  for (uint32_t i = 0; i < p.frames.size(); ++i) {
    if (counted[i]) continue;
    (i < p.parts.size() && p.parts[i] == 1 ? change_part : model_part).push_back(i);
  }
  if (absl::Status st = core_.RestoreFrames(p, model_part); !st.ok()) return st;
  if (!change_part.empty()) {
    edge_client::ClientEnv& env = core_.env();
    const size_t n = env.dim();
    // RestoreAny decodes a frame of any codec of this dimension: the spec the codec is
    // made for does not matter (the residual's codec is the state's).
    if (absl::Status st = EnsureCodec(codec_spec_.empty() ? env.state().codec : codec_spec_);
        !st.ok()) {
      return st;
    }
    LoadResidual(n);
    for (uint32_t i : change_part) {
      if (absl::Status st = codec_->RestoreAny(p.frames[i], &env.layout()); !st.ok()) return st;
    }
    residual_.assign(codec_->residual().begin(), codec_->residual().end());
  }
  return model_part.size() + change_part.size();
}

absl::Status ScaffoldClient::OnReceipt(const protos::RoundReceipt& receipt) {
  edge_client::ClientEnv& env = core_.env();
  edge_client::ClientState& state = env.state();
  if (!state.pending || state.pending->round != receipt.round()) return absl::OkStatus();
  const edge_client::PendingUpdate& p = *state.pending;
  std::vector<bool> counted(p.frames.size(), false);
  if (receipt.update_id() == p.update_id) {
    for (uint32_t c : receipt.counted_chunks()) {
      if (c < counted.size()) counted[c] = true;
    }
  }
  auto lost = RestoreUncounted(p, counted);
  if (!lost.ok()) return lost.status();
  if (*lost > 0) env.metrics().AddChunks(env.client_id(), "lost", *lost);
  state.pending.reset();
  return env.Persist();
}

absl::Status ScaffoldClient::Restore(const edge_client::PendingUpdate& p) {
  // As FedAvgClient::Restore: the caller drops the update and persists later.
  return RestoreUncounted(p, std::vector<bool>(p.frames.size(), false)).status();
}

absl::Status ScaffoldClient::Load(const pb::FedAvgClientState* slot,
                                  const edge_client::ClientState& /*state*/) {
  if (slot == nullptr) return absl::OkStatus();  // a state of before SCAFFOLD: c_i = 0
  const size_t n = core_.env().dim();
  auto control = core::FloatsFromBytes(slot->scaffold_control(), "the client's c_i");
  auto residual = core::FloatsFromBytes(slot->scaffold_residual(), "the residual of c_i");
  if (!control.ok()) return control.status();
  if (!residual.ok()) return residual.status();
  const auto fits = [n](const std::vector<float>& v) { return v.empty() || v.size() == n; };
  if (!fits(*control) || !fits(*residual)) {
    // A state folder reused for a model of another dimension: the model's residual is
    // dropped in that case (FedAvgClient::EnsureCodec), and so are these.
    log::Warning(core_.env().client_id(),
                 "SCAFFOLD state of %d values for a model of %d: starting c_i at 0",
                 fits(*control) ? residual->size() : control->size(), n);
    control_.clear();
    residual_.clear();
    round_ = 0;
    return absl::OkStatus();
  }
  control_ = *std::move(control);
  residual_ = *std::move(residual);
  round_ = slot->scaffold_round();
  return absl::OkStatus();
}

void ScaffoldClient::Save(const edge_client::ClientState& /*state*/,
                          pb::FedAvgClientState* slot) const {
  slot->set_scaffold_control(core::FloatsToBytes(control_));
  slot->set_scaffold_residual(core::FloatsToBytes(residual_));
  slot->set_scaffold_round(round_);
}

}  // namespace fedlgc::modes
