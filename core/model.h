// The model zoo behind a torch-free facade: a small CNN (215k parameters) and an MLP
// (159k) for 28x28 single-channel images, their weights as one flat float vector, local
// training with SGD, and evaluation. libtorch stays inside model.cc; libtorch exceptions
// are caught there and returned as statuses.
#ifndef FEDLGC_CORE_MODEL_H_
#define FEDLGC_CORE_MODEL_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/layout.h"
#include "core/dataset.h"

namespace fedlgc::core {

struct TrainOptions {
  int epochs = 1;  // passes over the shard (ignored when steps > 0)
  int steps = 0;   // mini-batch steps, when > 0
  float lr = 0.05f;
  float momentum = 0.9f;
  int batch_size = 32;
  uint64_t seed = 0;  // shuffling order
};

struct TrainResult {
  double mean_loss = 0;     // over all steps
  double running_loss = 0;  // mean of the last 10 batches
  int64_t steps = 0;
  double seconds = 0;
};

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
  size_t examples = 0;
};

// Not thread-safe; one per trainer thread.
class Model {
 public:
  // `name`: "cnn" or "mlp". Weights are initialised from `seed` (same seed, same weights,
  // on any device). `device`: "cpu", "cuda", "cuda:N", or "auto" (CUDA when the libtorch in
  // use has it and a GPU is visible, else the CPU); an unavailable device is an error.
  static absl::StatusOr<std::unique_ptr<Model>> Create(const std::string& name, uint64_t seed,
                                                       const std::string& device = "cpu");
  virtual ~Model() = default;

  virtual const std::string& name() const = 0;
  virtual std::string device() const = 0;  // where it trains, e.g. "cpu" or "cuda:0"
  virtual size_t dim() const = 0;
  // Its parameters in flat order: names as libtorch gives them ("conv1.weight") and shapes.
  virtual const codecs::ModelLayout& layout() const = 0;
  virtual std::vector<float> GetFlat() const = 0;
  virtual absl::Status SetFlat(std::span<const float> flat) = 0;

  // Trains on data[indices] starting from the current weights.
  virtual absl::StatusOr<TrainResult> Train(const Dataset& data, std::span<const uint32_t> indices,
                                            const TrainOptions& opts) = 0;
  // Loss and accuracy over the first `limit` examples (0 = all).
  virtual absl::StatusOr<EvalResult> Evaluate(const Dataset& data, size_t limit = 0) = 0;
};

// The layout of the model `name` (builds it on the CPU; an unknown name is an error).
absl::StatusOr<codecs::ModelLayout> ModelLayoutOf(const std::string& name);

// True when the libtorch in use was built with CUDA and sees a GPU.
bool CudaAvailable();

// Intra-op threads for libtorch in this process (libtorch defaults to 1 here).
void SetTorchThreads(int n);

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_MODEL_H_
