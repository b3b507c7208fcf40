// LGC aggregator state file (see lgc_state.h): u32 magic 'FLGS', u32 version, u64 round,
// then versions 5 and 4: the message pb::LgcState (lgc_state.proto, core/state_message.h;
// 4 was written before switch_round);
// version 3: u64 steps, str autoencoder, u32 n and n x (str client, u64 the last round it
// led); version 2: u64 steps, str support, str autoencoder, u32 n and n x (str client, u64
// round, str echo); version 1: u64 steps, str support, str autoencoder. CRC32C at the end
// (core/atomic_file.h). The support and echoes of versions 1 and 2 are not kept any more.
#include "modes/lgc/lgc_state.h"

#include "base/str.h"
#include "core/state_file.h"
#include "core/state_message.h"
#include "modes/lgc/lgc_state.pb.h"

namespace fedlgc::modes {
namespace {

constexpr uint32_t kMagic = 0x53474C46;  // "FLGS"
constexpr uint32_t kVersion = 5;
constexpr std::string_view kPrefix = "lgc";

// Versions 1 to 3, read field by field.
bool ReadOldVersion(core::StateReader& r, uint32_t version, LgcState* s) {
  std::string support;
  if (!r.U64(&s->ae_steps)) return false;
  if (version < 3 && !r.Str(&support, 64u << 20)) return false;  // not used any more
  if (!r.Str(&s->autoencoder, 1u << 30)) return false;
  if (version == 3) {
    uint32_t n = 0;
    if (!r.U32(&n)) return false;
    for (uint32_t i = 0; i < n; ++i) {
      std::string client;
      uint64_t led = 0;
      if (!r.Str(&client) || !r.U64(&led)) return false;
      s->led[client] = led;
    }
  }
  if (version == 2) {  // echoes, not kept any more
    uint32_t n = 0;
    if (!r.U32(&n)) return false;
    for (uint32_t i = 0; i < n; ++i) {
      std::string client, values;
      uint64_t v = 0;
      if (!r.Str(&client) || !r.U64(&v) || !r.Str(&values, 64u << 20)) return false;
    }
  }
  return r.done();
}

}  // namespace

absl::Status SaveLgcState(const std::string& state_dir, uint64_t round, const LgcState& s) {
  pb::LgcState m;
  m.set_ae_steps(s.ae_steps);
  m.set_autoencoder(s.autoencoder);
  for (const auto& [client, r] : s.led) (*m.mutable_led())[client] = r;
  m.set_switch_round(s.switch_round);
  return core::SaveRoundMessage(state_dir, kPrefix, round, kMagic, kVersion, m);
}

absl::StatusOr<LgcState> LoadLgcState(const std::string& state_dir, uint64_t round) {
  const std::string path = core::RoundStatePath(state_dir, kPrefix, round);
  std::string bytes;
  uint32_t version = 0;
  auto reader =
      core::ReadRoundState(state_dir, kPrefix, round, kMagic, 1, kVersion, &version, &bytes);
  if (!reader.ok()) return reader.status();
  LgcState s;
  if (version < 4) {
    if (!ReadOldVersion(*reader, version, &s)) {
      return absl::DataLossError(StrCat(path, ": malformed LGC state"));
    }
  } else {
    pb::LgcState m;
    if (absl::Status st = core::ParseMessage(*reader, &m, path); !st.ok()) return st;
    s.ae_steps = m.ae_steps();
    s.autoencoder = m.autoencoder();
    for (const auto& [client, r] : m.led()) s.led[client] = r;
    s.switch_round = m.switch_round();
  }
  // Saved at the latest just before the switch round opened.
  if (s.switch_round > round + 1) return absl::DataLossError(StrCat(path, ": malformed LGC state"));
  for (const auto& [client, led] : s.led) {
    if (led > round) return absl::DataLossError(StrCat(path, ": malformed LGC state"));
  }
  return s;
}

}  // namespace fedlgc::modes
