// LSGD's groups (see lsgd_groups.h).
#include "modes/lsgd/lsgd_groups.h"

#include <algorithm>
#include <set>

#include "base/str.h"

namespace fedlgc::modes {
namespace {

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = s.find(sep, start);
    out.emplace_back(s.substr(start, end == std::string_view::npos ? s.npos : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

}  // namespace

absl::StatusOr<std::vector<std::vector<std::string>>> ParseLsgdGroups(std::string_view spec) {
  std::vector<std::vector<std::string>> groups;
  if (spec.empty()) return groups;
  std::set<std::string> seen;
  for (const std::string& g : Split(spec, ';')) {
    std::vector<std::string> members;
    for (const std::string& c : Split(g, ',')) {
      if (c.empty())
        return absl::InvalidArgumentError(StrCat("--lsgd-groups: empty client in '", spec, "'"));
      if (!seen.insert(c).second) {
        return absl::InvalidArgumentError(StrCat("--lsgd-groups: ", c, " is in two groups"));
      }
      members.push_back(c);
    }
    groups.push_back(std::move(members));
  }
  return groups;
}

std::string FormatLsgdGroups(const std::vector<std::vector<std::string>>& groups) {
  std::string out;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (g > 0) out += ';';
    for (size_t i = 0; i < groups[g].size(); ++i) out += (i > 0 ? "," : "") + groups[g][i];
  }
  return out;
}

std::vector<std::vector<std::string>> GroupsByLatency(const std::map<std::string, double>& rtt_ms,
                                                      size_t size) {
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [c, rtt] : rtt_ms) order.emplace_back(rtt, c);
  std::sort(order.begin(), order.end());
  std::vector<std::vector<std::string>> groups;
  size = std::max<size_t>(size, 1);
  for (size_t i = 0; i < order.size(); ++i) {
    if (i % size == 0) groups.emplace_back();
    groups.back().push_back(order[i].second);
  }
  if (groups.size() >= 2 && groups.back().size() == 1 && size > 1) {
    groups[groups.size() - 2].push_back(groups.back().front());
    groups.pop_back();
  }
  return groups;
}

}  // namespace fedlgc::modes
