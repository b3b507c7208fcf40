// Client state file: u32 magic 'FLCS', u32 version 11, str codec, floats residual,
// u32 has_pending, [u64 round, u64 version, u64 update_id, u64 samples, u32 n, str frame*n,
// u32 lgc_stage, str lgc_support (u32 each), floats lgc_values, u32 flags (1 gossip share,
// 2 LSGD lead), floats scales], then the local
// model: floats x, f64 w, u64 trained_round, u64 pulled_round, f64 loss, u64 inbox_applied,
// floats contributed, f64 share_pw, floats share; then str codec_state, str codec_basis;
// then the pending update's
// u32 psgd_phase, floats psgd_factor (0 and none without one), str job (empty without
// one); then u64 scale_round, u64 scale_version; CRC32C (core/atomic_file.h).
// Version 1 files (no LGC fields), version 2 files (no flags, no local model), version 3 files
// (whose share in flight was still inside x and w), version 4 files (no echo), version 5
// files (no codec state), version 6 files (no codec basis), version 7 files (no
// PowerSGD phase), version 8 files (no job), version 9 files (no shared-scale round) and
// version 10 files still load; files of versions 5 to 10 hold an LGC echo (u64 round,
// floats values, u32 leader) after the share, which LGC's echo=1 used and is skipped.
#include "edge_client/client_state.h"

#include <cstring>

#include "codecs/str.h"
#include "core/atomic_file.h"

namespace fedlgc::edge_client {
namespace {
constexpr uint32_t kMagic = 0x53434C46;  // "FLCS"
constexpr uint32_t kVersion = 11;
}  // namespace

absl::Status SaveClientState(const std::string& path, const ClientState& s) {
  core::StateWriter w;
  w.U32(kMagic);
  w.U32(kVersion);
  w.Str(s.codec);
  w.Floats(s.residual);
  w.U32(s.pending ? 1 : 0);
  if (s.pending) {
    const PendingUpdate& p = *s.pending;
    w.U64(p.round);
    w.U64(p.model_version);
    w.U64(p.update_id);
    w.U64(p.num_samples);
    w.U32(static_cast<uint32_t>(p.frames.size()));
    for (const std::string& f : p.frames) w.Str(f);
    w.U32(p.lgc_stage);
    w.Str(std::string_view(reinterpret_cast<const char*>(p.lgc_support.data()),
                           p.lgc_support.size() * 4));
    w.Floats(p.lgc_values);
    w.U32((p.gossip ? 1u : 0u) | (p.lead ? 2u : 0u));
    w.Floats(p.scales);
  }
  const LocalModel& m = s.local;
  w.Floats(m.x);
  w.F64(m.w);
  w.U64(m.trained_round);
  w.U64(m.pulled_round);
  w.F64(m.loss);
  w.U64(m.inbox_applied);
  w.Floats(m.contributed);
  w.F64(m.share_pw);
  w.Floats(m.share);
  if (s.codec_state.size() > ~uint32_t{0}) {
    return absl::InvalidArgumentError(
        StrCat(path, ": codec state of ", s.codec_state.size(), " bytes exceeds 4 GiB"));
  }
  w.Str(s.codec_state);
  w.Str(s.codec_basis);
  w.U32(s.pending ? s.pending->psgd_phase : 0);
  w.Floats(s.pending ? std::span<const float>(s.pending->psgd_factor) : std::span<const float>());
  w.Str(s.pending ? s.pending->job : std::string());
  w.U64(s.scale_round);
  w.U64(s.scale_version);
  return core::AtomicWriteFile(path, w.Finish());
}

namespace {

// The pending update of a state of `version` (the part after its presence flag).
bool ReadPending(core::StateReader& r, uint32_t version, PendingUpdate* p) {
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
    if (!r.U32(&p->lgc_stage) || !r.Str(&support, 1u << 30) || support.size() % 4 != 0 ||
        !r.Floats(&p->lgc_values)) {
      return false;
    }
    p->lgc_support.resize(support.size() / 4);
    std::memcpy(p->lgc_support.data(), support.data(), support.size());
    if (p->lgc_values.size() != p->lgc_support.size()) return false;
  }
  uint32_t flags = 0;
  if (version >= 3 && !r.U32(&flags)) return false;
  p->gossip = (flags & 1) != 0;
  p->lead = (flags & 2) != 0;
  if (version >= 4 &&
      (!r.Floats(&p->scales) || (!p->scales.empty() && p->scales.size() != p->frames.size()))) {
    return false;
  }
  return true;
}

// The local model of a state of `version` >= 3 (LSGD, SGP).
bool ReadLocalModel(core::StateReader& r, uint32_t version, ClientState* s) {
  LocalModel& m = s->local;
  if (!r.Floats(&m.x) || !r.F64(&m.w) || !r.U64(&m.trained_round) || !r.U64(&m.pulled_round) ||
      !r.F64(&m.loss) || !r.U64(&m.inbox_applied) || !r.Floats(&m.contributed) ||
      !r.F64(&m.share_pw) || !r.Floats(&m.share)) {
    return false;
  }
  if (!(m.w > 0) || (!m.share.empty() && m.share.size() != m.x.size())) return false;
  if (version == 3 && s->pending && s->pending->gossip && !m.share.empty()) {
    // Version 3 kept a share in flight inside x and w until its receipt came.
    for (size_t i = 0; i < m.x.size(); ++i) m.x[i] -= m.share[i];
    m.w -= m.share_pw;
  }
  return true;
}

}  // namespace

