// Client state file: u32 magic 'FLCS', u32 version 1, str codec, floats residual,
// u32 has_pending, [u64 round, u64 version, u64 update_id, u64 samples, u32 n, str frame*n],
// CRC32C (core/atomic_file.h).
#include "edge_client/client_state.h"

#include "codecs/str.h"
#include "core/atomic_file.h"

namespace fedlgc::edge_client {
namespace {
constexpr uint32_t kMagic = 0x53434C46;  // "FLCS"
constexpr uint32_t kVersion = 1;
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
  }
  return core::AtomicWriteFile(path, w.Finish());
}

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
  if (!r.U32(&magic) || !r.U32(&version) || magic != kMagic || version != kVersion)
    return corrupt();
  if (!r.Str(&s.codec) || !r.Floats(&s.residual) || !r.U32(&has)) return corrupt();
  if (has) {
    PendingUpdate p;
    uint32_t n;
    if (!r.U64(&p.round) || !r.U64(&p.model_version) || !r.U64(&p.update_id) ||
        !r.U64(&p.num_samples) || !r.U32(&n) || n > (1u << 20)) {
      return corrupt();
    }
    p.frames.resize(n);
    for (std::string& f : p.frames) {
      if (!r.Str(&f, 64u << 20)) return corrupt();
    }
    s.pending = std::move(p);
  }
  if (!r.done()) return corrupt();
  return s;
}

}  // namespace fedlgc::edge_client
