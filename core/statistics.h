// Batch normalisation's statistics in a model's flat vector: where they are, how the
// clients' estimates of them pool, and how the pooled values go back into the vector in
// its scale-free form (core/model.h). No libtorch: the coordinator pools what clients
// estimate with Model::ReestimateStatistics.
#ifndef FEDLGC_CORE_STATISTICS_H_
#define FEDLGC_CORE_STATISTICS_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "codecs/layout.h"

namespace fedlgc::core {

// The flat vector holds a variance v as log(v + eps) and its mean m as m / sqrt(v + eps)
// (python/fedlgc/_flat.py does the same).
inline constexpr float kStatisticsEps = 1e-5f;

// A running_mean and the running_var of the same module, of the same size.
struct StatisticsPair {
  std::string module;                // "layer1.0.bn1"; "" for the root
  uint64_t mean_at = 0, var_at = 0;  // their offsets in the flat vector
  uint64_t channels = 0;
};

// Every tensor whose name ends in "running_mean" with the one of that name ending in
// "running_var", of the same size, in the flat order of the means: the pairs whose values
// a model's flat vector holds scale-free and Model::ReestimateStatistics estimates, in its
// order. `module` is the name up to its last dot.
std::vector<StatisticsPair> StatisticsPairs(const codecs::ModelLayout& layout);
uint64_t StatisticsChannels(std::span<const StatisticsPair> pairs);

// One client's estimate (Statistics::mean and var, every pair's channels one after
// another, raw) and the weight it pools with (its examples, capped as a round caps them).
struct StatisticsEstimate {
  double weight = 0;
  std::span<const float> mean, var;
};

// The pooled statistics of every channel. By weight: mean = sum w m / sum w and
// var = sum w (v + (m - mean)^2) / sum w, the law of total variance: what the union of the
// clients' data has, which a test set drawn from all of it needs (an average of the
// variances alone would miss how the clients' means differ). With `median`: each
// channel's median of the means and of the variances, which one client cannot move
// beyond the others' values. INVALID_ARGUMENT for no estimate, sizes that differ, a
// value that is not finite, a negative variance or a weight that is not positive.
absl::Status PoolStatistics(std::span<const StatisticsEstimate> estimates, bool median,
                            std::vector<float>* mean, std::vector<float>* var);

// Writes raw `mean` and `var` (every pair's channels one after another) into `flat` in
// its scale-free form, but for the pairs listed in `skipped`, which keep their values.
absl::Status WriteStatistics(std::span<const StatisticsPair> pairs, std::span<const float> mean,
                             std::span<const float> var, std::span<const uint32_t> skipped,
                             std::span<float> flat);

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_STATISTICS_H_
