// FedAvg's round-protocol state files (see fedavg_state.h): u32 magic, u32 version, u64
// round, then version 2: a message of fedavg_state.proto (core/state_message.h),
// PowerSGD's 'PSGQ' pb::PowerSgdQuery, GradiVeQ's 'GVBS' pb::GradiveqBasis, DP's 'DPAC'
// pb::DpAccount and SCAFFOLD's 'SCAF' pb::ScaffoldControl (version 1 is a message);
// version 1:
// PSGQ floats query, GVBS str basis. CRC32C at the end (core/atomic_file.h).
#include "modes/fedavg/fedavg_state.h"

#include "base/str.h"
#include "core/float_bytes.h"
#include "core/state_file.h"
#include "core/state_message.h"
#include "modes/fedavg/fedavg_state.pb.h"

namespace fedlgc::modes {
namespace {

constexpr uint32_t kQueryMagic = 0x51475350;  // "PSGQ"
constexpr uint32_t kQueryVersion = 2;
constexpr std::string_view kQueryPrefix = "powersgd_query";
constexpr uint32_t kBasisMagic = 0x53425647;  // "GVBS"
constexpr uint32_t kBasisVersion = 2;
constexpr std::string_view kBasisPrefix = "gradiveq";
constexpr uint32_t kDpMagic = 0x43415044;  // "DPAC"
constexpr uint32_t kDpVersion = 1;
constexpr std::string_view kDpPrefix = "dp";
constexpr uint32_t kScaffoldMagic = 0x46414353;  // "SCAF"
constexpr uint32_t kScaffoldVersion = 1;
constexpr std::string_view kScaffoldPrefix = "scaffold";

}  // namespace

std::string DpAccountPath(const std::string& state_dir, uint64_t round) {
  return core::RoundStatePath(state_dir, kDpPrefix, round);
}

absl::Status SaveDpAccount(const std::string& state_dir, uint64_t round, const DpAccount& account) {
  pb::DpAccount m;
  m.mutable_orders()->Assign(account.orders.begin(), account.orders.end());
  m.mutable_rdp()->Assign(account.rdp.begin(), account.rdp.end());
  m.set_delta(account.delta);
  m.set_limit(account.limit);
  m.set_population(account.population);
  m.set_mechanism(account.mechanism);
  m.mutable_rdp_unsampled()->Assign(account.rdp_unsampled.begin(), account.rdp_unsampled.end());
  return core::SaveRoundMessage(state_dir, kDpPrefix, round, kDpMagic, kDpVersion, m);
}

absl::StatusOr<DpAccount> LoadDpAccount(const std::string& state_dir, uint64_t round) {
  const std::string path = DpAccountPath(state_dir, round);
  std::string bytes;
  auto reader = core::ReadRoundState(state_dir, kDpPrefix, round, kDpMagic, kDpVersion, &bytes);
  if (!reader.ok()) return reader.status();
  pb::DpAccount m;
  if (absl::Status st = core::ParseMessage(*reader, &m, path); !st.ok()) return st;
  if (m.orders_size() != m.rdp_size()) {
    return absl::DataLossError(
        StrCat(path, ": ", m.orders_size(), " orders and ", m.rdp_size(), " RDP values"));
  }
  if (m.rdp_unsampled_size() != 0 && m.rdp_unsampled_size() != m.orders_size()) {
    return absl::DataLossError(StrCat(path, ": ", m.orders_size(), " orders and ",
                                      m.rdp_unsampled_size(), " unsampled RDP values"));
  }
  return DpAccount{{m.orders().begin(), m.orders().end()},
                   {m.rdp().begin(), m.rdp().end()},
                   m.delta(),
                   m.limit(),
                   m.population(),
                   m.mechanism().empty() ? "gaussian" : m.mechanism(),
                   {m.rdp_unsampled().begin(), m.rdp_unsampled().end()}};
}

std::string PowerSgdQueryPath(const std::string& state_dir, uint64_t round) {
  return core::RoundStatePath(state_dir, kQueryPrefix, round);
}

std::string GradiveqBasisPath(const std::string& state_dir, uint64_t round) {
  return core::RoundStatePath(state_dir, kBasisPrefix, round);
}

absl::Status SavePowerSgdQuery(const std::string& state_dir, uint64_t round,
                               std::span<const float> query) {
  pb::PowerSgdQuery m;
  m.set_query(core::FloatsToBytes(query));
  return core::SaveRoundMessage(state_dir, kQueryPrefix, round, kQueryMagic, kQueryVersion, m);
}

absl::StatusOr<std::vector<float>> LoadPowerSgdQuery(const std::string& state_dir, uint64_t round) {
  const std::string path = PowerSgdQueryPath(state_dir, round);
  std::string bytes;
  uint32_t version = 0;
  auto reader = core::ReadRoundState(state_dir, kQueryPrefix, round, kQueryMagic, 1, kQueryVersion,
                                     &version, &bytes);
  if (!reader.ok()) return reader.status();
  if (version == 1) {
    std::vector<float> q;
    if (!reader->Floats(&q) || !reader->done()) {
      return absl::DataLossError(StrCat(path, ": malformed"));
    }
    return q;
  }
  pb::PowerSgdQuery m;
  if (absl::Status st = core::ParseMessage(*reader, &m, path); !st.ok()) return st;
  return core::FloatsFromBytes(m.query(), path);
}

absl::Status SaveGradiveqBasis(const std::string& state_dir, uint64_t round,
                               std::string_view basis) {
  pb::GradiveqBasis m;
  m.set_basis(std::string(basis));
  return core::SaveRoundMessage(state_dir, kBasisPrefix, round, kBasisMagic, kBasisVersion, m);
}

absl::StatusOr<std::string> LoadGradiveqBasis(const std::string& state_dir, uint64_t round) {
  const std::string path = GradiveqBasisPath(state_dir, round);
  std::string bytes;
  uint32_t version = 0;
  auto reader = core::ReadRoundState(state_dir, kBasisPrefix, round, kBasisMagic, 1, kBasisVersion,
                                     &version, &bytes);
  if (!reader.ok()) return reader.status();
  if (version == 1) {
    std::string basis;
    if (!reader->Str(&basis) || !reader->done()) {
      return absl::DataLossError(StrCat(path, ": malformed"));
    }
    return basis;
  }
  pb::GradiveqBasis m;
  if (absl::Status st = core::ParseMessage(*reader, &m, path); !st.ok()) return st;
  return std::string(m.basis());
}

std::string ScaffoldControlPath(const std::string& state_dir, uint64_t round) {
  return core::RoundStatePath(state_dir, kScaffoldPrefix, round);
}

absl::Status SaveScaffoldControl(const std::string& state_dir, uint64_t round,
                                 const ScaffoldControl& control) {
  pb::ScaffoldControl m;
  m.mutable_sum()->Assign(control.sum.begin(), control.sum.end());
  m.set_control(core::FloatsToBytes(control.control));
  m.set_version(control.version);
  m.set_total_weight(control.total_weight);
  m.mutable_weights()->insert(control.weights.begin(), control.weights.end());
  return core::SaveRoundMessage(state_dir, kScaffoldPrefix, round, kScaffoldMagic, kScaffoldVersion,
                                m);
}

absl::StatusOr<ScaffoldControl> LoadScaffoldControl(const std::string& state_dir, uint64_t round) {
  const std::string path = ScaffoldControlPath(state_dir, round);
  std::string bytes;
  auto reader = core::ReadRoundState(state_dir, kScaffoldPrefix, round, kScaffoldMagic,
                                     kScaffoldVersion, &bytes);
  if (!reader.ok()) return reader.status();
  pb::ScaffoldControl m;
  if (absl::Status st = core::ParseMessage(*reader, &m, path); !st.ok()) return st;
  auto control = core::FloatsFromBytes(m.control(), path);
  if (!control.ok()) return control.status();
  if (!control->empty() && !m.sum().empty() &&
      control->size() != static_cast<size_t>(m.sum_size())) {
    return absl::DataLossError(
        StrCat(path, ": c of ", control->size(), " values, S of ", m.sum_size()));
  }
  ScaffoldControl out;
  out.sum.assign(m.sum().begin(), m.sum().end());
  out.control = *std::move(control);
  out.version = m.version();
  out.total_weight = m.total_weight();
  out.weights.insert(m.weights().begin(), m.weights().end());
  return out;
}

}  // namespace fedlgc::modes
