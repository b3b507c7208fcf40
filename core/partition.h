// Splitting a dataset across clients: IID, Dirichlet(alpha) label skew (Hsu et al. 2019),
// or k labels per client (McMahan et al. 2017's pathological non-IID). Deterministic for
// a seed, so every process of a federation computes the same shards.
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
  Kind kind = Kind::kIid;
  double alpha = 0.5;  // Dirichlet concentration
  int labels = 2;      // labels per client

  // "iid", "dirichlet(0.5)" / "dirichlet:0.5", "labels(2)" / "labels:2".
  static absl::StatusOr<PartitionSpec> Parse(const std::string& text);
  std::string ToString() const;
};

// Example indices of each of `clients` shards (each sorted). `labels` holds the class in
// [0, classes) of each of the `n` examples, or is empty for a data set without classes
// (float targets), which only kIid splits. Every example goes to at most one client; IID
// and Dirichlet use every example.
std::vector<std::vector<uint32_t>> Partition(std::span<const int32_t> labels, size_t n,
                                             int classes, int clients, const PartitionSpec& spec,
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
