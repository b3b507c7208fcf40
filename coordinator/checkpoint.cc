// Checkpoint format (little-endian, CRC32C at the end, see core/atomic_file.h):
//   u32 magic 'FLCK', u32 version 1, str job, u64 next_round, u64 model_version,
//   floats model, floats momentum, u32 clients {str id, u64 samples},
//   u32 clients with receipts {str id, u32 k, k x {u64 round, u64 update_id, u32 chunk_count,
//   u32 n, u32 counted[n]}},
//   version 2: u32 quarantined clients {str id, str why}
// Version 1 (no quarantine) still loads.
#include "coordinator/checkpoint.h"

#include "codecs/str.h"
#include "core/atomic_file.h"

namespace fedlgc::coordinator {
namespace {

constexpr uint32_t kMagic = 0x4B434C46;  // "FLCK"
constexpr uint32_t kVersion = 2;

}  // namespace

std::string CheckpointPath(const std::string& state_dir) { return state_dir + "/checkpoint.bin"; }

absl::Status WriteCheckpoint(const std::string& state_dir, const std::string& job,
                             const EngineState& s) {
  core::StateWriter w;
  w.U32(kMagic);
  w.U32(kVersion);
  w.Str(job);
  w.U64(s.next_round);
  w.U64(s.model_version);
  w.Floats(s.model);
  w.Floats(s.momentum);
  w.U32(static_cast<uint32_t>(s.clients.size()));
  for (const auto& [id, samples] : s.clients) {
    w.Str(id);
    w.U64(samples);
  }
  w.U32(static_cast<uint32_t>(s.receipts.size()));
  for (const auto& [id, history] : s.receipts) {
    w.Str(id);
    w.U32(static_cast<uint32_t>(history.size()));
    for (const Receipt& r : history) {
      w.U64(r.round);
      w.U64(r.update_id);
      w.U32(r.chunk_count);
      w.U32(static_cast<uint32_t>(r.counted.size()));
      for (uint32_t c : r.counted) w.U32(c);
    }
  }
  w.U32(static_cast<uint32_t>(s.quarantined.size()));
  for (const auto& [id, why] : s.quarantined) {
    w.Str(id);
    w.Str(why);
  }
  return core::AtomicWriteFile(CheckpointPath(state_dir), w.Finish());
}

absl::StatusOr<std::optional<EngineState>> ReadCheckpoint(const std::string& state_dir,
                                                          const std::string& job) {
  const std::string path = CheckpointPath(state_dir);
  auto bytes = core::ReadFileIfExists(path);
  if (!bytes.ok()) return bytes.status();
  if (!bytes->has_value()) return std::optional<EngineState>();
  auto reader = core::StateReader::Open(**bytes, path);
  if (!reader.ok()) return reader.status();
  core::StateReader& r = *reader;
  auto corrupt = [&] { return absl::DataLossError(StrCat(path, ": malformed checkpoint")); };
  uint32_t magic, version;
  std::string stored_job;
  EngineState s;
  if (!r.U32(&magic) || !r.U32(&version) || magic != kMagic) return corrupt();
  if (version != kVersion && version != 1) {
    return absl::UnimplementedError(
        StrCat(path, ": checkpoint version ", version, " (this build reads version ", kVersion,
               "): resume with the fedlgc release that wrote it, or start over with an empty "
               "--state-dir"));
  }
  if (!r.Str(&stored_job)) return corrupt();
  if (stored_job != job) {
    return absl::FailedPreconditionError(StrCat(path, " belongs to job \"", stored_job,
                                                "\", not \"", job, "\"; use another --state-dir"));
  }
  uint32_t n;
  if (!r.U64(&s.next_round) || !r.U64(&s.model_version) || !r.Floats(&s.model) ||
      !r.Floats(&s.momentum) || !r.U32(&n)) {
    return corrupt();
  }
  for (uint32_t i = 0; i < n; ++i) {
    std::string id;
    uint64_t samples;
    if (!r.Str(&id, 256) || !r.U64(&samples)) return corrupt();
    s.clients[id] = samples;
  }
  if (!r.U32(&n)) return corrupt();
  for (uint32_t i = 0; i < n; ++i) {
    std::string id;
    uint32_t h;
    if (!r.Str(&id, 256) || !r.U32(&h) || h > kReceiptHistory) return corrupt();
    auto& history = s.receipts[id];
    for (uint32_t j = 0; j < h; ++j) {
      Receipt rc;
      uint32_t k;
      if (!r.U64(&rc.round) || !r.U64(&rc.update_id) || !r.U32(&rc.chunk_count) || !r.U32(&k) ||
          k > rc.chunk_count) {
        return corrupt();
      }
      rc.counted.resize(k);
      for (uint32_t& c : rc.counted) {
        if (!r.U32(&c)) return corrupt();
      }
      history.push_back(std::move(rc));
    }
  }
  if (version >= 2) {
    if (!r.U32(&n)) return corrupt();
    for (uint32_t i = 0; i < n; ++i) {
      std::string id, why;
      if (!r.Str(&id, 256) || !r.Str(&why, 4096)) return corrupt();
      s.quarantined[id] = why;
    }
  }
  if (!r.done() || s.momentum.size() != s.model.size()) return corrupt();
  return std::optional<EngineState>(std::move(s));
}

}  // namespace fedlgc::coordinator
