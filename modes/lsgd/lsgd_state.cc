// LSGD state file (see lsgd_state.h): u32 magic 'LSGD', u32 version 1, u64 round,
// u64 groups {u64 ref_version, floats ref}, u64 n {str client, u64 group},
// u64 n {str client, f64 rtt_ms}, u64 n {u64 group, str leader}, u32 pull_global,
// str global_leader; CRC32C (core/atomic_file.h).
#include "modes/lsgd/lsgd_state.h"

#include "codecs/str.h"
#include "core/atomic_file.h"

namespace fedlgc::modes {
namespace {

constexpr uint32_t kMagic = 0x4C534744;  // "LSGD"
constexpr uint32_t kVersion = 1;
constexpr std::string_view kPrefix = "lsgd";

}  // namespace

absl::Status SaveLsgdState(const std::string& state_dir, uint64_t round, const LsgdState& s) {
  core::StateWriter w = core::BeginRoundState(kMagic, kVersion, round);
  w.U64(s.refs.size());
  for (size_t g = 0; g < s.refs.size(); ++g) {
    w.U64(s.ref_versions[g]);
    w.Floats(s.refs[g]);
  }
  w.U64(s.group_of.size());
  for (const auto& [c, g] : s.group_of) {
    w.Str(c);
    w.U64(g);
  }
  w.U64(s.rtt_ms.size());
  for (const auto& [c, rtt] : s.rtt_ms) {
    w.Str(c);
    w.F64(rtt);
  }
  w.U64(s.pulled_leaders.size());
  for (const auto& [g, c] : s.pulled_leaders) {
    w.U64(g);
    w.Str(c);
  }
  w.U32(s.pull_global ? 1 : 0);
  w.Str(s.global_leader);
  return core::SaveRoundState(state_dir, kPrefix, round, w.Finish());
}

absl::StatusOr<LsgdState> LoadLsgdState(const std::string& state_dir, uint64_t round,
                                        size_t dim) {
  const std::string path = core::RoundStatePath(state_dir, kPrefix, round);
  std::string bytes;
  auto reader = core::ReadRoundState(state_dir, kPrefix, round, kMagic, kVersion, &bytes);
  if (!reader.ok()) return reader.status();
  core::StateReader& r = *reader;
  const auto bad = [&] { return absl::DataLossError(StrCat(path, ": malformed LSGD state")); };
  LsgdState s;
  uint32_t global;
  uint64_t groups, n;
  if (!r.U64(&groups) || groups > (1u << 16)) return bad();
  s.refs.assign(groups, {});
  s.ref_versions.assign(groups, 0);
  for (size_t g = 0; g < groups; ++g) {
    if (!r.U64(&s.ref_versions[g]) || !r.Floats(&s.refs[g]) || s.refs[g].size() != dim)
      return bad();
  }
  std::string c;
  uint64_t g;
  double rtt;
  if (!r.U64(&n)) return bad();
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.Str(&c) || !r.U64(&g) || g >= groups) return bad();
    s.group_of[c] = g;
  }
  if (!r.U64(&n)) return bad();
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.Str(&c) || !r.F64(&rtt)) return bad();
    s.rtt_ms[c] = rtt;
  }
  if (!r.U64(&n)) return bad();
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.U64(&g) || !r.Str(&c) || g >= groups) return bad();
    s.pulled_leaders[g] = c;
  }
  if (!r.U32(&global) || !r.Str(&s.global_leader) || !r.done()) return bad();
  s.pull_global = global != 0;
  if (s.pull_global && !s.group_of.count(s.global_leader)) return bad();
  return s;
}

}  // namespace fedlgc::modes
