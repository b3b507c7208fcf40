// The decentralised modes' local model (see local_model.h).
#include "modes/local_model.h"

#include "base/str.h"
#include "codecs/registry.h"
#include "core/float_bytes.h"
#include "core/state_message.h"
#include "modes/local_model.pb.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {

absl::Status SaveLocalModel(const LocalModel& m, const std::string& slot,
                            std::map<std::string, std::string>* slots) {
  pb::LocalModel out;
  out.set_x(core::FloatsToBytes(m.x));
  out.set_w(m.w);
  out.set_trained_round(m.trained_round);
  out.set_pulled_round(m.pulled_round);
  out.set_loss(m.loss);
  out.set_inbox_applied(m.inbox_applied);
  out.set_contributed(core::FloatsToBytes(m.contributed));
  out.set_share_pw(m.share_pw);
  out.set_share(core::FloatsToBytes(m.share));
  auto bytes = core::SerializeMessage(out, StrCat("the ", slot, " slot"));
  if (!bytes.ok()) return bytes.status();
  (*slots)[slot] = *std::move(bytes);
  return absl::OkStatus();
}

absl::StatusOr<LocalModel> LoadLocalModel(const edge_client::ClientState& state,
                                          const std::string& slot) {
  LocalModel m;
  const auto it = state.modes.find(slot);
  if (it == state.modes.end()) {
    if (!state.legacy) return m;
    const edge_client::LegacyModeFields& l = *state.legacy;
    m.x = l.x;
    m.w = l.w;
    m.trained_round = l.trained_round;
    m.pulled_round = l.pulled_round;
    m.loss = l.loss;
    m.inbox_applied = l.inbox_applied;
    m.contributed = l.contributed;
    m.share_pw = l.share_pw;
    m.share = l.share;
    return m;
  }
  pb::LocalModel in;
  const auto bad = [&] {
    return absl::DataLossError(StrCat("the client state's ", slot, " slot is malformed"));
  };
  if (!in.ParseFromString(it->second)) return bad();
  auto x = core::FloatsFromBytes(in.x(), slot);
  auto contributed = core::FloatsFromBytes(in.contributed(), slot);
  auto share = core::FloatsFromBytes(in.share(), slot);
  if (!x.ok() || !contributed.ok() || !share.ok()) return bad();
  m.x = *std::move(x);
  m.w = in.w();
  m.trained_round = in.trained_round();
  m.pulled_round = in.pulled_round();
  m.loss = in.loss();
  m.inbox_applied = in.inbox_applied();
  m.contributed = *std::move(contributed);
  m.share_pw = in.share_pw();
  m.share = *std::move(share);
  if (!(m.w > 0) || (!m.share.empty() && m.share.size() != m.x.size())) return bad();
  return m;
}

bool RoundOver(const absl::Status& st) {
  return absl::IsNotFound(st) || absl::IsDeadlineExceeded(st) || absl::IsFailedPrecondition(st);
}

absl::StatusOr<bool> EnsureLocalModel(edge_client::ClientEnv& env, const protos::RoundStart& start,
                                      LocalModel* model) {
  LocalModel& m = *model;
  if (!m.x.empty() && m.x.size() == env.dim()) return true;
  auto x = env.DownloadFloats("", start.model_version(), edge_client::DeadlineOf(start));
  if (!x.ok()) {
    if (RoundOver(x.status())) return false;
    return x.status();
  }
  m = LocalModel();
  m.x = std::move(x).value();
  m.contributed = m.x;
  // A fresh model is the run's model: the pulls of this round are already in it.
  m.pulled_round = start.round();
  if (absl::Status st = env.Persist(); !st.ok()) return st;
  return true;
}

codecs::EncodeOptions RoundEncodeOptions(uint64_t seed, uint32_t max_chunk_bytes,
                                         const edge_client::ClientEnv& env) {
  codecs::EncodeOptions eopts;
  eopts.seed = seed;
  eopts.max_frame_bytes = max_chunk_bytes;
  eopts.cuts = env.scale_cuts();
  return eopts;
}

absl::StatusOr<codecs::Codec*> PlainCodec::Get(const std::string& spec) {
  if (!codec_ || spec_ != spec) {
    auto c = codecs::MakeCodec(spec);
    if (!c.ok()) return c.status();
    codec_ = std::move(c).value();
    spec_ = spec;
  }
  return codec_.get();
}

}  // namespace fedlgc::modes
