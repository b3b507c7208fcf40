// LGC aggregator state file (see lgc_state.h): u32 magic 'FLGS', u32 version, u64 round,
// then version 3: u64 steps, str autoencoder, u32 n and n x (str client, u64 the last round
// it led); CRC32C (core/atomic_file.h). Version 2 (a support before the autoencoder, echoes
// after it) and 1 (the support) still load; their support and echoes are not kept.
#include "modes/lgc/lgc_state.h"

#include "codecs/str.h"
#include "core/atomic_file.h"

namespace fedlgc::modes {
namespace {

constexpr uint32_t kMagic = 0x53474C46;  // "FLGS"
constexpr uint32_t kVersion = 3;
constexpr std::string_view kPrefix = "lgc";

}  // namespace

absl::Status SaveLgcState(const std::string& state_dir, uint64_t round, const LgcState& s) {
  core::StateWriter w = core::BeginRoundState(kMagic, kVersion, round);
  w.U64(s.ae_steps);
  w.Str(s.autoencoder);
  w.U32(static_cast<uint32_t>(s.led.size()));
  for (const auto& [client, r] : s.led) {
    w.Str(client);
    w.U64(r);
  }
  return core::SaveRoundState(state_dir, kPrefix, round, w.Finish());
}

absl::StatusOr<LgcState> LoadLgcState(const std::string& state_dir, uint64_t round) {
  const std::string path = core::RoundStatePath(state_dir, kPrefix, round);
  std::string bytes;
  uint32_t version = kVersion;
  auto reader = core::ReadRoundState(state_dir, kPrefix, round, kMagic, kVersion, &bytes);
  for (uint32_t old : {2u, 1u}) {  // states of the protocols before this one
    if (reader.ok()) break;
    auto r = core::ReadRoundState(state_dir, kPrefix, round, kMagic, old, &bytes);
    if (r.ok()) reader = std::move(r), version = old;
  }
  if (!reader.ok()) return reader.status();
  core::StateReader& r = *reader;
  const auto malformed = [&] { return absl::DataLossError(StrCat(path, ": malformed LGC state")); };
  LgcState s;
  std::string support;
  if (!r.U64(&s.ae_steps)) return malformed();
  if (version < 3 && !r.Str(&support, 64u << 20)) return malformed();  // not used any more
  if (!r.Str(&s.autoencoder, 1u << 30)) return malformed();
  if (version == 3) {
    uint32_t n = 0;
    if (!r.U32(&n)) return malformed();
    for (uint32_t i = 0; i < n; ++i) {
      std::string client;
      uint64_t led = 0;
      if (!r.Str(&client) || !r.U64(&led) || led > round) return malformed();
      s.led[client] = led;
    }
  }
  if (version == 2) {  // echoes, not kept any more
    uint32_t n = 0;
    if (!r.U32(&n)) return malformed();
    for (uint32_t i = 0; i < n; ++i) {
      std::string client, values;
      uint64_t v = 0;
      if (!r.Str(&client) || !r.U64(&v) || !r.Str(&values, 64u << 20)) return malformed();
    }
  }
  if (!r.done()) return malformed();
  return s;
}

}  // namespace fedlgc::modes
