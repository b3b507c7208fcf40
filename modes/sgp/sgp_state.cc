// SGP relay state file (see sgp_state.h): u32 magic 'SGPP', u32 version 1, u64 round,
// u64 n, n x {str client, u64 round, f64 w, floats x}; CRC32C (core/atomic_file.h).
#include "modes/sgp/sgp_state.h"

#include "codecs/str.h"
#include "core/atomic_file.h"

namespace fedlgc::modes {
namespace {

constexpr uint32_t kMagic = 0x53475050;  // "SGPP"
constexpr uint32_t kVersion = 1;
constexpr std::string_view kPrefix = "sgp";

}  // namespace

absl::Status SaveSgpState(const std::string& state_dir, uint64_t round,
                          std::span<const SgpMailView> mail) {
  core::StateWriter w = core::BeginRoundState(kMagic, kVersion, round);
  w.U64(mail.size());
  for (const SgpMailView& m : mail) {
    w.Str(m.client);
    w.U64(m.round);
    w.F64(m.w);
    w.Floats(m.x);
  }
  return core::SaveRoundState(state_dir, kPrefix, round, w.Finish());
}

absl::StatusOr<std::vector<SgpMail>> LoadSgpState(const std::string& state_dir, uint64_t round,
                                                  size_t dim) {
  const std::string path = core::RoundStatePath(state_dir, kPrefix, round);
  std::string bytes;
  auto reader = core::ReadRoundState(state_dir, kPrefix, round, kMagic, kVersion, &bytes);
  if (!reader.ok()) return reader.status();
  core::StateReader& r = *reader;
  uint64_t n;
  if (!r.U64(&n)) return absl::DataLossError(StrCat(path, ": malformed SGP state"));
  std::vector<SgpMail> out;
  for (uint64_t i = 0; i < n; ++i) {
    SgpMail m;
    if (!r.Str(&m.client) || !r.U64(&m.round) || !r.F64(&m.w) || !r.Floats(&m.x) ||
        m.x.size() != dim || !(m.w > 0)) {
      return absl::DataLossError(StrCat(path, ": malformed SGP mail"));
    }
    out.push_back(std::move(m));
  }
  if (!r.done()) return absl::DataLossError(StrCat(path, ": trailing bytes"));
  return out;
}

}  // namespace fedlgc::modes
