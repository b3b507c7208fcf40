// FedAvg at the edge (see fedavg_client.h).
#include "modes/fedavg/fedavg_client.h"

#include <algorithm>
#include <cstdio>

#include "base/log.h"
#include "base/str.h"
#include "codecs/frame.h"
#include "codecs/gradiveq.h"
#include "codecs/priority.h"
#include "codecs/registry.h"
#include "codecs/residual_codec.h"
#include "codecs/round_kind.h"
#include "core/float_bytes.h"
#include "core/state_message.h"
#include "modes/fedavg/fedavg_state.pb.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {
namespace {

constexpr char kSlot[] = "fedavg";

}  // namespace

absl::StatusOr<std::vector<float>> TrainUpdate(ClientEnv& env, const protos::RoundStart& start,
                                               SystemTime deadline) {
  auto weights = env.DownloadFloats("", start.model_version(), deadline);
  if (!weights.ok()) {
    // The round moved on (another version is served) or ended: wait for the next one.
    if (absl::IsNotFound(weights.status()) || absl::IsDeadlineExceeded(weights.status())) {
      return std::vector<float>();
    }
    return weights.status();
  }
  std::vector<float> update = *weights;
  if (auto loss = env.TrainLocal(start, &update); !loss.ok()) {
    // Nothing to send this round (an aggregator whose own round counted no update).
    if (absl::IsNotFound(loss.status())) return std::vector<float>();
    return loss.status();
  }
  for (size_t i = 0; i < update.size(); ++i) update[i] -= (*weights)[i];
  return update;
}

absl::StatusOr<std::unique_ptr<codecs::ResidualCodec>> MakeSenderCodec(
    const std::string& spec, const codecs::ModelLayout& layout,
    std::shared_ptr<const codecs::SliceBasis> basis, bool full_error_feedback) {
  // Every client keeps a residual. Biased codecs (top-k, sign) feed their compression
  // error back; unbiased ones keep only chunks that did not count, because their error
  // is noise with mean zero and feeding it back can grow without bound.
  auto parsed = codecs::MakeCodec(spec, &layout, basis);
  if (!parsed.ok()) return parsed.status();
  // GradiVeQ is biased but keeps no error either (codecs/gradiveq.h).
  std::string sender_spec = spec;
  if (dynamic_cast<codecs::ResidualCodec*>(parsed->get()) == nullptr) {
    const codecs::CodecTraits traits = (*parsed)->traits();
    const bool keep_error = full_error_feedback || !(traits.unbiased || traits.no_error_feedback);
    sender_spec = keep_error ? StrCat("ef(", spec, ")") : StrCat("ef(", spec, ",error=0)");
  }
  auto made = codecs::MakeCodec(sender_spec, &layout, basis);
  if (!made.ok()) return made.status();
  return std::unique_ptr<codecs::ResidualCodec>(
      static_cast<codecs::ResidualCodec*>(made->release()));
}

absl::StatusOr<std::vector<codecs::Frame>> EncodeRoundFrames(codecs::ResidualCodec& codec,
                                                             ClientEnv& env,
                                                             const protos::RoundStart& start,
                                                             std::span<const float> x,
                                                             float shared_scale, uint64_t seed) {
  std::vector<codecs::Frame> frames;
  codecs::EncodeOptions eopts;
  eopts.seed = seed;
  eopts.max_frame_bytes = start.max_chunk_bytes();
  eopts.shared_scale = shared_scale;
  auto order = codecs::ParseUploadOrder(start.upload_order());
  if (!order.ok()) return order.status();
  // P3's slices: by layer, every frame lies in one tensor (the buffers' scale cuts are
  // tensor cuts too).
  const std::vector<uint64_t> cuts =
      *order == codecs::UploadOrder::kLayer && env.layout().dim() == x.size()
          ? env.layout().TensorCuts()
          : env.scale_cuts();
  eopts.cuts = cuts;
  if (absl::Status st = codec.Encode(x, eopts, &frames); !st.ok()) return st;
  // Chunk i is the i-th frame to leave: what matters most first (P3).
  if (absl::Status st = codecs::OrderFrames(codec, *order, env.layout(), &frames); !st.ok()) {
    return st;
  }
  return frames;
}

