// LSGD's groups of clients: the spec users give (--lsgd-groups 'a,b;c,d') and the groups
// formed from the round trips clients measure (--lsgd-group-size).
#ifndef FEDLGC_MODES_LSGD_LSGD_GROUPS_H_
#define FEDLGC_MODES_LSGD_LSGD_GROUPS_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::modes {

// "a,b;c,d": two groups. Every client in at most one group.
absl::StatusOr<std::vector<std::vector<std::string>>> ParseLsgdGroups(std::string_view spec);
// The spec ParseLsgdGroups reads back as `groups`.
std::string FormatLsgdGroups(const std::vector<std::vector<std::string>>& groups);
// Clients sorted by round-trip time (then id), cut into groups of `size` (the last may be
// smaller, and is merged into the one before when it would hold a single client).
std::vector<std::vector<std::string>> GroupsByLatency(const std::map<std::string, double>& rtt_ms,
                                                      size_t size);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_LSGD_LSGD_GROUPS_H_
