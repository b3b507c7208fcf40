// Bounded influence of one participant (docs/robustness.md): norm clipping against the
// round's own norms, and the aggregators a job may pick with --aggregator.
//
//   mean            the weighted mean (partial updates count for the ranges that arrived)
//   streaming       the weighted mean, summed as chunks arrive: O(dim) memory
//   median          coordinate-wise median (Yin et al. 2018)
//   trimmed_mean    coordinate-wise mean of what is left after cutting `trim` of the values
//                   at each end (Yin et al. 2018)
//   krum            the `select` updates with the smallest Krum scores (Blanchard et al.
//                   2017; select=1 is Krum, more is multi-Krum), weighted mean of those
//   bulyan          Krum picks n - 2f updates one by one, then per coordinate the mean of
//                   the n - 4f values closest to their median (El Mhamdi et al. 2018)
//
// Clipping comes first for every aggregator: an update whose L2 norm exceeds `clip` times
// the lower median of the round's norms is scaled down to that bound. Only complete
// updates enter median, trimmed_mean, krum and bulyan; mean takes partial ones.
//
// Pure functions of their inputs; no locks, no gRPC.
#ifndef FEDLGC_COORDINATOR_ROBUST_H_
#define FEDLGC_COORDINATOR_ROBUST_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::coordinator {

enum class AggregatorKind { kMean, kStreaming, kMedian, kTrimmedMean, kKrum, kBulyan };

struct AggregatorOptions {
  AggregatorKind kind = AggregatorKind::kMean;
  double trim = 0.1;     // trimmed_mean: share cut at each end, in [0, 0.5)
  uint32_t f = 1;        // krum, bulyan: the participants that may lie
  uint32_t select = 1;   // krum: updates averaged (1: Krum, more: multi-Krum)
  // Clip each update at clip x the lower median of the round's norms; 0: no clipping.
  double clip = 2;

  // "mean", "streaming", "median", "trimmed_mean(trim=0.2)", "krum(f=1,select=3)",
  // "bulyan(f=1)".
  static absl::StatusOr<AggregatorOptions> Parse(std::string_view spec, double clip);
  std::string Spec() const;
  // Holds every client's update until the round closes (all but streaming).
  bool buffered() const { return kind != AggregatorKind::kStreaming; }
  // Takes partial updates (mean and streaming); the others need complete ones.
  bool takes_partial() const {
    return kind == AggregatorKind::kMean || kind == AggregatorKind::kStreaming;
  }
  // The fewest complete updates it needs; with fewer a round falls back to the median.
  size_t MinUpdates() const;
};

using Range = std::pair<uint64_t, uint64_t>;  // [begin, end)

// One client's update as the aggregator sees it.
struct Contribution {
  std::string client;
  double weight = 0;               // its weight in the round (capped sample count)
  std::span<const float> values;   // the whole dimension, 0 where nothing arrived
  std::span<const Range> ranges;   // the coordinates that arrived, sorted, disjoint
  bool complete = false;           // ranges cover the dimension
  // A compact contribution (values empty): writes the whole dimension into `dense` when
  // the aggregator needs it, one contribution at a time. Only the means take these.
  std::function<absl::Status(std::span<float> dense)> fill;
  double norm = -1;  // of the values; < 0: computed from `values`
};

double L2Norm(std::span<const float> v);
// The lower median: the ceil(n / 2)-th smallest (of two, the smaller). 0 when empty.
double LowerMedian(std::vector<double> v);

struct Clipping {
  double bound = 0;  // 0: none
  std::map<std::string, double> norms;    // before clipping
  std::map<std::string, double> factors;  // min(1, bound / norm); 1 without a bound
  int clipped = 0;                        // updates scaled down
};
// Norms of the contributions and their factors against `multiplier` x the lower median
// (multiplier 0: none).
Clipping ClipByMedian(std::span<const Contribution> updates, double multiplier);
// The same against a fixed `bound` (0: none): differential privacy's, which must not
// depend on the updates.
Clipping ClipAt(std::span<const Contribution> updates, double bound);

struct Aggregated {
  std::vector<float> values;    // the aggregate update
  std::set<std::string> used;   // clients whose update shaped it
  // Clients whose update the aggregator weighed, picked or not: what receipts count. An
  // update Krum or Bulyan leaves out is discarded, not handed back (the client would carry
  // it in its residual, and grow further from the others each round); a partial update a
  // robust aggregator cannot take is not considered, and comes back to its client.
  std::set<std::string> considered;
  std::string fallback;         // why it fell back to the median, if it did
};
// Aggregates the clipped contributions over `dim` coordinates. INVALID_ARGUMENT for a
// contribution of another size, or a compact one for an aggregator other than the means.
absl::StatusOr<Aggregated> AggregateUpdates(const AggregatorOptions& options,
                                            std::span<const Contribution> updates,
                                            const Clipping& clipping, uint64_t dim);

// The Krum score of each update (Blanchard et al. 2017): the sum of squared distances to
// its n - f - 2 nearest others. REQUIRES: n >= f + 3.
std::vector<double> KrumScores(const std::vector<std::vector<float>>& x, uint32_t f);

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_ROBUST_H_
