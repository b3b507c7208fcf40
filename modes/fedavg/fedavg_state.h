// What FedAvg's round protocols keep beside the checkpoint of a committed round:
// two-phase PowerSGD's query for the next round (<state_dir>/powersgd_query-<round>.bin),
// GradiVeQ's basis in force (<state_dir>/gradiveq-<round>.bin) and a DP job's privacy
// account (<state_dir>/dp-<round>.bin).
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

// A DP job's account (dp_rounds.h): the accountant's orders and the RDP spent at each,
// the job's delta and limit, and the population its rounds divide by. NOT_FOUND when the
// round has no file.
struct DpAccount {
  std::vector<double> orders;
  std::vector<double> rdp;
  double delta = 0;
  double limit = 0;         // +infinity: none
  uint64_t population = 0;  // 0: fixed by the first round
  std::string mechanism = "gaussian";  // or "skellam"
  std::vector<double> rdp_unsampled;   // skellam: the RDP without the sampling's amplification
  bool operator==(const DpAccount&) const = default;
};
absl::Status SaveDpAccount(const std::string& state_dir, uint64_t round, const DpAccount& account);
absl::StatusOr<DpAccount> LoadDpAccount(const std::string& state_dir, uint64_t round);

// The files' paths, for messages.
std::string DpAccountPath(const std::string& state_dir, uint64_t round);
std::string PowerSgdQueryPath(const std::string& state_dir, uint64_t round);
std::string GradiveqBasisPath(const std::string& state_dir, uint64_t round);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_FEDAVG_STATE_H_