FedAvgClient::FedAvgClient(ClientEnv& env) : env_(env), protocols_(MakeClientProtocols(*this)) {}

FedAvgClient::~FedAvgClient() = default;

absl::StatusOr<std::shared_ptr<const codecs::SliceBasis>> FedAvgClient::BasisFor(
    const std::string& spec, std::optional<SystemTime> deadline) {
  const auto named = codecs::RoundKindOf(spec).basis_named;
  if (!named) return nullptr;
  const std::string& word = named->second;
  if (basis_ && basis_->word() == word) return basis_;
  const std::string& saved = env_.state().codec_basis;
  if (!saved.empty()) {
    auto parsed = codecs::SliceBasis::Parse(saved, env_.layout());
    if (parsed.ok() && parsed->word() == word) {
      basis_ = std::make_shared<const codecs::SliceBasis>(*std::move(parsed));
      return basis_;
    }
  }
  if (!deadline) {
    return absl::FailedPreconditionError(
        StrCat("the GradiVeQ basis ", word, " that \"", spec, "\" names is not held here"));
  }
  auto bytes = env_.DownloadBlob(codecs::kGradiveqBasisBlob, named->first, *deadline);
  if (!bytes.ok()) return bytes.status();
  auto parsed = codecs::SliceBasis::Parse(*bytes, env_.layout());
  if (!parsed.ok()) return parsed.status();
  if (parsed->word() != word) {
    return absl::DataLossError(
        StrCat("the coordinator served the basis ", parsed->word(), "; the round names ", word));
  }
  basis_ = std::make_shared<const codecs::SliceBasis>(*std::move(parsed));
  return basis_;
}

absl::Status FedAvgClient::EnsureCodec(const std::string& spec) {
  if (codec_ && codec_spec_ == spec) return absl::OkStatus();
  auto basis = BasisFor(spec, std::nullopt);
  if (!basis.ok()) return basis.status();
  auto made = MakeSenderCodec(spec, env_.layout(), *basis);
  if (!made.ok()) return made.status();
  codec_ = *std::move(made);
  codec_spec_ = spec;
  // The residual is plain coordinates: it carries over when the job switches codecs.
  // Other sender state (DGC's momentum) belongs to the codec that wrote it.
  edge_client::ClientState& state = env_.state();
  if (state.residual.size() == env_.dim()) {
    codec_->SetResidual(state.residual);
  } else {
    state.residual.clear();
    state.codec_state.clear();
  }
  if (state.codec != spec) state.codec_state.clear();
  if (absl::Status st = codec_->LoadState(state.codec_state); !st.ok()) {
    // Momentum-like state is soft: a sender that cannot read it (a newer codec version,
    // say) starts it afresh rather than stop; the residual, the update's mass, is kept.
    log::Info(env_.client_id(), "%s; starting the codec's state afresh", st.ToString().c_str());
    state.codec_state.clear();
    codec_->LoadState("").IgnoreError();  // an empty state is always accepted
  }
  state.codec = spec;
  state.codec_basis = *basis ? (*basis)->bytes() : std::string();
  return absl::OkStatus();
}

absl::Status FedAvgClient::RestoreFrame(const std::string& frame) {
  absl::Status st = codec_->RestoreAny(frame, &env_.layout(), basis_);
  if (absl::IsFailedPrecondition(st)) {
    // Coded against a GradiVeQ basis no longer held anywhere: its values cannot be
    // recovered, and keeping the frame would stall every later round.
    log::Warning(env_.client_id(),
                 "a frame of an update in flight cannot be restored (%s): dropped",
                 std::string(st.message()).c_str());
    env_.metrics().AddChunks(env_.client_id(), "dropped", 1);
    return absl::OkStatus();
  }
  return st;
}

