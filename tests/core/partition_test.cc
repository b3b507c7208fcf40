// Tests for core/partition: the splits' exact properties over many seeds, the specs'
// grammar, and that the splits of earlier releases are unchanged.
#include "core/partition.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "gtest/gtest.h"

namespace fedlgc::core {
namespace {

using Shards = std::vector<std::vector<uint32_t>>;

std::vector<int32_t> Labels(size_t n) {
  std::vector<int32_t> l(n);
  for (size_t i = 0; i < n; ++i) l[i] = static_cast<int32_t>((i * 7) % 10);
  return l;
}

Shards Split(const std::vector<int32_t>& labels, int clients, const std::string& spec,
             uint64_t seed) {
  auto s = Partition(labels, labels.size(), 10, clients, PartitionSpec::Parse(spec).value(), seed);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : Shards(clients);
}

// counts[c][k]: client c's examples of class k.
std::vector<std::vector<int>> Counts(const Shards& shards, const std::vector<int32_t>& labels) {
  std::vector<std::vector<int>> counts(shards.size(), std::vector<int>(10, 0));
  for (size_t c = 0; c < shards.size(); ++c) {
    for (uint32_t i : shards[c]) ++counts[c][labels[i]];
  }
  return counts;
}

// Every example at most once; every one when `all`.
void ExpectDisjoint(const Shards& shards, size_t n, bool all) {
  std::vector<int> seen(n, 0);
  for (const auto& s : shards) {
    for (uint32_t i : s) ++seen[i];
  }
  for (size_t i = 0; i < n; ++i) {
    ASSERT_LE(seen[i], 1) << "example " << i;
    if (all) {
      ASSERT_EQ(seen[i], 1) << "example " << i;
    }
  }
}

TEST(Partition, IidCoversEverythingOnceAndEvenly) {
  const auto labels = Labels(10007);
  const auto shards = Split(labels, 8, "iid", 1);
  for (const auto& s : shards) EXPECT_NEAR(static_cast<double>(s.size()), 10007.0 / 8, 1.0);
  ExpectDisjoint(shards, labels.size(), true);
  EXPECT_EQ(shards, Split(labels, 8, "iid", 1));
  EXPECT_NE(shards, Split(labels, 8, "iid", 2));
}

TEST(Partition, LabelsPerClientDealt) {
  const auto labels = Labels(5000);
  const auto shards = Split(labels, 10, "labels(2)", 3);
  for (const auto& s : shards) {
    std::set<int> c;
    for (uint32_t i : s) c.insert(labels[i]);
    EXPECT_EQ(c.size(), 2u);
    EXPECT_EQ(s.size(), 500u);  // every class has two holders
  }
  ExpectDisjoint(shards, labels.size(), true);
}

TEST(Partition, DirichletSkewGrowsAsAlphaShrinks) {
  const auto labels = Labels(20000);
  auto skew = [&](double alpha) {
    PartitionSpec spec;
    spec.kind = PartitionSpec::Kind::kDirichlet;
    spec.alpha = alpha;
    const Shards shards = Partition(labels, labels.size(), 10, 10, spec, 5).value();
    ExpectDisjoint(shards, labels.size(), true);
    double dominant = 0;  // mean share of each client's most frequent class
    for (const auto& s : shards) {
      std::vector<int> count(10, 0);
      for (uint32_t i : s) ++count[labels[i]];
      if (!s.empty()) dominant += *std::max_element(count.begin(), count.end()) / double(s.size());
    }
    return dominant / shards.size();
  };
  const double low = skew(100.0), high = skew(0.1);
  EXPECT_LT(low, 0.2);
  EXPECT_GT(high, 0.5);
}

// Li et al. 2022's Dirichlet split: each class is cut among the clients still under n /
// clients examples (classes in order 0, 1, ...), and the whole split is drawn again until
// every client holds `min`.
TEST(Partition, DirichletBalanceCapAndMinimumHoldForEverySeed) {
  const auto labels = Labels(3000);
  const double cap = 3000.0 / 20;
  int redrawn = 0;
  size_t largest_capped = 0, largest_free = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const Shards shards = Split(labels, 20, "dirichlet(alpha=0.2,min=10,balance=1)", seed);
    ExpectDisjoint(shards, labels.size(), true);
    const auto counts = Counts(shards, labels);
    for (size_t c = 0; c < shards.size(); ++c) {
      EXPECT_GE(shards[c].size(), 10u) << "seed " << seed << " client " << c;
      int before = 0;
      for (int k = 0; k < 10; ++k) {
        if (before >= cap) {
          EXPECT_EQ(counts[c][k], 0) << "seed " << seed << " class " << k;
        }
        before += counts[c][k];
      }
      largest_capped = std::max(largest_capped, shards[c].size());
    }
    // The same draw without the minimum is the first draw; it differs when one was short.
    const Shards once = Split(labels, 20, "dirichlet(alpha=0.2,balance=1)", seed);
    size_t smallest = labels.size();
    for (const auto& s : once) smallest = std::min(smallest, s.size());
    if (smallest < 10) {
      ++redrawn;
      EXPECT_NE(once, shards);
    } else {
      EXPECT_EQ(once, shards);
    }
    for (const auto& s : Split(labels, 20, "dirichlet(0.2)", seed)) {
      largest_free = std::max(largest_free, s.size());
    }
  }
  EXPECT_GT(redrawn, 5);  // at alpha 0.2 and 20 clients many first draws leave one short
  // A client can pass the cap by at most one class (300 examples here).
  EXPECT_LE(largest_capped, static_cast<size_t>(cap) + 300);
  EXPECT_GT(largest_free, largest_capped);
}

TEST(Partition, DirichletMinimumThatCannotBeMetIsAnError) {
  const auto labels = Labels(100);
  auto spec = PartitionSpec::Parse("dirichlet(alpha=0.5,min=11)").value();
  auto s = Partition(labels, labels.size(), 10, 10, spec, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("need 110, the data has 100"), std::string::npos)
      << s.status();
  // Possible on paper, never drawn: every client exactly 10 of 100 at alpha 0.01.
  spec = PartitionSpec::Parse("dirichlet(alpha=0.01,min=10)").value();
  s = Partition(labels, labels.size(), 10, 10, spec, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("lower min or raise alpha"), std::string::npos) << s.status();
}

// "#C=k" of Li et al. 2022: client i holds class i mod 10 and k - 1 others drawn at random;
// each class is cut into equal runs, one per holder, so sizes are skewed too.
TEST(Partition, LabelsAssignedAtRandomHoldForEverySeed) {
  const auto labels = Labels(2000);  // 200 of each class
  int sizes_differ = 0;
  std::vector<int> second(10, 0);  // client 0's other class, over the seeds
  constexpr int kSeeds = 900;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    const Shards shards = Split(labels, 10, "labels(2,assign=random)", seed);
    ExpectDisjoint(shards, labels.size(), true);  // 10 clients: every class has a holder
    const auto counts = Counts(shards, labels);
    std::vector<std::vector<int>> holders(10);
    for (int c = 0; c < 10; ++c) {
      int held = 0;
      for (int k = 0; k < 10; ++k) {
        if (counts[c][k] > 0) {
          ++held;
          holders[k].push_back(counts[c][k]);
          if (c == 0 && k != 0) ++second[k];
        }
      }
      ASSERT_EQ(held, 2) << "seed " << seed << " client " << c;
      ASSERT_GT(counts[c][c % 10], 0) << "seed " << seed << " client " << c;
    }
    for (const auto& h : holders) {
      const auto [lo, hi] = std::minmax_element(h.begin(), h.end());
      ASSERT_LE(*hi - *lo, 1);
    }
    std::set<size_t> sizes;
    for (const auto& s : shards) sizes.insert(s.size());
    sizes_differ += sizes.size() > 1;
  }
  EXPECT_GT(sizes_differ, kSeeds * 9 / 10);
  // Client 0's other class is uniform over the other nine: 100 each, sd sqrt(900/9 x 8/9)
  // = 9.4; five of it either side.
  EXPECT_EQ(second[0], 0);
  for (int k = 1; k < 10; ++k) EXPECT_NEAR(second[k], 100, 47) << "class " << k;
  EXPECT_EQ(Split(labels, 10, "labels(2,assign=random)", 4),
            Split(labels, 10, "labels(2,assign=random)", 4));
}

