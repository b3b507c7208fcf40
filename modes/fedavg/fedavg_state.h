// What FedAvg's round protocols keep beside the checkpoint of a committed round:
// two-phase PowerSGD's query for the next round (<state_dir>/powersgd_query-<round>.bin),
// GradiVeQ's basis in force (<state_dir>/gradiveq-<round>.bin), a DP job's privacy
// account (<state_dir>/dp-<round>.bin) and SCAFFOLD's server control variate
// (<state_dir>/scaffold-<round>.bin).
#ifndef FEDLGC_MODES_FEDAVG_FEDAVG_STATE_H_
#define FEDLGC_MODES_FEDAVG_FEDAVG_STATE_H_

#include <cstdint>
#include <map>
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

// SCAFFOLD's server state (scaffold_rounds.h) as of a commit. NOT_FOUND when the round
// has no file.
struct ScaffoldControl {
  std::vector<double> sum;                // S = sum_i w_i c_i (empty: zeros)
  std::vector<float> control;             // c = S / total_weight, as served (empty: zeros)
  uint64_t version = 0;                   // the model version c was made at: its blob's version
  double total_weight = 0;                // W_all (0: no commit yet)
  std::map<std::string, double> weights;  // each client's w_i in S, fixed when first counted
  bool operator==(const ScaffoldControl&) const = default;
};
absl::Status SaveScaffoldControl(const std::string& state_dir, uint64_t round,
                                 const ScaffoldControl& control);
absl::StatusOr<ScaffoldControl> LoadScaffoldControl(const std::string& state_dir, uint64_t round);

// The files' paths, for messages.
std::string ScaffoldControlPath(const std::string& state_dir, uint64_t round);
std::string DpAccountPath(const std::string& state_dir, uint64_t round);
std::string PowerSgdQueryPath(const std::string& state_dir, uint64_t round);
std::string GradiveqBasisPath(const std::string& state_dir, uint64_t round);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_FEDAVG_STATE_H_