std::span<const float> FedAvgClient::residual() const {
  if (!codec_) return {};
  return codec_->residual();
}

ClientProtocol* FedAvgClient::Owner() const {
  for (const auto& p : protocols_) {
    if (p->Owns(env_.state())) return p.get();
  }
  return nullptr;
}

void FedAvgClient::KeepResidual() {
  env_.state().residual.assign(codec_->residual().begin(), codec_->residual().end());
}

void FedAvgClient::ResidualChanged() {
  if (codec_) codec_->SetResidual(env_.state().residual);
}

absl::Status FedAvgClient::OnRoundStart(const protos::RoundStart& start) {
  edge_client::ClientState& state = env_.state();
  const SystemTime deadline = edge_client::DeadlineOf(start);
  // The round's protocol, if one runs it: asked once what the round's codec needs.
  const codecs::RoundKind kind = codecs::RoundKindOf(start.codec());
  ClientProtocol* runner = nullptr;
  for (const auto& p : protocols_) {
    if (p->Runs(start, kind)) {
      runner = p.get();
      break;
    }
  }
  // This round's model was trained on already: its update went back into the residual
  // (below) and goes out again from there, not trained and added a second time.
  bool trained = false;
  // A protocol may take no update in flight but its own (a secure round's masked code;
  // one of the same round sent plainly, before the coordinator restarted with --secagg,
  // goes back too).
  const bool foreign = runner != nullptr && !runner->ResendsOthers() && !runner->Owns(state);
  if (state.pending &&
      (state.pending->round != start.round() ||
       state.pending->model_version != start.model_version() || state.codec != start.codec() ||
       foreign)) {
    // An update whose round ended without a receipt reaching us: nothing of it counted
    // as far as we can know, so all of it goes back into the residual. So does one coded
    // with another codec than the round's (a restarted coordinator that lost the GradiVeQ
    // basis it was coded against): the coordinator refuses its frames.
    trained = state.pending->round == start.round() &&
              state.pending->model_version == start.model_version();
    if (absl::Status st = Restore(*state.pending); !st.ok()) return st;
    state.pending.reset();
  }
  if (runner != nullptr && !runner->UsesRoundCodec()) return runner->OnRoundStart(start, trained);
  if (auto basis = BasisFor(start.codec(), deadline); !basis.ok()) {
    // The round moved on (another basis is served) or ended: wait for the next one.
    if (absl::IsNotFound(basis.status()) || absl::IsDeadlineExceeded(basis.status())) {
      return absl::OkStatus();
    }
    return basis.status();
  }
  if (absl::Status st = EnsureCodec(start.codec()); !st.ok()) return st;
  if (runner != nullptr) return runner->OnRoundStart(start, trained);
  if (!state.pending) {
    auto update = trained ? absl::StatusOr<std::vector<float>>(std::vector<float>(env_.dim(), 0.0f))
                          : TrainUpdate(env_, start, deadline);
    if (!update.ok()) return update.status();
    if (update->empty()) return absl::OkStatus();  // the round moved on
    return EncodeAndUpload(start, *update, /*shared_scale=*/0, env_.clock().Now());
  }
  return env_.UploadPending(start.round(), deadline);
}

absl::Status FedAvgClient::EncodeAndUpload(const protos::RoundStart& start,
                                           std::span<const float> update, float shared_scale,
                                           core::Clock::time_point encode_began) {
  edge_client::ClientState& state = env_.state();
  auto frames = EncodeRoundFrames(*codec_, env_, start, update, shared_scale, start.seed());
  if (!frames.ok()) return frames.status();
  env_.ObserveEncode(start.round(), encode_began);
  PendingUpdate p = env_.NewPending(start.round(), start.model_version());
  for (codecs::Frame& f : *frames) p.frames.push_back(std::move(f.bytes));
  state.pending = std::move(p);
  KeepResidual();
  state.codec_state = codec_->SaveState();  // only an encode changes it
  for (const auto& protocol : protocols_) protocol->OnEncoded();
  if (absl::Status st = env_.Persist(); !st.ok()) return st;
  return env_.UploadPending(start.round(), edge_client::DeadlineOf(start));
}

