// Image classification data in memory: Fashion-MNIST read straight from Debian's
// gzip-compressed IDX files (dataset-fashion-mnist), or synthetic data generated from a
// seed for hermetic tests. Images are float32 in [0, 1], row-major [n, rows * cols].
#ifndef FEDLGC_CORE_DATASET_H_
#define FEDLGC_CORE_DATASET_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::core {

struct Dataset {
  size_t rows = 28;
  size_t cols = 28;
  size_t classes = 10;
  std::vector<float> images;    // size() * rows * cols
  std::vector<uint8_t> labels;  // size()

  size_t size() const { return labels.size(); }
  size_t pixels() const { return rows * cols; }
  std::span<const float> image(size_t i) const {
    return std::span<const float>(images).subspan(i * pixels(), pixels());
  }
};

// Where Debian's package puts Fashion-MNIST.
inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte(.gz) from `dir` (gzip or plain).
// `limit` > 0 keeps only the first `limit` examples.
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, bool train, size_t limit = 0);

// A learnable synthetic task of the same shape: each class is a fixed random 28x28
// pattern; an example is its class pattern plus Gaussian noise, clipped to [0, 1].
Dataset SyntheticImages(size_t n, uint64_t seed, float noise = 0.35f);

// "fashion-mnist" (from `dir`; `limit` > 0 keeps the first examples) or "synthetic:N"
// (N examples; the test split uses another seed than the train split).
absl::StatusOr<Dataset> LoadNamedDataset(const std::string& name, const std::string& dir,
                                         bool train, size_t limit = 0);

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_DATASET_H_