TEST(Partition, LabelsWithFewerClientsThanClassesLeaveSomeUnused) {
  const auto labels = Labels(1000);
  const Shards shards = Split(labels, 3, "labels(2,assign=random)", 9);
  ExpectDisjoint(shards, labels.size(), false);
  const auto counts = Counts(shards, labels);
  for (int c = 0; c < 3; ++c) EXPECT_GT(counts[c][c], 0);
}

// Clients of two releases in one federation must cut the same shards: the splits of the
// specs that existed before min, balance and assign were added are those releases' own
// (fingerprints printed by the earlier implementation, built apart, for these labels).
TEST(Partition, EarlierSpecsCutTheSameShardsAsBefore) {
  std::vector<int32_t> l(5000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<int32_t>((i * i + 3 * i) % 10);
  auto fingerprint = [](const Shards& shards) {
    uint64_t h = 1469598103934665603ull;
    for (const auto& s : shards) {
      for (uint32_t i : s) h = (h ^ i) * 1099511628211ull;
      h = (h ^ 0xffffffffull) * 1099511628211ull;
    }
    return h;
  };
  const struct {
    const char* spec;
    uint64_t seed, print;
  } kBefore[] = {
      {"iid", 1, 0x1d414c85e355e94eull},
      {"iid", 7, 0xea4c8e95fc9899f4ull},
      {"dirichlet(0.3)", 1, 0xfee7560990f008e2ull},
      {"dirichlet(0.3)", 7, 0x99ce92963a7b1e7aull},
      {"dirichlet(5)", 1, 0xe0c99392d777b862ull},
      {"dirichlet(5)", 7, 0x28ffa0ef4d07f5c0ull},
      {"labels(2)", 1, 0x068c2f8452e5de86ull},
      {"labels(2)", 7, 0x9165acb9c0bb562eull},
      {"labels(3)", 1, 0x372472666d2ce57cull},
      {"labels(3)", 7, 0x0e262853d839cd64ull},
  };
  for (const auto& b : kBefore) {
    EXPECT_EQ(fingerprint(Split(l, 7, b.spec, b.seed)), b.print) << b.spec << " seed " << b.seed;
  }
}

TEST(Partition, SpecsParseAndPrintCanonically) {
  for (const char* bad : {"dirichlet(-1)", "dirichlet()", "labels(x)", "labels(0)", "labels(2.5)",
                          "random", "iid(1)", "dirichlet(0.5,min=-1)", "dirichlet(0.5,size=3)",
                          "labels(2,assign=sorted)", "dirichlet(0.5,alpha=0.5)",
                          "dirichlet(min=10,balance=1)"}) {
    EXPECT_FALSE(PartitionSpec::Parse(bad).ok()) << bad;
  }
  EXPECT_NE(PartitionSpec::Parse("labels(2,assign=sorted)").status().message().find("deal, random"),
            std::string::npos);
  const std::pair<const char*, const char*> kCanonical[] = {
      {"iid", "iid"},
      {"dirichlet:0.3", "dirichlet(0.3)"},
      {"dirichlet(alpha=0.3)", "dirichlet(0.3)"},
      {"dirichlet(0.5, min=10, balance=1)", "dirichlet(0.5,min=10,balance=1)"},
      {"dirichlet(balance=1,alpha=2)", "dirichlet(2,balance=1)"},
      {"labels:2", "labels(2)"},
      {"labels(2,assign=deal)", "labels(2)"},
      {"labels(k=3, assign=random)", "labels(3,assign=random)"},
  };
  for (const auto& [text, canonical] : kCanonical) {
    auto s = PartitionSpec::Parse(text);
    ASSERT_TRUE(s.ok()) << text << ": " << s.status();
    EXPECT_EQ(s->ToString(), canonical);
    auto again = PartitionSpec::Parse(canonical);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->ToString(), canonical);
  }
}

}  // namespace
}  // namespace fedlgc::core
