// FedAvg's round-protocol state files (see fedavg_state.h), each u32 magic, u32 version 1,
// u64 round, then PowerSGD's 'PSGQ': floats query; GradiVeQ's 'GVBS': str basis; CRC32C
// (core/atomic_file.h).
#include "modes/fedavg/fedavg_state.h"

#include "codecs/str.h"
#include "core/atomic_file.h"

namespace fedlgc::modes {
namespace {

constexpr uint32_t kQueryMagic = 0x51475350;  // "PSGQ"
constexpr uint32_t kQueryVersion = 1;
constexpr std::string_view kQueryPrefix = "powersgd_query";
constexpr uint32_t kBasisMagic = 0x53425647;  // "GVBS"
constexpr uint32_t kBasisVersion = 1;
constexpr std::string_view kBasisPrefix = "gradiveq";

}  // namespace

std::string PowerSgdQueryPath(const std::string& state_dir, uint64_t round) {
  return core::RoundStatePath(state_dir, kQueryPrefix, round);
}

std::string GradiveqBasisPath(const std::string& state_dir, uint64_t round) {
  return core::RoundStatePath(state_dir, kBasisPrefix, round);
}

absl::Status SavePowerSgdQuery(const std::string& state_dir, uint64_t round,
                               std::span<const float> query) {
  core::StateWriter w = core::BeginRoundState(kQueryMagic, kQueryVersion, round);
  w.Floats(query);
  return core::SaveRoundState(state_dir, kQueryPrefix, round, w.Finish());
}

absl::StatusOr<std::vector<float>> LoadPowerSgdQuery(const std::string& state_dir,
                                                     uint64_t round) {
  std::string bytes;
  auto reader =
      core::ReadRoundState(state_dir, kQueryPrefix, round, kQueryMagic, kQueryVersion, &bytes);
  if (!reader.ok()) return reader.status();
  std::vector<float> q;
  if (!reader->Floats(&q) || !reader->done()) {
    return absl::DataLossError(StrCat(PowerSgdQueryPath(state_dir, round), ": malformed"));
  }
  return q;
}

absl::Status SaveGradiveqBasis(const std::string& state_dir, uint64_t round,
                               std::string_view basis) {
  core::StateWriter w = core::BeginRoundState(kBasisMagic, kBasisVersion, round);
  w.Str(basis);
  return core::SaveRoundState(state_dir, kBasisPrefix, round, w.Finish());
}

absl::StatusOr<std::string> LoadGradiveqBasis(const std::string& state_dir, uint64_t round) {
  std::string bytes;
  auto reader =
      core::ReadRoundState(state_dir, kBasisPrefix, round, kBasisMagic, kBasisVersion, &bytes);
  if (!reader.ok()) return reader.status();
  std::string basis;
  if (!reader->Str(&basis) || !reader->done()) {
    return absl::DataLossError(StrCat(GradiveqBasisPath(state_dir, round), ": malformed"));
  }
  return basis;
}

}  // namespace fedlgc::modes
