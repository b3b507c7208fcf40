// The decentralised modes' local model (see local_model.h).
#include "modes/local_model.h"

#include "codecs/registry.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {

bool RoundOver(const absl::Status& st) {
  return absl::IsNotFound(st) || absl::IsDeadlineExceeded(st) || absl::IsFailedPrecondition(st);
}

absl::StatusOr<bool> EnsureLocalModel(edge_client::ClientEnv& env,
                                      const protos::RoundStart& start) {
  edge_client::LocalModel& m = env.state().local;
  if (!m.x.empty() && m.x.size() == env.dim()) return true;
  auto x = env.DownloadFloats("", start.model_version(), edge_client::DeadlineOf(start));
  if (!x.ok()) {
    if (RoundOver(x.status())) return false;
    return x.status();
  }
  m = edge_client::LocalModel();
  m.x = std::move(x).value();
  m.contributed = m.x;
  // A fresh model is the run's model: the pulls of this round are already in it.
  m.pulled_round = start.round();
  if (absl::Status st = env.Persist(); !st.ok()) return st;
  return true;
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
