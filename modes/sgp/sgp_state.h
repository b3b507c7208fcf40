// What the SGP relay must not lose across a restart: the shares it holds for clients that
// have not taken them yet, in <state_dir>/sgp-<round>.bin beside the round's checkpoint.
#ifndef FEDLGC_MODES_SGP_SGP_STATE_H_
#define FEDLGC_MODES_SGP_SGP_STATE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::modes {

// What `client` is owed from `round`'s shares: push-sum weight w and values x.
struct SgpMail {
  std::string client;
  uint64_t round = 0;
  double w = 0;
  std::vector<float> x;

  bool operator==(const SgpMail&) const = default;
};
// The same, viewing the relay's own mailboxes (saved without a copy).
struct SgpMailView {
  std::string_view client;
  uint64_t round = 0;
  double w = 0;
  std::span<const float> x;
};

absl::Status SaveSgpState(const std::string& state_dir, uint64_t round,
                          std::span<const SgpMailView> mail);
// The mail saved with `round`, each of `dim` values and a positive weight.
absl::StatusOr<std::vector<SgpMail>> LoadSgpState(const std::string& state_dir, uint64_t round,
                                                  size_t dim);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_SGP_SGP_STATE_H_
