// Splitting a dataset across clients: IID, Dirichlet(alpha) label skew (Hsu et al. 2019),
// or k labels per client (McMahan et al. 2017's pathological non-IID; Li et al. 2022's
// "#C=k" with assign=random). Deterministic for a seed, so every process of a federation
// computes the same shards.
#ifndef FEDLGC_CORE_PARTITION_H_
#define FEDLGC_CORE_PARTITION_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::core {

struct PartitionSpec {
  enum class Kind { kIid, kDirichlet, kLabels };
  // How kLabels gives classes to clients. kDeal: round-robin from a shuffled class order,
  // so every class has the same number of holders and every shard the same size. kRandom
  // (Li et al. 2022, Flower's niid_bench): client i gets class i mod classes, then distinct
  // classes drawn uniformly; a class is split evenly among however many drew it, so shard
  // sizes are skewed too.
  enum class Assign { kDeal, kRandom };
  Kind kind = Kind::kIid;
  double alpha = 0.5;  // Dirichlet concentration
  int labels = 2;      // labels per client
  // Dirichlet only. min_size: draw again (the whole split) until every client holds at
  // least this many examples. balance: while a class is split, a client that already holds
  // n / clients examples or more gets none of it (Li et al. 2022's cap).
  int min_size = 0;
  bool balance = false;
  Assign assign = Assign::kDeal;

  // "iid"; "dirichlet(0.5)", "dirichlet:0.5" or "dirichlet(alpha=0.5, min=10, balance=1)";
  // "labels(2)", "labels:2" or "labels(2, assign=random)".
  static absl::StatusOr<PartitionSpec> Parse(const std::string& text);
  // The canonical spec: Parse(ToString()) is this spec; defaults are left out.
  std::string ToString() const;
};

// Example indices of each of `clients` shards (each sorted). `labels` holds the class in
// [0, classes) of each of the `n` examples, or is empty for a data set without classes
// (float targets), which only kIid splits. Every example goes to at most one client; IID
// and Dirichlet use every example, and so does kLabels when every class has a holder.
// Fails only when a Dirichlet min_size cannot be met (min_size x clients > n, or no draw
// of many met it).
absl::StatusOr<std::vector<std::vector<uint32_t>>> Partition(std::span<const int32_t> labels,
                                                             size_t n, int classes, int clients,
                                                             const PartitionSpec& spec,
                                                             uint64_t seed);

// A shard split for federated evaluation: `held` (sorted) evaluates and never trains,
// `train` (in the shard's order) trains. ceil(fraction x n) examples are held out (at
// most n - 1), drawn by `seed`: the same for the C++ and the Python client of a shard.
struct HeldOutSplit {
  std::vector<uint32_t> train, held;
};
HeldOutSplit SplitHeldOut(std::span<const uint32_t> shard, double fraction, uint64_t seed);

// Whether `spec` can split a data set (`what` names it) with or without classes.
absl::Status CheckPartition(const PartitionSpec& spec, bool has_classes, const std::string& what);

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_PARTITION_H_
