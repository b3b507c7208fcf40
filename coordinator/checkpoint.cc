// Checkpoint format: u32 magic 'FLCK', u32 version, then
//   version 3: the message state::Checkpoint (protos/state.proto, core/state_message.h);
//   version 2: str job, u64 next_round, u64 model_version, floats model, floats momentum,
//   u32 clients {str id, u64 samples}, u32 clients with receipts {str id, u32 k, k x {u64
//   round, u64 update_id, u32 chunk_count, u32 n, u32 counted[n]}}, u32 quarantined clients
//   {str id, str why}; version 1: the same without the quarantine.
// CRC32C at the end (core/atomic_file.h).
#include "coordinator/checkpoint.h"

#include "base/file.h"
#include "base/str.h"
#include "core/float_bytes.h"
#include "core/state_file.h"
#include "core/state_message.h"
#include "protos/state.pb.h"

namespace fedlgc::coordinator {
namespace {

constexpr uint32_t kMagic = 0x4B434C46;  // "FLCK"
constexpr uint32_t kVersion = 3;

// Versions 1 and 2 after the job, read field by field.
bool ReadOldVersion(core::StateReader& r, uint32_t version, EngineState* s) {
  uint32_t n;
  if (!r.U64(&s->next_round) || !r.U64(&s->model_version) || !r.Floats(&s->model) ||
      !r.Floats(&s->momentum) || !r.U32(&n)) {
    return false;
  }
  for (uint32_t i = 0; i < n; ++i) {
    std::string id;
    uint64_t samples;
    if (!r.Str(&id, 256) || !r.U64(&samples)) return false;
    s->clients[id] = samples;
  }
  if (!r.U32(&n)) return false;
  for (uint32_t i = 0; i < n; ++i) {
    std::string id;
    uint32_t h;
    if (!r.Str(&id, 256) || !r.U32(&h) || h > kReceiptHistory) return false;
    auto& history = s->receipts[id];
    for (uint32_t j = 0; j < h; ++j) {
      Receipt rc;
      uint32_t k;
      if (!r.U64(&rc.round) || !r.U64(&rc.update_id) || !r.U32(&rc.chunk_count) || !r.U32(&k) ||
          k > rc.chunk_count) {
        return false;
      }
      rc.counted.resize(k);
      for (uint32_t& c : rc.counted) {
        if (!r.U32(&c)) return false;
      }
      history.push_back(std::move(rc));
    }
  }
  if (version >= 2) {
    if (!r.U32(&n)) return false;
    for (uint32_t i = 0; i < n; ++i) {
      std::string id, why;
      if (!r.Str(&id, 256) || !r.Str(&why, 4096)) return false;
      s->quarantined[id] = why;
    }
  }
  return r.done();
}

bool FromMessage(const state::Checkpoint& m, EngineState* s) {
  s->next_round = m.next_round();
  s->job_instance = m.job_instance();
  s->model_version = m.model_version();
  auto model = core::FloatsFromBytes(m.model(), "model");
  auto momentum = core::FloatsFromBytes(m.momentum(), "momentum");
  if (!model.ok() || !momentum.ok()) return false;
  s->model = *std::move(model);
  s->momentum = *std::move(momentum);
  for (const auto& [id, samples] : m.clients()) s->clients[id] = samples;
  for (const auto& [id, history] : m.receipts()) {
    if (history.receipts_size() > static_cast<int>(kReceiptHistory)) return false;
    auto& out = s->receipts[id];
    for (const state::Checkpoint::Receipt& r : history.receipts()) {
      if (static_cast<uint64_t>(r.counted_size()) > r.chunk_count()) return false;
      out.push_back({r.round(), r.update_id(), r.chunk_count(),
                     std::vector<uint32_t>(r.counted().begin(), r.counted().end()), r.version()});
    }
  }
  for (const auto& [id, why] : m.quarantined()) s->quarantined[id] = why;
  s->statistics_round = m.statistics_round();
  return true;
}

}  // namespace

std::string CheckpointPath(const std::string& state_dir) { return state_dir + "/checkpoint.bin"; }

absl::Status WriteCheckpoint(const std::string& state_dir, const std::string& job,
                             const EngineState& s) {
  state::Checkpoint m;
  m.set_job(job);
  m.set_next_round(s.next_round);
  m.set_model_version(s.model_version);
  m.set_statistics_round(s.statistics_round);
  m.set_job_instance(s.job_instance);
  m.set_model(core::FloatsToBytes(s.model));
  m.set_momentum(core::FloatsToBytes(s.momentum));
  for (const auto& [id, samples] : s.clients) (*m.mutable_clients())[id] = samples;
  for (const auto& [id, history] : s.receipts) {
    state::Checkpoint::Receipts& out = (*m.mutable_receipts())[id];
    for (const Receipt& r : history) {
      state::Checkpoint::Receipt* rc = out.add_receipts();
      rc->set_round(r.round);
      rc->set_update_id(r.update_id);
      rc->set_chunk_count(r.chunk_count);
      rc->mutable_counted()->Add(r.counted.begin(), r.counted.end());
      rc->set_version(r.version);
    }
  }
  for (const auto& [id, why] : s.quarantined) (*m.mutable_quarantined())[id] = why;
  core::StateWriter w;
  w.U32(kMagic);
  w.U32(kVersion);
  const std::string path = CheckpointPath(state_dir);
  if (absl::Status st = core::AppendMessage(m, &w, path); !st.ok()) return st;
  return fedlgc::AtomicWriteFile(path, w.Finish());
}

absl::StatusOr<std::optional<EngineState>> ReadCheckpoint(const std::string& state_dir,
                                                          const std::string& job) {
  const std::string path = CheckpointPath(state_dir);
  auto bytes = fedlgc::ReadFileIfExists(path);
  if (!bytes.ok()) return bytes.status();
  if (!bytes->has_value()) return std::optional<EngineState>();
  auto reader = core::StateReader::Open(**bytes, path);
  if (!reader.ok()) return reader.status();
  core::StateReader& r = *reader;
  auto corrupt = [&] { return absl::DataLossError(StrCat(path, ": malformed checkpoint")); };
  uint32_t magic, version;
  if (!r.U32(&magic) || !r.U32(&version) || magic != kMagic) return corrupt();
  if (version < 1 || version > kVersion) {
    return absl::UnimplementedError(StrCat(
        path, ": checkpoint version ", version, " (this build reads versions 1 to ", kVersion,
        "): resume with the fedlgc release that wrote it, or start over with an empty "
        "--state-dir"));
  }
  std::string stored_job;
  EngineState s;
  if (version < 3) {
    if (!r.Str(&stored_job)) return corrupt();
    if (stored_job == job && !ReadOldVersion(r, version, &s)) return corrupt();
  } else {
    state::Checkpoint m;
    if (absl::Status st = core::ParseMessage(r, &m, path); !st.ok()) return st;
    stored_job = m.job();
    if (stored_job == job && !FromMessage(m, &s)) return corrupt();
  }
  if (stored_job != job) {
    return absl::FailedPreconditionError(StrCat(path, " belongs to job \"", stored_job,
                                                "\", not \"", job, "\"; use another --state-dir"));
  }
  if (s.momentum.size() != s.model.size()) return corrupt();
  return std::optional<EngineState>(std::move(s));
}

}  // namespace fedlgc::coordinator
