// Downlink state file (see downlink_state.h): u32 magic 'DLNL', u32 version 2, u64 model
// version, str codec, str job, u32 true_crc, str encoder state; CRC32C
// (core/atomic_file.h).
#include "coordinator/downlink_state.h"

#include "codecs/str.h"
#include "core/atomic_file.h"

namespace fedlgc::coordinator {
namespace {

constexpr uint32_t kMagic = 0x4C4E4C44;  // "DLNL"
constexpr uint32_t kVersion = 2;

}  // namespace

absl::Status SaveDownlinkState(const std::string& state_dir, const std::string& prefix,
                               uint64_t version, const DownlinkState& s) {
  core::StateWriter w = core::BeginRoundState(kMagic, kVersion, version);
  w.Str(s.codec);
  w.Str(s.job);
  w.U32(s.true_crc);
  w.Str(s.encoder);
  return core::AtomicWriteFile(core::RoundStatePath(state_dir, prefix, version), w.Finish());
}

absl::StatusOr<DownlinkState> LoadDownlinkState(const std::string& state_dir,
                                                const std::string& prefix, uint64_t version) {
  std::string bytes;
  auto reader = core::ReadRoundState(state_dir, prefix, version, kMagic, kVersion, &bytes);
  if (!reader.ok()) return reader.status();
  DownlinkState s;
  if (!reader->Str(&s.codec) || !reader->Str(&s.job) || !reader->U32(&s.true_crc) ||
      !reader->Str(&s.encoder, size_t{1} << 34) || !reader->done()) {
    return absl::DataLossError(StrCat(core::RoundStatePath(state_dir, prefix, version),
                                      ": truncated"));
  }
  return s;
}

}  // namespace fedlgc::coordinator
