// Supervised data in memory: n examples of one shape as float32, each with a class label or
// float targets. Read from Debian's Fashion-MNIST (gzip-compressed IDX files), generated
// from a seed (synthetic:N, for hermetic tests), or from the files people keep their data
// in: NumPy archives (npz:PATH), CSV tables (csv:PATH) and folders of images
// (images:DIR). Every loader refuses what a model could not train on (a value that is not
// finite, a negative label, arrays of different lengths, a truncated file) with one
// message that names the file and what is wrong.
#ifndef FEDLGC_CORE_DATASET_H_
#define FEDLGC_CORE_DATASET_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::core {

struct Dataset {
  std::string source;                     // what it was read from, for messages
  std::vector<int64_t> shape{1, 28, 28};  // of one example
  std::vector<float> x;                   // size() * example_size(), row-major
  // Integer inputs (token ids; DataOptions::inputs): the values in `ids` instead of `x`
  // (which is then empty), reaching the model as int64 tensors.
  bool integer_inputs = false;
  std::vector<int64_t> ids;
  // Classification: classes > 0 and one label in [0, classes) per example (classes is
  // the largest label + 1). Regression: classes == 0 and target_size() floats per example.
  uint32_t classes = 0;
  std::vector<int32_t> labels;
  std::vector<int64_t> target_shape;  // of one example's targets; {} is one float
  std::vector<float> targets;
  size_t n = 0;

  size_t size() const { return n; }
  bool classification() const { return classes > 0; }
  size_t example_size() const;
  size_t target_size() const;
  std::span<const float> example(size_t i) const {
    return std::span<const float>(x).subspan(i * example_size(), example_size());
  }
  // "[1, 28, 28]"
  static std::string ShapeText(const std::vector<int64_t>& shape);
};

// Where Debian's package puts Fashion-MNIST.
inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// What a process reads its data from (the --data, --label-column and --targets flags).
struct DataOptions {
  // fashion-mnist | synthetic:N | npz:PATH | csv:PATH | images:DIR
  std::string spec = "fashion-mnist";
  std::string fashion_dir = kFashionMnistDir;
  // csv: the column that holds the label; the other columns are the features.
  std::string label_column = "label";
  // auto: integer labels (an integer dtype, or a CSV column of whole numbers) are classes
  // and anything else float targets; classes or values forces one (values turns integer
  // labels into float targets; classes refuses a label that is not a whole number).
  std::string targets = "auto";
  // How features reach the model: auto (an npz's integer x other than uint8 as integers,
  // everything else as floats), float, or ids (integers: token ids for a model with an
  // embedding first; a value that is not a whole number is refused).
  std::string inputs = "auto";

  // The spec's form and the choices (not the file: LoadDataset reads it).
  absl::Status Validate() const;
  // The spec names a file or folder of the user's (npz, csv, images).
  bool IsFile() const;
};

// The training (`train`) or test split. fashion-mnist and synthetic:N have both; an npz
// archive holds x and y, or x_train/y_train and x_test/y_test (Keras's layout) of which
// the split's pair is read; a csv file or an image folder is one split. `limit` > 0 keeps
// the first `limit` examples (of an image folder, its classes in turn).
absl::StatusOr<Dataset> LoadDataset(const DataOptions& options, bool train, size_t limit = 0);

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte(.gz) from `dir` (gzip or plain).
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, bool train, size_t limit = 0);

// A learnable synthetic task of Fashion-MNIST's shape: each class is a fixed random 28x28
// pattern; an example is its class pattern plus Gaussian noise, clipped to [0, 1].
Dataset SyntheticImages(size_t n, uint64_t seed, float noise = 0.35f);

// The arrays x (features) and y (labels or targets) of one split as a Dataset: x of
// float16/32/64 (as they are), uint8 (images: divided by 255) or another integer dtype
// (token ids, kept as integers; `inputs` as DataOptions::inputs), shape (n, ...); y of an
// integer or float dtype, shape (n,) or (n, ...). `what` names them in errors.
struct NpyArray;
absl::StatusOr<Dataset> DatasetFromArrays(const NpyArray& x, const NpyArray& y,
                                          const std::string& targets, const std::string& what,
                                          const std::string& inputs = "auto");

// The examples at `indices` (with their labels or targets), in that order: a client's
// held-out share of its shard.
Dataset Subset(const Dataset& d, std::span<const uint32_t> indices);

// Checks what a loader promises (finite values, labels in range, sizes that agree).
absl::Status CheckDataset(const Dataset& d);

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_DATASET_H_
