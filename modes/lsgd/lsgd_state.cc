// LSGD state file (see lsgd_state.h): u32 magic 'LSGD', u32 version, u64 round, then
// version 2: the message pb::LsgdState (lsgd_state.proto, core/state_message.h);
// version 1: u64 groups {u64 ref_version, floats ref}, u64 n {str client, u64 group},
// u64 n {str client, f64 rtt_ms}, u64 n {u64 group, str leader}, u32 pull_global,
// str global_leader. CRC32C at the end of both (core/atomic_file.h).
#include "modes/lsgd/lsgd_state.h"

#include "base/str.h"
#include "core/float_bytes.h"
#include "core/state_file.h"
#include "core/state_message.h"
#include "modes/lsgd/lsgd_state.pb.h"

namespace fedlgc::modes {
namespace {

constexpr uint32_t kMagic = 0x4C534744;  // "LSGD"
constexpr uint32_t kVersion = 2;
constexpr std::string_view kPrefix = "lsgd";

// Version 1, read field by field.
bool ReadVersion1(core::StateReader& r, LsgdState* s) {
  uint32_t global;
  uint64_t groups, n;
  if (!r.U64(&groups) || groups > (1u << 16)) return false;
  s->refs.assign(groups, {});
  s->ref_versions.assign(groups, 0);
  for (size_t g = 0; g < groups; ++g) {
    if (!r.U64(&s->ref_versions[g]) || !r.Floats(&s->refs[g])) return false;
  }
  std::string c;
  uint64_t g;
  double rtt;
  if (!r.U64(&n)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.Str(&c) || !r.U64(&g)) return false;
    s->group_of[c] = g;
  }
  if (!r.U64(&n)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.Str(&c) || !r.F64(&rtt)) return false;
    s->rtt_ms[c] = rtt;
  }
  if (!r.U64(&n)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.U64(&g) || !r.Str(&c)) return false;
    s->pulled_leaders[g] = c;
  }
  if (!r.U32(&global) || !r.Str(&s->global_leader) || !r.done()) return false;
  s->pull_global = global != 0;
  return true;
}

bool FromMessage(const pb::LsgdState& m, LsgdState* s) {
  for (const pb::LsgdState::Group& g : m.groups()) {
    auto ref = core::FloatsFromBytes(g.ref(), "reference");
    if (!ref.ok()) return false;
    s->refs.push_back(*std::move(ref));
    s->ref_versions.push_back(g.ref_version());
  }
  for (const auto& [c, g] : m.group_of()) s->group_of[c] = g;
  for (const auto& [c, rtt] : m.rtt_ms()) s->rtt_ms[c] = rtt;
  for (const auto& [g, c] : m.pulled_leaders()) s->pulled_leaders[g] = c;
  s->pull_global = m.pull_global();
  s->global_leader = m.global_leader();
  return true;
}

}  // namespace

absl::Status SaveLsgdState(const std::string& state_dir, uint64_t round, const LsgdState& s) {
  pb::LsgdState m;
  for (size_t g = 0; g < s.refs.size(); ++g) {
    pb::LsgdState::Group* group = m.add_groups();
    group->set_ref_version(s.ref_versions[g]);
    group->set_ref(core::FloatsToBytes(s.refs[g]));
  }
  for (const auto& [c, g] : s.group_of) (*m.mutable_group_of())[c] = g;
  for (const auto& [c, rtt] : s.rtt_ms) (*m.mutable_rtt_ms())[c] = rtt;
  for (const auto& [g, c] : s.pulled_leaders) (*m.mutable_pulled_leaders())[g] = c;
  m.set_pull_global(s.pull_global);
  m.set_global_leader(s.global_leader);
  return core::SaveRoundMessage(state_dir, kPrefix, round, kMagic, kVersion, m);
}

absl::StatusOr<LsgdState> LoadLsgdState(const std::string& state_dir, uint64_t round, size_t dim) {
  const std::string path = core::RoundStatePath(state_dir, kPrefix, round);
  std::string bytes;
  uint32_t version = 0;
  auto reader =
      core::ReadRoundState(state_dir, kPrefix, round, kMagic, 1, kVersion, &version, &bytes);
  if (!reader.ok()) return reader.status();
  const auto bad = [&] { return absl::DataLossError(StrCat(path, ": malformed LSGD state")); };
  LsgdState s;
  if (version == 1) {
    if (!ReadVersion1(*reader, &s)) return bad();
  } else {
    pb::LsgdState m;
    if (absl::Status st = core::ParseMessage(*reader, &m, path); !st.ok()) return st;
    if (!FromMessage(m, &s)) return bad();
  }
  const size_t groups = s.refs.size();
  if (groups > (1u << 16)) return bad();
  for (const auto& ref : s.refs) {
    if (ref.size() != dim) return bad();
  }
  for (const auto& [c, g] : s.group_of) {
    if (g >= groups) return bad();
  }
  for (const auto& [g, c] : s.pulled_leaders) {
    if (g >= groups) return bad();
  }
  if (s.pull_global && !s.group_of.count(s.global_leader)) return bad();
  return s;
}

}  // namespace fedlgc::modes
