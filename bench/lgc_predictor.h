// A learned predictor of an LGC follower's values on the support (the probe's design (b)):
// a small network of per-coordinate features (the leader's decoded value, the follower's
// own rebuild of the round before, where the coordinate sits in the model) trained at the
// coordinator on past rounds' rebuilds, in place of the leader's values alone. The only
// file of the probe that sees torch is lgc_predictor.cc.
#ifndef FEDLGC_BENCH_LGC_PREDICTOR_H_
#define FEDLGC_BENCH_LGC_PREDICTOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace fedlgc::bench {

class FollowerPredictor {
 public:
  static constexpr size_t kBuckets = 16;             // position of the coordinate, in 16ths
  static constexpr size_t kFeatures = 3 + kBuckets;  // p, |p|, q (each scaled by its RMS)

  FollowerPredictor();
  ~FollowerPredictor();

  // The features of a follower's coordinates: `p` the leader's decoded values on the
  // support, `q` the follower's own rebuild of the round before on it, `support` the
  // indices of `dim`. Row-major, kFeatures a coordinate.
  static std::vector<float> Features(std::span<const float> p, std::span<const float> q,
                                     std::span<const uint32_t> support, uint64_t dim);

  // One training example a coordinate: the follower's rebuild on the support, scaled by its
  // RMS. At most `limit` rows are kept, a uniform sample of all those added.
  void Add(std::span<const float> features, std::span<const float> rebuilt);
  size_t rows() const { return rows_; }

  // Adam over minibatches of the examples; the mean squared error before and after.
  std::pair<double, double> Train(int steps, uint64_t seed);

  std::vector<float> Predict(std::span<const float> features) const;

 private:
  struct Net;
  std::unique_ptr<Net> net_;
  std::vector<float> x_, y_;
  size_t rows_ = 0, seen_ = 0;
  static constexpr size_t kLimit = 1'500'000;
};

}  // namespace fedlgc::bench

#endif  // FEDLGC_BENCH_LGC_PREDICTOR_H_
