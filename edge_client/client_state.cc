// Client state file: u32 magic 'FLCS', u32 version, then
//   version 12: the message state::ClientState (protos/state.proto, core/state_message.h),
//   each mode's state in its slot;
//   versions 1 to 11, the modes' fields among the file's own (read into LegacyModeFields):
//   str codec, floats residual, u32 has_pending, [u64 round, u64 version, u64 update_id,
//   u64 samples, u32 n, str frame*n, u32 lgc_stage, str lgc_support (u32 each), floats
//   lgc_values, u32 flags (1 gossip share, 2 LSGD lead), floats scales], then the local
//   model: floats x, f64 w, u64 trained_round, u64 pulled_round, f64 loss, u64
//   inbox_applied, floats contributed, f64 share_pw, floats share; then str codec_state, str
//   codec_basis; then the pending update's u32 psgd_phase, floats psgd_factor, str job; then
//   u64 scale_round, u64 scale_version. Version 1 files (no LGC fields), version 2 (no flags,
//   no local model), version 3 (whose share in flight was still inside x and w), version 4
//   (no echo), version 5 (no codec state), version 6 (no codec basis), version 7 (no
//   PowerSGD phase), version 8 (no job), version 9 (no shared-scale round); versions 5 to 10
//   hold an LGC echo (u64 round, floats values, u32 leader) after the share, which LGC's
//   echo=1 used and is skipped.
// CRC32C at the end (core/atomic_file.h).
#include "edge_client/client_state.h"

#include <cstring>

#include "base/file.h"
#include "base/str.h"
#include "core/float_bytes.h"
#include "core/state_file.h"
#include "core/state_message.h"
#include "protos/state.pb.h"

