// What the LSGD driver must not lose across a restart, and its state file
// <state_dir>/lsgd-<round>.bin beside the checkpoint of the round it belongs to.
#ifndef FEDLGC_MODES_LSGD_LSGD_STATE_H_
#define FEDLGC_MODES_LSGD_LSGD_STATE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::modes {

struct LsgdState {
  std::vector<std::vector<float>> refs;  // each group's reference; empty: groups not formed
  std::vector<uint64_t> ref_versions;    // refs[g]'s version
  std::map<std::string, size_t> group_of;
  std::map<std::string, double> rtt_ms;  // the clients' measured round trips
  // The last commit: the leaders whose update counted, and the global pull.
  std::map<size_t, std::string> pulled_leaders;
  bool pull_global = false;
  std::string global_leader;

  bool operator==(const LsgdState&) const = default;
};

absl::Status SaveLsgdState(const std::string& state_dir, uint64_t round, const LsgdState& state);
// The state of `round`, every reference of `dim` floats; DATA_LOSS names the file.
absl::StatusOr<LsgdState> LoadLsgdState(const std::string& state_dir, uint64_t round, size_t dim);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_LSGD_LSGD_STATE_H_
