// Secure aggregation rounds at the edge (see secagg_client.h).
#include "modes/fedavg/secagg_client.h"

#include <cstring>

#include "base/failpoint.h"
#include "base/log.h"
#include "base/str.h"
#include "codecs/sum_code.h"
#include "codecs/zmod_frame.h"
#include "modes/fedavg/fedavg_client.h"
#include "modes/fedavg/fedavg_state.pb.h"
#include "privacy/skellam.h"

namespace fedlgc::modes {
namespace {

std::string BytesOf(const privacy::Key32& k) {
  return std::string(reinterpret_cast<const char*>(k.data()), k.size());
}
// A 32-byte field of the coordinator's; INVALID_ARGUMENT for another length.
absl::StatusOr<privacy::Key32> KeyOf(const std::string& bytes) {
  if (bytes.size() != 32) {
    return absl::InvalidArgumentError("secure aggregation: a public key of another length");
  }
  privacy::Key32 k{};
  std::memcpy(k.data(), bytes.data(), 32);
  return k;
}
// Whether a failed report is the round moving on (the next RoundStart says what next).
bool MovedOn(const absl::Status& st) {
  return absl::IsFailedPrecondition(st) || absl::IsDeadlineExceeded(st);
}

}  // namespace

absl::Status SecAggClientRounds::SitOut(const absl::Status& why) {
  log::Warning(env_.client_id(), "sits out secure aggregation round %llu: %s",
               static_cast<unsigned long long>(session_ ? session_->start.round() : 0),
               std::string(why.message()).c_str());
  session_.reset();
  return absl::OkStatus();
}

absl::Status SecAggClientRounds::SendKeys() {
  protos::ProgressReport report;
  report.set_client_id(env_.client_id());
  report.set_round(session_->start.round());
  auto* k = report.mutable_fedavg()->mutable_secagg_keys();
  k->set_enc_key(BytesOf(session_->secagg.public_keys().enc));
  k->set_mask_key(BytesOf(session_->secagg.public_keys().mask));
  const absl::Status st = env_.Report(report, edge_client::DeadlineOf(session_->start));
  if (MovedOn(st)) return absl::OkStatus();
  if (!st.ok()) return SitOut(st);
  return absl::OkStatus();
}

absl::Status SecAggClientRounds::OnRoundStart(const protos::RoundStart& start, bool trained) {
  const protos::SecAggRound& sa = start.fedavg().secagg();
  const edge_client::ClientState& state = env_.state();
  if (trained) {
    // This round's update went back into the residual (an update in flight of before the
    // round was a secure one): it waits there.
    trained_round_ = start.round();
    trained_version_ = start.model_version();
  }
  if (Owns(state) && state.pending->round == start.round()) {
    // A resumed upload of the masked code; then what the round asks next.
    if (absl::Status st = env_.UploadPending(start.round(), edge_client::DeadlineOf(start));
        !st.ok()) {
      return st;
    }
    return sa.has_unmask() && session_ ? OnUnmask(sa.unmask()) : absl::OkStatus();
  }
  if (!sa.masks()) {
    auto trained = EnsureTrained(start);
    if (!trained.ok() || !*trained) return trained.status();
    return SendCode(start, nullptr);
  }
  const bool ours = session_ && session_->start.round() == start.round() &&
                    session_->start.model_version() == start.model_version();
  if (!ours || (!sa.has_keys() && session_->shared)) {
    // A new round, or this one started over (a restarted coordinator has no keys of ours).
    session_.reset();
    if (sa.has_keys()) {
      // Its keys went out without ours: this client cannot mask in it.
      log::Info(env_.client_id(), "secure aggregation round %llu began without this client",
                static_cast<unsigned long long>(start.round()));
      return absl::OkStatus();
    }
    auto secagg = privacy::SecAggClient::Create(
        env_.client_id(), privacy::RoundContext(start.round(), sa.rotation_seed()));
    if (!secagg.ok()) return secagg.status();
    session_.emplace(Session{start, *std::move(secagg)});
    return SendKeys();
  }
  session_->start = start;
  if (!sa.has_keys()) return SendKeys();
  if (absl::Status st = OnKeys(sa.keys()); !st.ok()) return st;
  if (sa.has_shares() && session_) {
    if (absl::Status st = OnShares(sa.shares()); !st.ok()) return st;
  }
  if (sa.has_unmask() && session_) return OnUnmask(sa.unmask());
  return absl::OkStatus();
}

bool SecAggClientRounds::Runs(const protos::RoundStart& start,
                              const codecs::RoundKind& /*kind*/) const {
  return start.fedavg().has_secagg();
}

std::optional<absl::Status> SecAggClientRounds::OnModeEvent(const protos::ModeEvent& event) {
  if (event.has_secagg_keys()) return OnKeys(event.secagg_keys());
  if (event.has_secagg_shares()) return OnShares(event.secagg_shares());
  if (event.has_secagg_unmask()) return OnUnmask(event.secagg_unmask());
  return std::nullopt;
}

absl::Status SecAggClientRounds::Load(const pb::FedAvgClientState* slot,
                                      const edge_client::ClientState& /*state*/) {
  if (slot != nullptr) {
    trained_round_ = slot->secagg_round();
    trained_version_ = slot->secagg_version();
    update_id_ = slot->secagg_update_id();
  }
  return absl::OkStatus();
}

void SecAggClientRounds::Save(const edge_client::ClientState& /*state*/,
                              pb::FedAvgClientState* slot) const {
  slot->set_secagg_round(trained_round_);
  slot->set_secagg_version(trained_version_);
  slot->set_secagg_update_id(update_id_);
}

absl::Status SecAggClientRounds::OnKeys(const protos::SecAggKeys& keys) {
  if (!session_ || session_->start.round() != keys.round() || session_->shared) {
    return absl::OkStatus();
  }
  if (keys.has_own() && (keys.own().enc_key() != BytesOf(session_->secagg.public_keys().enc) ||
                         keys.own().mask_key() != BytesOf(session_->secagg.public_keys().mask))) {
    // The coordinator holds other keys of this client's (sent before it restarted): its
    // peers would mask against those.
    return SitOut(absl::FailedPreconditionError("the coordinator holds other keys of this client"));
  }
  std::vector<privacy::Peer> peers;
  for (const protos::SecAggPeer& p : keys.peers()) {
    auto enc = KeyOf(p.enc_key());
    auto mask = KeyOf(p.mask_key());
    if (!enc.ok() || !mask.ok()) return SitOut(enc.ok() ? mask.status() : enc.status());
    peers.push_back({p.client_id(), {*enc, *mask}});
  }
  auto shared = session_->secagg.ShareKeys(peers, static_cast<int>(keys.threshold()));
  if (!shared.ok()) return SitOut(shared.status());
  protos::ProgressReport report;
  report.set_client_id(env_.client_id());
  report.set_round(keys.round());
  auto* s = report.mutable_fedavg()->mutable_secagg_shares();
  for (const privacy::Box& b : shared->boxes) {
    auto* box = s->add_boxes();
    box->set_peer(b.peer);
    box->set_box(b.bytes);
  }
  s->set_commitment(BytesOf(shared->commitment));
  session_->shared = true;
  const protos::RoundStart start = session_->start;
  const absl::Status st = env_.Report(report, edge_client::DeadlineOf(start));
  if (!st.ok() && !MovedOn(st)) return SitOut(st);
  // Training runs while the coordinator gathers everyone's shares.
  auto trained = EnsureTrained(start);
  return trained.status();
}

absl::Status SecAggClientRounds::OnShares(const protos::SecAggShares& shares) {
  if (!session_ || session_->start.round() != shares.round() || !session_->shared ||
      session_->masked) {
    return absl::OkStatus();
  }
  std::vector<privacy::Box> boxes;
  for (const protos::SecAggBox& b : shares.boxes()) {
    if (b.point() > 255) return SitOut(absl::InvalidArgumentError("a share's point past 255"));
    boxes.push_back({b.peer(), b.box(), static_cast<uint8_t>(b.point())});
  }
  auto bad = session_->secagg.ReceiveShares(boxes);
  if (!bad.ok()) return SitOut(bad.status());
  for (const std::string& peer : *bad) {
    log::Warning(env_.client_id(),
                 "round %llu: the box of shares from %s does not open: its shares are not kept",
                 static_cast<unsigned long long>(shares.round()), peer.c_str());
  }
  const protos::RoundStart start = session_->start;
  // Trained when the keys came, unless that failed: once more now.
  auto trained = EnsureTrained(start);
  if (!trained.ok()) return trained.status();
  if (!*trained) return absl::OkStatus();  // the round moved on before its update was trained
  session_->masked = true;
  return SendCode(start, &*session_);
}

absl::Status SecAggClientRounds::OnUnmask(const protos::SecAggUnmask& unmask) {
  if (!session_ || session_->start.round() != unmask.round() || !session_->masked) {
    return absl::OkStatus();
  }
  const std::set<std::string> survivors(unmask.survivors().begin(), unmask.survivors().end());
  const std::set<std::string> dropped(unmask.dropped().begin(), unmask.dropped().end());
  auto reveals = session_->secagg.Unmask(survivors, dropped);
  if (!reveals.ok()) {
    // A request this client must not answer (it could reveal a seed and a key of one peer).
    log::Warning(env_.client_id(), "refuses to unmask round %llu: %s",
                 static_cast<unsigned long long>(unmask.round()),
                 std::string(reveals.status().message()).c_str());
    return absl::OkStatus();
  }
  protos::ProgressReport report;
  report.set_client_id(env_.client_id());
  report.set_round(unmask.round());
  auto* r = report.mutable_fedavg()->mutable_secagg_reveal();
  for (const privacy::Reveal& v : *reveals) {
    auto* out = r->add_reveals();
    out->set_peer(v.peer);
    out->set_key(v.key);
    out->set_x(v.share.x);
    out->set_y(std::string(v.share.y.begin(), v.share.y.end()));
  }
  const absl::Status st = env_.Report(report, edge_client::DeadlineOf(session_->start));
  if (absl::IsInvalidArgument(st)) {
    // Some shares left out (the coordinator says which); the others count.
    log::Warning(env_.client_id(), "%s", std::string(st.message()).c_str());
    return absl::OkStatus();
  }
  return MovedOn(st) ? absl::OkStatus() : st;
}

absl::StatusOr<bool> SecAggClientRounds::EnsureTrained(const protos::RoundStart& start) {
  if (trained_round_ == start.round() && trained_version_ == start.model_version()) return true;
  auto update = TrainUpdate(env_, start, edge_client::DeadlineOf(start));
  if (!update.ok()) return update.status();
  if (update->empty()) return false;  // the round moved on
  edge_client::ClientState& state = env_.state();
  if (state.residual.size() != update->size()) state.residual.assign(update->size(), 0.0f);
  for (size_t i = 0; i < update->size(); ++i) state.residual[i] += (*update)[i];
  residual_changed_();
  trained_round_ = start.round();
  trained_version_ = start.model_version();
  if (absl::Status st = env_.Persist(); !st.ok()) return st;
  return true;
}

absl::Status SecAggClientRounds::SendCode(const protos::RoundStart& start, const Session* session) {
  const protos::SecAggRound& sa = start.fedavg().secagg();
  const auto t0 = env_.clock().Now();
  if (sa.kept() > env_.dim()) {
    return absl::InvalidArgumentError(StrCat("secure aggregation: a code of ", sa.kept(), " of ",
                                             env_.dim(), " coordinates"));
  }
  auto code = codecs::SumCode::Create(env_.dim(), static_cast<int>(sa.levels()), sa.clip(),
                                      sa.kappa(), sa.rotation_seed(), sa.kept());
  if (!code.ok()) return code.status();
  const int width = static_cast<int>(sa.width());
  if (width < code->code_bits() || width > codecs::kMaxZmodBits) {
    return absl::InvalidArgumentError(StrCat("secure aggregation: words of ", width,
                                             " bits for codes of ", code->code_bits()));
  }
  edge_client::ClientState& state = env_.state();
  if (state.residual.size() != env_.dim()) state.residual.assign(env_.dim(), 0.0f);
  auto encoded = code->Encode(state.residual, start.seed());
  if (!encoded.ok()) return encoded.status();
  if (encoded->saturated > env_.dim() / 1000) {
    log::Info(env_.client_id(), "round %llu: %llu coordinates past the grid of kappa %g (cut)",
              static_cast<unsigned long long>(start.round()),
              static_cast<unsigned long long>(encoded->saturated), sa.kappa());
  }
  const uint64_t mask = (uint64_t{1} << width) - 1;
  if (sa.norm_bins() != 0 && sa.norm_bins() != codecs::SumCode::kNormBins) {
    return absl::InvalidArgumentError(
        StrCat("secure aggregation: a norm histogram of ", sa.norm_bins(), " bins"));
  }
  std::vector<int64_t> noised(encoded->code.begin(), encoded->code.end());
  if (sa.noise_variance() > 0) {
    // Distributed DP: this client's share of the sum's noise, from a fresh key.
    if (session == nullptr) {
      return absl::InvalidArgumentError("secure aggregation: noise is asked only of masked codes");
    }
    if (absl::Status st = privacy::AddSkellamNoise(sa.noise_variance(), noised); !st.ok()) {
      return st;
    }
  }
  std::vector<uint64_t> words(noised.size() + sa.norm_bins(), 0);
  for (size_t i = 0; i < noised.size(); ++i) words[i] = static_cast<uint64_t>(noised[i]) & mask;
  if (sa.norm_bins() > 0) words[noised.size() + codecs::SumCode::NormBin(encoded->norm)] = 1;
  if (session != nullptr) {
    if (absl::Status st = session->secagg.Mask(width, words); !st.ok()) return st;
  }
  std::vector<codecs::Frame> frames;
  if (absl::Status st = codecs::EncodeZmod(words, width, start.max_chunk_bytes(), &frames);
      !st.ok()) {
    return st;
  }
  env_.ObserveEncode(start.round(), t0);
  edge_client::PendingUpdate p = env_.NewPending(start.round(), start.model_version());
  for (codecs::Frame& f : frames) p.frames.push_back(std::move(f.bytes));
  update_id_ = p.update_id;
  state.pending = std::move(p);
  if (absl::Status st = env_.Persist(); !st.ok()) return st;
  Failpoint("secagg-masked", start.round());
  if (absl::Status st = env_.UploadPending(start.round(), edge_client::DeadlineOf(start));
      !st.ok()) {
    return st;
  }
  Failpoint("secagg-uploaded", start.round());
  return absl::OkStatus();
}

absl::Status SecAggClientRounds::OnReceipt(const protos::RoundReceipt& receipt) {
  edge_client::ClientState& state = env_.state();
  if (!Owns(state) || state.pending->round != receipt.round()) return absl::OkStatus();
  const edge_client::PendingUpdate& p = *state.pending;
  if (receipt.update_id() == p.update_id &&
      receipt.counted_chunks_size() == static_cast<int>(p.frames.size())) {
    // It counted, whole: what it coded was the residual.
    state.residual.assign(env_.dim(), 0.0f);
    residual_changed_();
  }
  state.pending.reset();
  update_id_ = 0;
  if (session_ && session_->start.round() == receipt.round()) session_.reset();
  return env_.Persist();
}

}  // namespace fedlgc::modes
