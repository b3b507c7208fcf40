// Dataset partitioning (see partition.h).
#include "core/partition.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>

#include "base/spec.h"
#include "base/str.h"
#include "codecs/params.h"

namespace fedlgc::core {

namespace {

// The positional number of `node` (dirichlet(0.5), labels(2)) or its keyed one; `def` when
// neither is given.
absl::StatusOr<double> Leading(const SpecNode& node, const codecs::ParamReader& r,
                               std::string_view key, double def, double lo, double hi) {
  for (const SpecArg& a : node.args) {
    if (!a.key.empty()) continue;
    if (r.Has(key)) return r.Error(key, "given twice (positionally and by name)");
    if (!a.is_number || !(a.number >= lo && a.number <= hi)) {
      return r.Error(
          key, StrCat("must be a number in [", FormatSpecNumber(lo), ", ", FormatSpecNumber(hi),
                      "], got ", a.is_number ? a.text : a.node->name));
    }
    return a.number;
  }
  return r.Real(key, def, lo, hi);
}

}  // namespace

absl::StatusOr<PartitionSpec> PartitionSpec::Parse(const std::string& text) {
  PartitionSpec s;
  auto bad = [&](const absl::Status& st) {
    return absl::InvalidArgumentError(
        StrCat("partition \"", text, "\": ", st.message(),
               " (expected iid, dirichlet(ALPHA[, min=N, balance=1]) or labels(K[, "
               "assign=deal|random]))"));
  };
  // "dirichlet:0.5" is "dirichlet(0.5)".
  std::string canonical = text;
  if (const size_t colon = text.find(':'); colon != std::string::npos) {
    canonical = StrCat(text.substr(0, colon), "(", text.substr(colon + 1), ")");
  }
  auto node = ParseSpec(canonical);
  if (!node.ok()) return bad(node.status());
  if (node->name == "iid") {
    if (node->args.empty()) return s;
    return bad(absl::InvalidArgumentError("iid takes no parameters"));
  }
  if (node->name == "dirichlet") {
    s.kind = Kind::kDirichlet;
    codecs::ParamReader r(*node, {"alpha", "min", "balance"}, 1);
    if (!r.status().ok()) return bad(r.status());
    auto alpha = Leading(*node, r, "alpha", 0.5, 1e-9, 1e6);
    auto min = r.Int("min", 0, 0, 1 << 30);
    auto balance = r.Flag("balance", false);
    for (const absl::Status& st : {alpha.status(), min.status(), balance.status()}) {
      if (!st.ok()) return bad(st);
    }
    bool positional = false;
    for (const SpecArg& a : node->args) positional |= a.key.empty();
    if (!positional && !r.Has("alpha")) {
      return bad(absl::InvalidArgumentError("alpha must be given"));
    }
    s.alpha = *alpha;
    s.min_size = static_cast<int>(*min);
    s.balance = *balance;
    return s;
  }
  if (node->name == "labels") {
    s.kind = Kind::kLabels;
    codecs::ParamReader r(*node, {"k", "assign"}, 1);
    if (!r.status().ok()) return bad(r.status());
    auto k = Leading(*node, r, "k", 0, 1, 1000);
    auto assign = r.Word("assign", "deal", {"deal", "random"});
    for (const absl::Status& st : {k.status(), assign.status()}) {
      if (!st.ok()) return bad(st);
    }
    if (*k != static_cast<int>(*k) || *k < 1) {
      return bad(absl::InvalidArgumentError("labels must be given, an integer >= 1"));
    }
    s.labels = static_cast<int>(*k);
    s.assign = *assign == "random" ? Assign::kRandom : Assign::kDeal;
    return s;
  }
  return bad(absl::InvalidArgumentError(StrCat("unknown partition '", node->name, "'")));
}

std::string PartitionSpec::ToString() const {
  switch (kind) {
    case Kind::kIid:
      return "iid";
    case Kind::kDirichlet: {
      std::string out = StrCat("dirichlet(", FormatSpecNumber(alpha));
      if (min_size > 0) out += StrCat(",min=", min_size);
      if (balance) out += ",balance=1";
      return out + ")";
    }
    case Kind::kLabels:
      return StrCat("labels(", labels, assign == Assign::kRandom ? ",assign=random" : "", ")");
  }
  return "?";
}

absl::Status CheckPartition(const PartitionSpec& spec, bool has_classes, const std::string& what) {
  if (has_classes || spec.kind == PartitionSpec::Kind::kIid) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("--partition ", spec.ToString(), " splits by class; ",
                                           what, " has float targets, not classes: use iid"));
}

