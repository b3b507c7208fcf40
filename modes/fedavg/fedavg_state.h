// What FedAvg's round protocols keep beside the checkpoint of a committed round:
// two-phase PowerSGD's query for the next round (<state_dir>/powersgd_query-<round>.bin)
// and GradiVeQ's basis in force (<state_dir>/gradiveq-<round>.bin).
#ifndef FEDLGC_MODES_FEDAVG_FEDAVG_STATE_H_
#define FEDLGC_MODES_FEDAVG_FEDAVG_STATE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::modes {

// `query` empty: the next round draws one. NOT_FOUND when the round has no file.
absl::Status SavePowerSgdQuery(const std::string& state_dir, uint64_t round,
                               std::span<const float> query);
absl::StatusOr<std::vector<float>> LoadPowerSgdQuery(const std::string& state_dir, uint64_t round);

// `basis`: codecs::SliceBasis::bytes(), empty before one is fitted. NOT_FOUND when the
// round has no file.
absl::Status SaveGradiveqBasis(const std::string& state_dir, uint64_t round,
                               std::string_view basis);
absl::StatusOr<std::string> LoadGradiveqBasis(const std::string& state_dir, uint64_t round);

// The files' paths, for messages.
std::string PowerSgdQueryPath(const std::string& state_dir, uint64_t round);
std::string GradiveqBasisPath(const std::string& state_dir, uint64_t round);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_FEDAVG_STATE_H_
