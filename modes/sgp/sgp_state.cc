// SGP relay state file (see sgp_state.h): u32 magic 'SGPP', u32 version, u64 round, then
// version 2: the message pb::SgpState (sgp_state.proto, core/state_message.h);
// version 1: u64 n, n x {str client, u64 round, f64 w, floats x}. CRC32C at the end of
// both (core/atomic_file.h).
#include "modes/sgp/sgp_state.h"

#include "base/str.h"
#include "core/float_bytes.h"
#include "core/state_file.h"
#include "core/state_message.h"
#include "modes/sgp/sgp_state.pb.h"

namespace fedlgc::modes {
namespace {

constexpr uint32_t kMagic = 0x53475050;  // "SGPP"
constexpr uint32_t kVersion = 2;
constexpr std::string_view kPrefix = "sgp";

bool ReadVersion1(core::StateReader& r, std::vector<SgpMail>* out) {
  uint64_t n;
  if (!r.U64(&n)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    SgpMail m;
    if (!r.Str(&m.client) || !r.U64(&m.round) || !r.F64(&m.w) || !r.Floats(&m.x)) return false;
    out->push_back(std::move(m));
  }
  return r.done();
}

}  // namespace

absl::Status SaveSgpState(const std::string& state_dir, uint64_t round,
                          std::span<const SgpMailView> mail) {
  pb::SgpState m;
  for (const SgpMailView& v : mail) {
    pb::SgpState::Mail* out = m.add_mail();
    out->set_client(std::string(v.client));
    out->set_round(v.round);
    out->set_w(v.w);
    out->set_x(core::FloatsToBytes(v.x));
  }
  return core::SaveRoundMessage(state_dir, kPrefix, round, kMagic, kVersion, m);
}

absl::StatusOr<std::vector<SgpMail>> LoadSgpState(const std::string& state_dir, uint64_t round,
                                                  size_t dim) {
  const std::string path = core::RoundStatePath(state_dir, kPrefix, round);
  std::string bytes;
  uint32_t version = 0;
  auto reader =
      core::ReadRoundState(state_dir, kPrefix, round, kMagic, 1, kVersion, &version, &bytes);
  if (!reader.ok()) return reader.status();
  std::vector<SgpMail> out;
  if (version == 1) {
    if (!ReadVersion1(*reader, &out)) {
      return absl::DataLossError(StrCat(path, ": malformed SGP state"));
    }
  } else {
    pb::SgpState m;
    if (absl::Status st = core::ParseMessage(*reader, &m, path); !st.ok()) return st;
    for (const pb::SgpState::Mail& in : m.mail()) {
      auto x = core::FloatsFromBytes(in.x(), path);
      if (!x.ok()) return x.status();
      out.push_back({in.client(), in.round(), in.w(), *std::move(x)});
    }
  }
  for (const SgpMail& m : out) {
    if (m.x.size() != dim || !(m.w > 0)) {
      return absl::DataLossError(StrCat(path, ": malformed SGP mail"));
    }
  }
  return out;
}

}  // namespace fedlgc::modes