namespace {

using Shards = std::vector<std::vector<uint32_t>>;

// One Dirichlet draw: each class's (shuffled) examples cut by proportions ~ Dir(alpha),
// from which clients at or over the balance cap are left out.
void DrawDirichlet(std::vector<std::vector<uint32_t>>& by_class, size_t n,
                   const PartitionSpec& spec, bool reshuffle, std::mt19937_64& rng,
                   Shards& shards) {
  const int clients = static_cast<int>(shards.size());
  const double cap = static_cast<double>(n) / clients;
  std::gamma_distribution<double> gamma(spec.alpha, 1.0);
  for (auto& members : by_class) {
    if (reshuffle) std::shuffle(members.begin(), members.end(), rng);
    std::vector<double> p(clients);
    double sum = 0;
    for (int c = 0; c < clients; ++c) {
      p[c] = gamma(rng) + 1e-12;
      if (spec.balance && static_cast<double>(shards[c].size()) >= cap) p[c] = 0;
      sum += p[c];
    }
    // The last client with a share takes what rounding leaves (a capped one gets none).
    int last = clients - 1;
    while (last > 0 && p[last] == 0) --last;
    size_t start = 0;
    double acc = 0;
    for (int c = 0; c <= last; ++c) {
      acc += p[c] / sum;
      const size_t end = c == last
                             ? members.size()
                             : std::min(members.size(), static_cast<size_t>(acc * members.size()));
      for (size_t i = start; i < end; ++i) shards[c].push_back(members[i]);
      start = std::max(start, end);
    }
  }
}

// Which clients hold each class under kLabels.
std::vector<std::vector<int>> Holders(int classes, int clients, const PartitionSpec& spec,
                                      std::mt19937_64& rng) {
  std::vector<std::vector<int>> holders(classes);
  const int k = std::min(spec.labels, classes);
  if (spec.assign == PartitionSpec::Assign::kRandom) {
    std::uniform_int_distribution<int> pick(0, classes - 1);
    for (int c = 0; c < clients; ++c) {
      std::vector<int> mine = {c % classes};
      while (static_cast<int>(mine.size()) < k) {
        const int j = pick(rng);
        if (std::find(mine.begin(), mine.end(), j) == mine.end()) mine.push_back(j);
      }
      for (int j : mine) holders[j].push_back(c);
    }
    return holders;
  }
  std::vector<int> order(classes);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  int next = 0;
  for (int c = 0; c < clients; ++c) {
    for (int j = 0; j < k; ++j) holders[order[next++ % classes]].push_back(c);
  }
  return holders;
}

}  // namespace

absl::StatusOr<Shards> Partition(std::span<const int32_t> labels, size_t n, int classes,
                                 int clients, const PartitionSpec& spec, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Shards shards(clients);
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
      if (static_cast<uint64_t>(spec.min_size) * clients > n) {
        return absl::InvalidArgumentError(StrCat(
            "--partition ", spec.ToString(), ": ", clients, " clients of at least ", spec.min_size,
            " examples need ", uint64_t{1} * spec.min_size * clients, ", the data has ", n));
      }
      // Draw the whole split again until every client holds min_size (Li et al. 2022).
      constexpr int kMaxDraws = 10000;
      for (int draw = 0;; ++draw) {
        for (auto& s : shards) s.clear();
        DrawDirichlet(by_class, n, spec, draw > 0, rng, shards);
        size_t smallest = n;
        for (const auto& s : shards) smallest = std::min(smallest, s.size());
        if (smallest >= static_cast<size_t>(spec.min_size)) break;
        if (draw + 1 == kMaxDraws) {
          return absl::InvalidArgumentError(
              StrCat("--partition ", spec.ToString(), ": no split of ", kMaxDraws,
                     " draws gave every one of ", clients, " clients ", spec.min_size,
                     " examples; lower min or raise alpha"));
        }
      }
      break;
    }
    case PartitionSpec::Kind::kLabels: {
      // Each class's examples are split evenly among its holders (sizes differing by at
      // most one): dealt in turn (kDeal), or in contiguous runs in client order (kRandom,
      // as the reference's array_split).
      const std::vector<std::vector<int>> holders = Holders(classes, clients, spec, rng);
      for (int k = 0; k < classes; ++k) {
        const auto& h = holders[k];
        const auto& m = by_class[k];
        if (h.empty()) continue;
        if (spec.assign == PartitionSpec::Assign::kDeal) {
          for (size_t i = 0; i < m.size(); ++i) shards[h[i % h.size()]].push_back(m[i]);
          continue;
        }
        const size_t base = m.size() / h.size(), extra = m.size() % h.size();
        size_t at = 0;
        for (size_t j = 0; j < h.size(); ++j) {
          const size_t len = base + (j < extra ? 1 : 0);
          shards[h[j]].insert(shards[h[j]].end(), m.begin() + at, m.begin() + at + len);
          at += len;
        }
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