absl::Status FedAvgClient::RestoreFrames(const PendingUpdate& p, std::span<const uint32_t> chunks) {
  if (chunks.empty()) return absl::OkStatus();
  if (absl::Status st = EnsureCodec(env_.state().codec); !st.ok()) return st;
  for (uint32_t i : chunks) {
    if (i >= p.frames.size()) return absl::InternalError(StrCat("no chunk ", i, " to restore"));
    if (absl::Status st = RestoreFrame(p.frames[i]); !st.ok()) return st;
  }
  KeepResidual();
  return absl::OkStatus();
}

absl::Status FedAvgClient::OnReceipt(const protos::RoundReceipt& receipt) {
  edge_client::ClientState& state = env_.state();
  if (!state.pending || state.pending->round != receipt.round()) return absl::OkStatus();
  if (ClientProtocol* owner = Owner()) return owner->OnReceipt(receipt);
  const PendingUpdate& p = *state.pending;
  std::vector<bool> counted(p.frames.size(), false);
  if (receipt.update_id() == p.update_id) {
    for (uint32_t c : receipt.counted_chunks()) {
      if (c < counted.size()) counted[c] = true;
    }
  }
  if (absl::Status st = EnsureCodec(state.codec); !st.ok()) return st;
  uint64_t lost = 0;
  for (size_t i = 0; i < p.frames.size(); ++i) {
    if (counted[i]) continue;
    if (absl::Status st = RestoreFrame(p.frames[i]); !st.ok()) return st;
    ++lost;
  }
  KeepResidual();
  if (lost) env_.metrics().AddChunks(env_.client_id(), "lost", lost);
  state.pending.reset();
  return env_.Persist();
}

absl::Status FedAvgClient::OnModeEvent(const protos::ModeEvent& event) {
  for (const auto& p : protocols_) {
    if (auto handled = p->OnModeEvent(event)) return *std::move(handled);
  }
  return absl::OkStatus();  // another mode's event
}

absl::Status FedAvgClient::Restore(const PendingUpdate& p) {
  edge_client::ClientState& state = env_.state();
  if (ClientProtocol* owner = Owner()) return owner->Restore(p);
  if (absl::Status st = EnsureCodec(state.codec); !st.ok()) return st;
  for (const std::string& f : p.frames) {
    if (absl::Status st = RestoreFrame(f); !st.ok()) return st;
  }
  KeepResidual();
  return absl::OkStatus();
}

absl::Status FedAvgClient::LoadState(const edge_client::ClientState& state) {
  const auto it = state.modes.find(kSlot);
  if (it == state.modes.end()) {
    if (!state.legacy) return absl::OkStatus();
    for (const auto& p : protocols_) {
      if (absl::Status st = p->Load(nullptr, state); !st.ok()) return st;
    }
    return absl::OkStatus();
  }
  pb::FedAvgClientState in;
  if (!in.ParseFromString(it->second)) {
    return absl::DataLossError("the client state's fedavg slot is malformed");
  }
  for (const auto& p : protocols_) {
    if (absl::Status st = p->Load(&in, state); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status FedAvgClient::SaveState(std::map<std::string, std::string>* slots) const {
  pb::FedAvgClientState out;
  for (const auto& p : protocols_) p->Save(env_.state(), &out);
  auto bytes = core::SerializeMessage(out, "the fedavg slot");
  if (!bytes.ok()) return bytes.status();
  (*slots)[kSlot] = *std::move(bytes);
  return absl::OkStatus();
}

}  // namespace fedlgc::modes