absl::StatusOr<ClientState> LoadClientState(const std::string& path) {
  auto bytes = core::ReadFileIfExists(path);
  if (!bytes.ok()) return bytes.status();
  ClientState s;
  if (!bytes->has_value()) return s;
  auto reader = core::StateReader::Open(**bytes, path);
  if (!reader.ok()) return reader.status();
  core::StateReader& r = *reader;
  auto corrupt = [&] { return absl::DataLossError(StrCat(path, ": malformed client state")); };
  uint32_t magic, version, has;
  if (!r.U32(&magic) || !r.U32(&version) || magic != kMagic || version < 1 || version > kVersion)
    return corrupt();
  if (!r.Str(&s.codec) || !r.Floats(&s.residual) || !r.U32(&has)) return corrupt();
  if (has) {
    PendingUpdate p;
    if (!ReadPending(r, version, &p)) return corrupt();
    s.pending = std::move(p);
  }
  if (version >= 3 && !ReadLocalModel(r, version, &s)) return corrupt();
  if (version >= 5 && version <= 10) {  // an LGC echo, not kept any more
    uint64_t round = 0;
    std::vector<float> values;
    uint32_t leader = 0;
    if (!r.U64(&round) || !r.Floats(&values) || !r.U32(&leader)) return corrupt();
  }
  if (version >= 6 && !r.Str(&s.codec_state, ~uint32_t{0})) return corrupt();
  if (version >= 7 && !r.Str(&s.codec_basis, ~uint32_t{0})) return corrupt();
  if (version >= 8) {
    uint32_t phase = 0;
    std::vector<float> factor;
    if (!r.U32(&phase) || phase > 2 || !r.Floats(&factor)) return corrupt();
    if ((phase != 0 || !factor.empty()) && !s.pending) return corrupt();
    if (s.pending) {
      s.pending->psgd_phase = phase;
      s.pending->psgd_factor = std::move(factor);
    }
  }
  if (version >= 9) {
    std::string job;
    if (!r.Str(&job, 1024) || (!job.empty() && !s.pending)) return corrupt();
    if (s.pending) s.pending->job = std::move(job);
  }
  if (version >= 10 && (!r.U64(&s.scale_round) || !r.U64(&s.scale_version))) return corrupt();
  if (!r.done()) return corrupt();
  return s;
}

}  // namespace fedlgc::edge_client
