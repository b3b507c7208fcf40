// Dataset partitioning (see partition.h).
#include "core/partition.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>

#include "base/str.h"

namespace fedlgc::core {

absl::StatusOr<PartitionSpec> PartitionSpec::Parse(const std::string& text) {
  PartitionSpec s;
  auto arg = [&](const std::string& name) -> std::string {
    const size_t open = text.find_first_of("(:");
    if (open == std::string::npos || text.compare(0, open, name) != 0) return "";
    std::string v = text.substr(open + 1);
    if (!v.empty() && v.back() == ')') v.pop_back();
    return v;
  };
  if (text == "iid") return s;
  char* end = nullptr;
  if (std::string v = arg("dirichlet"); !v.empty()) {
    s.kind = Kind::kDirichlet;
    s.alpha = std::strtod(v.c_str(), &end);
    if (*end != '\0' || !(s.alpha > 0 && s.alpha <= 1e6)) {
      return absl::InvalidArgumentError(StrCat("partition \"", text, "\": alpha must be > 0"));
    }
    return s;
  }
  if (std::string v = arg("labels"); !v.empty()) {
    s.kind = Kind::kLabels;
    s.labels = static_cast<int>(std::strtol(v.c_str(), &end, 10));
    if (*end != '\0' || s.labels < 1 || s.labels > 1000) {
      return absl::InvalidArgumentError(StrCat("partition \"", text, "\": labels must be >= 1"));
    }
    return s;
  }
  return absl::InvalidArgumentError(
      StrCat("partition \"", text, "\": expected iid, dirichlet(ALPHA) or labels(K)"));
}

std::string PartitionSpec::ToString() const {
  switch (kind) {
    case Kind::kIid:
      return "iid";
    case Kind::kDirichlet:
      return StrCat("dirichlet(", alpha, ")");
    case Kind::kLabels:
      return StrCat("labels(", labels, ")");
  }
  return "?";
}

absl::Status CheckPartition(const PartitionSpec& spec, bool has_classes, const std::string& what) {
  if (has_classes || spec.kind == PartitionSpec::Kind::kIid) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("--partition ", spec.ToString(), " splits by class; ",
                                           what, " has float targets, not classes: use iid"));
}

std::vector<std::vector<uint32_t>> Partition(std::span<const int32_t> labels, size_t n,
                                             int classes, int clients, const PartitionSpec& spec,
                                             uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint32_t>> shards(clients);
  std::vector<std::vector<uint32_t>> by_class(labels.empty() ? 0 : classes);
  for (uint32_t i = 0; i < labels.size(); ++i) by_class[labels[i]].push_back(i);
  for (auto& c : by_class) std::shuffle(c.begin(), c.end(), rng);

  switch (labels.empty() ? PartitionSpec::Kind::kIid : spec.kind) {
    case PartitionSpec::Kind::kIid: {
      std::vector<uint32_t> all(n);
      std::iota(all.begin(), all.end(), 0u);
      std::shuffle(all.begin(), all.end(), rng);
      for (size_t i = 0; i < all.size(); ++i) shards[i % clients].push_back(all[i]);
      break;
    }
    case PartitionSpec::Kind::kDirichlet: {
      // For each class, split its examples by proportions ~ Dirichlet(alpha).
      std::gamma_distribution<double> gamma(spec.alpha, 1.0);
      for (auto& members : by_class) {
        std::vector<double> p(clients);
        double sum = 0;
        for (double& v : p) sum += (v = gamma(rng) + 1e-12);
        size_t start = 0;
        double acc = 0;
        for (int c = 0; c < clients; ++c) {
          acc += p[c] / sum;
          const size_t end = c + 1 == clients ? members.size()
                                              : std::min(members.size(),
                                                         static_cast<size_t>(acc * members.size()));
          for (size_t i = start; i < end; ++i) shards[c].push_back(members[i]);
          start = std::max(start, end);
        }
      }
      break;
    }
    case PartitionSpec::Kind::kLabels: {
      // Client c gets `labels` classes, dealt round-robin from a shuffled class order; each
      // class's examples are split evenly among the clients that hold it.
      std::vector<int> order(classes);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<std::vector<int>> holders(classes);
      int next = 0;
      for (int c = 0; c < clients; ++c) {
        for (int j = 0; j < std::min(spec.labels, classes); ++j) {
          holders[order[next++ % classes]].push_back(c);
        }
      }
      for (int k = 0; k < classes; ++k) {
        const auto& h = holders[k];
        if (h.empty()) continue;
        for (size_t i = 0; i < by_class[k].size(); ++i)
          shards[h[i % h.size()]].push_back(by_class[k][i]);
      }
      break;
    }
  }
  for (auto& s : shards) std::sort(s.begin(), s.end());
  return shards;
}

HeldOutSplit SplitHeldOut(std::span<const uint32_t> shard, double fraction, uint64_t seed) {
  HeldOutSplit out;
  const size_t n = shard.size();
  const size_t k = n == 0 || !(fraction > 0)
                       ? 0
                       // (less a hair: 0.1 of 1,000 is 100, whatever 0.1's rounding)
                       : std::min(n - 1, static_cast<size_t>(std::ceil(fraction * n - 1e-6)));
  if (k == 0) {
    out.train.assign(shard.begin(), shard.end());
    return out;
  }
  std::vector<uint32_t> order(shard.begin(), shard.end());
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  out.held.assign(order.begin(), order.begin() + static_cast<ptrdiff_t>(k));
  std::sort(out.held.begin(), out.held.end());
  for (uint32_t i : shard) {
    if (!std::binary_search(out.held.begin(), out.held.end(), i)) out.train.push_back(i);
  }
  return out;
}

}  // namespace fedlgc::core