namespace fedlgc::edge_client {
namespace {

constexpr uint32_t kMagic = 0x53434C46;  // "FLCS"
constexpr uint32_t kVersion = 12;

// The pending update of a state of `version` < 12 (the part after its presence flag).
bool ReadPending(core::StateReader& r, uint32_t version, PendingUpdate* p, LegacyModeFields* legacy,
                 bool* gossip) {
  uint32_t n = 0;
  if (!r.U64(&p->round) || !r.U64(&p->model_version) || !r.U64(&p->update_id) ||
      !r.U64(&p->num_samples) || !r.U32(&n) || n > (1u << 20)) {
    return false;
  }
  p->frames.resize(n);
  for (std::string& f : p->frames) {
    if (!r.Str(&f, 64u << 20)) return false;
  }
  if (version >= 2) {
    std::string support;
    if (!r.U32(&legacy->lgc_stage) || !r.Str(&support, 1u << 30) || support.size() % 4 != 0 ||
        !r.Floats(&legacy->lgc_values)) {
      return false;
    }
    legacy->lgc_support.resize(support.size() / 4);
    std::memcpy(legacy->lgc_support.data(), support.data(), support.size());
    if (legacy->lgc_values.size() != legacy->lgc_support.size()) return false;
  }
  uint32_t flags = 0;
  if (version >= 3 && !r.U32(&flags)) return false;
  *gossip = (flags & 1) != 0;  // the LSGD lead flag (2) told nothing the mode needs
  if (version >= 4 &&
      (!r.Floats(&p->scales) || (!p->scales.empty() && p->scales.size() != p->frames.size()))) {
    return false;
  }
  return true;
}

// The local model of a state of `version` 3 to 11 (LSGD, SGP).
bool ReadLocalModel(core::StateReader& r, uint32_t version, bool gossip, LegacyModeFields* m) {
  if (!r.Floats(&m->x) || !r.F64(&m->w) || !r.U64(&m->trained_round) || !r.U64(&m->pulled_round) ||
      !r.F64(&m->loss) || !r.U64(&m->inbox_applied) || !r.Floats(&m->contributed) ||
      !r.F64(&m->share_pw) || !r.Floats(&m->share)) {
    return false;
  }
  if (!(m->w > 0) || (!m->share.empty() && m->share.size() != m->x.size())) return false;
  if (version == 3 && gossip && !m->share.empty()) {
    // Version 3 kept a share in flight inside x and w until its receipt came.
    for (size_t i = 0; i < m->x.size(); ++i) m->x[i] -= m->share[i];
    m->w -= m->share_pw;
  }
  return true;
}

// The body of a state of `version` 1 to 11.
bool ReadOldVersion(core::StateReader& r, uint32_t version, ClientState* s) {
  LegacyModeFields legacy;
  uint32_t has = 0;
  bool gossip = false;
  if (!r.Str(&s->codec) || !r.Floats(&s->residual) || !r.U32(&has)) return false;
  if (has) {
    PendingUpdate p;
    if (!ReadPending(r, version, &p, &legacy, &gossip)) return false;
    s->pending = std::move(p);
  }
  if (version >= 3 && !ReadLocalModel(r, version, gossip, &legacy)) return false;
  if (version >= 5 && version <= 10) {  // an LGC echo, not kept any more
    uint64_t round = 0;
    std::vector<float> values;
    uint32_t leader = 0;
    if (!r.U64(&round) || !r.Floats(&values) || !r.U32(&leader)) return false;
  }
  if (version >= 6 && !r.Str(&s->codec_state, ~uint32_t{0})) return false;
  if (version >= 7 && !r.Str(&s->codec_basis, ~uint32_t{0})) return false;
  if (version >= 8) {
    if (!r.U32(&legacy.psgd_phase) || legacy.psgd_phase > 2 || !r.Floats(&legacy.psgd_factor))
      return false;
    if ((legacy.psgd_phase != 0 || !legacy.psgd_factor.empty()) && !s->pending) return false;
  }
  if (version >= 9) {
    std::string job;
    if (!r.Str(&job, 1024) || (!job.empty() && !s->pending)) return false;
    if (s->pending) s->pending->job = std::move(job);
  }
  if (version >= 10 && (!r.U64(&legacy.scale_round) || !r.U64(&legacy.scale_version))) return false;
  if (!r.done()) return false;
  s->legacy = std::move(legacy);
  return true;
}

bool FromMessage(const state::ClientState& m, ClientState* s) {
  auto residual = core::FloatsFromBytes(m.residual(), "residual");
  if (!residual.ok()) return false;
  s->codec = m.codec();
  s->residual = *std::move(residual);
  s->codec_state = m.codec_state();
  s->codec_basis = m.codec_basis();
  if (m.has_pending()) {
    const state::ClientState::Pending& in = m.pending();
    auto scales = core::FloatsFromBytes(in.scales(), "scales");
    if (!scales.ok() || (!scales->empty() && scales->size() != size_t(in.frames_size())))
      return false;
    if (in.parts_size() != 0 && in.parts_size() != in.frames_size()) return false;
    PendingUpdate p;
    p.round = in.round();
    p.model_version = in.model_version();
    p.update_id = in.update_id();
    p.num_samples = in.num_samples();
    p.frames.assign(in.frames().begin(), in.frames().end());
    p.scales = *std::move(scales);
    p.parts.assign(in.parts().begin(), in.parts().end());
    p.job = in.job();
    s->pending = std::move(p);
  }
  for (const auto& [mode, slot] : m.modes()) s->modes[mode] = slot;
  s->job = m.job();
  s->job_instance = m.job_instance();
  return true;
}

}  // namespace

absl::Status SaveClientState(const std::string& path, const ClientState& s) {
  state::ClientState m;
  m.set_codec(s.codec);
  m.set_residual(core::FloatsToBytes(s.residual));
  m.set_codec_state(s.codec_state);
  m.set_codec_basis(s.codec_basis);
  if (s.pending) {
    const PendingUpdate& p = *s.pending;
    state::ClientState::Pending* out = m.mutable_pending();
    out->set_round(p.round);
    out->set_model_version(p.model_version);
    out->set_update_id(p.update_id);
    out->set_num_samples(p.num_samples);
    for (const std::string& f : p.frames) out->add_frames(f);
    out->set_scales(core::FloatsToBytes(p.scales));
    for (uint32_t part : p.parts) out->add_parts(part);
    out->set_job(p.job);
  }
  for (const auto& [mode, slot] : s.modes) (*m.mutable_modes())[mode] = slot;
  m.set_job(s.job);
  m.set_job_instance(s.job_instance);
  core::StateWriter w;
  w.U32(kMagic);
  w.U32(kVersion);
  if (absl::Status st = core::AppendMessage(m, &w, path); !st.ok()) return st;
  return fedlgc::AtomicWriteFile(path, w.Finish());
}

absl::StatusOr<ClientState> LoadClientState(const std::string& path) {
  auto bytes = fedlgc::ReadFileIfExists(path);
  if (!bytes.ok()) return bytes.status();
  ClientState s;
  if (!bytes->has_value()) return s;
  auto reader = core::StateReader::Open(**bytes, path);
  if (!reader.ok()) return reader.status();
  core::StateReader& r = *reader;
  auto corrupt = [&] { return absl::DataLossError(StrCat(path, ": malformed client state")); };
  uint32_t magic, version;
  if (!r.U32(&magic) || !r.U32(&version) || magic != kMagic || version < 1 || version > kVersion)
    return corrupt();
  if (version < 12) {
    if (!ReadOldVersion(r, version, &s)) return corrupt();
    return s;
  }
  state::ClientState m;
  if (absl::Status st = core::ParseMessage(r, &m, path); !st.ok()) return st;
  if (!FromMessage(m, &s)) return corrupt();
  return s;
}

}  // namespace fedlgc::edge_client
