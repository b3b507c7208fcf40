// Downlink state file (see downlink_state.h): u32 magic 'DLNL', u32 version, u64 model
// version, then version 3: the message state::DownlinkState (protos/state.proto,
// core/state_message.h); version 2: str codec, str job, u32 true_crc, str encoder state.
// CRC32C at the end (core/atomic_file.h).
#include "coordinator/downlink_state.h"

#include "base/file.h"
#include "base/str.h"
#include "core/state_file.h"
#include "core/state_message.h"
#include "protos/state.pb.h"

namespace fedlgc::coordinator {
namespace {

constexpr uint32_t kMagic = 0x4C4E4C44;  // "DLNL"
constexpr uint32_t kVersion = 3;

}  // namespace

absl::Status SaveDownlinkState(const std::string& state_dir, const std::string& prefix,
                               uint64_t version, const DownlinkState& s) {
  state::DownlinkState m;
  m.set_codec(s.codec);
  m.set_job(s.job);
  m.set_true_crc(s.true_crc);
  m.set_encoder(s.encoder);
  const std::string path = core::RoundStatePath(state_dir, prefix, version);
  core::StateWriter w = core::BeginRoundState(kMagic, kVersion, version);
  if (absl::Status st = core::AppendMessage(m, &w, path); !st.ok()) return st;
  return fedlgc::AtomicWriteFile(path, w.Finish());
}

absl::StatusOr<DownlinkState> LoadDownlinkState(const std::string& state_dir,
                                                const std::string& prefix, uint64_t version) {
  const std::string path = core::RoundStatePath(state_dir, prefix, version);
  std::string bytes;
  uint32_t format = 0;
  auto reader =
      core::ReadRoundState(state_dir, prefix, version, kMagic, 2, kVersion, &format, &bytes);
  if (!reader.ok()) return reader.status();
  DownlinkState s;
  if (format == 2) {
    if (!reader->Str(&s.codec) || !reader->Str(&s.job) || !reader->U32(&s.true_crc) ||
        !reader->Str(&s.encoder, size_t{1} << 34) || !reader->done()) {
      return absl::DataLossError(StrCat(path, ": truncated"));
    }
    return s;
  }
  state::DownlinkState m;
  if (absl::Status st = core::ParseMessage(*reader, &m, path); !st.ok()) return st;
  s.codec = m.codec();
  s.job = m.job();
  s.true_crc = m.true_crc();
  s.encoder = m.encoder();
  return s;
}

}  // namespace fedlgc::coordinator
