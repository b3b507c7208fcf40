// The model behind a torch-free facade: any TorchScript module saved with torch.jit.save
// (scripted or traced in Python), or one of the two built-in networks for 28x28
// single-channel images (a small CNN, 215k parameters, and an MLP, 159k). Its weights are
// one flat float vector (the parameters in named_parameters() order, then, when the job
// averages buffers, its floating-point buffers in named_buffers() order); it trains
// locally with SGD or Adam and evaluates on a Dataset. Frozen parameters (requires_grad
// false in the module, or named by ModelOptions::freeze) and personal ones
// (ModelOptions::local_params) are not in the flat vector: the first stay as the model's
// file or seed made them, the second are each client's own (GetLocalTensors). libtorch stays inside
// model.cc; libtorch exceptions are caught there and returned as statuses.
#ifndef FEDLGC_CORE_MODEL_H_
#define FEDLGC_CORE_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/layout.h"
#include "core/dataset.h"
#include "core/npz.h"

namespace fedlgc::core {

// Which model, and the job's rules for it.
struct ModelOptions {
  // "cnn", "mlp", or the path of a TorchScript file (torch.jit.save). A module's initial
  // weights are the file's; the built-ins are initialised from a seed.
  std::string model = "cnn";
  // BatchNorm statistics and other floating-point buffers: "average" sends them with the
  // update (they are coordinates of the flat vector and are averaged like the weights);
  // "local" keeps each client's own (FedBN), and the coordinator evaluates with batch
  // statistics. Integer buffers (num_batches_tracked) always stay local.
  std::string buffers = "average";
  // "auto": the module's own loss(output, target) method when it has one, else cross
  // entropy for class labels and mean squared error for float targets; "cross_entropy"
  // or "mse" choose (a module's loss method still comes first).
  std::string loss = "auto";
  // Regular expressions (ECMAScript, matched anywhere in a name; "" for none) over the
  // parameters' names: `freeze` names parameters that do not train, as requires_grad=False
  // in a module does (the built-ins' way to freeze); `local_params` names personal ones,
  // which train on each client and stay there (FedPer/FedRep heads). Neither is in the flat
  // vector. A name that matches both is an error.
  std::string freeze;
  std::string local_params;

  absl::Status Validate() const;
  bool IsFile() const { return model != "cnn" && model != "mlp"; }
};

struct TrainOptions {
  int epochs = 1;  // passes over the shard (ignored when steps > 0)
  int steps = 0;   // mini-batch steps, when > 0
  float lr = 0.05f;  // the round's; an optimizer spec that names lr overrides it
  float momentum = 0.9f;
  int batch_size = 32;
  uint64_t seed = 0;  // shuffling order
  // "" (SGD with lr and momentum above), or a spec (core/optimizer.h):
  // sgd(lr=..,momentum=..,weight_decay=..,nesterov=0|1) or
  // adam(lr=..,beta1=..,beta2=..,eps=..,weight_decay=..). A fresh optimizer each call.
  std::string optimizer;
  // FedProx (Li et al. 2020): the local objective adds (prox_mu / 2) ||w - w0||^2 over the
  // trainable parameters, w0 their values when Train begins; 0: plain local training.
  double prox_mu = 0;
  // SCAFFOLD (Karimireddy et al. 2020): after each optimizer step the trainable parameters
  // move by -lr x correction (c - c_i, outside the optimizer's momentum), lr the step's
  // learning rate. Flat, of the model's dimension (the coordinates of buffers are not
  // read); empty: none. Must outlive the call.
  std::span<const float> correction;
};

struct TrainResult {
  double mean_loss = 0;     // over all steps
  double running_loss = 0;  // mean of the last 10 batches
  int64_t steps = 0;
  double seconds = 0;
  double lr = 0;  // the learning rate the steps took (the optimizer spec's, else the round's)
};

struct EvalResult {
  double loss = 0;
  double accuracy = 0;  // NaN for float targets
  size_t examples = 0;
  // Class labels: the examples and the correct answers of each class (index = label);
  // empty for float targets.
  std::vector<uint64_t> class_examples, class_correct;
};

// Batch normalisation's statistics re-estimated for the weights a model holds
// (Model::ReestimateStatistics).
struct StatisticsOptions {
  size_t max_batches = 100;
  size_t batch_size = 64;
};

struct Statistics {
  uint64_t examples = 0;  // passed forward
  uint32_t batches = 0;
  // Per statistics pair in flat order (a running_mean and a running_var of one module), its
  // channels one after another: the mean over the batches of each batch's per-channel mean
  // and unbiased variance, what BatchNorm's cumulative average (momentum None) holds after
  // those batches. Raw values, not the flat vector's scale-free form.
  std::vector<float> mean, var;
  // Pairs whose module does not update them as BatchNorm does (a module of its own with
  // buffers of those names): their values are zeros here and the model keeps its own.
  std::vector<uint32_t> skipped;
};

// The parameters that are not in the flat vector, by name (as named_parameters() gives
// them) and with their values counted.
struct ParameterGroups {
  std::vector<std::string> frozen;  // requires_grad false, or ModelOptions::freeze
  std::vector<std::string> local;   // ModelOptions::local_params
  uint64_t frozen_values = 0, local_values = 0;
};

// Not thread-safe; one per trainer thread.
class Model {
 public:
  // A built-in's weights are initialised from `seed` (same seed, same weights, on any
  // device); a module's are its file's. `device`: "cpu", "cuda", "cuda:N", or "auto" (CUDA
  // when the libtorch in use has it and a GPU is visible, else the CPU); an unavailable
  // device is an error. A file that is not TorchScript is INVALID_ARGUMENT naming it.
  static absl::StatusOr<std::unique_ptr<Model>> Create(const ModelOptions& options, uint64_t seed,
                                                       const std::string& device = "cpu");
  // A built-in by name ("cnn", "mlp") or a file with the default options.
  static absl::StatusOr<std::unique_ptr<Model>> Create(const std::string& name, uint64_t seed,
                                                       const std::string& device = "cpu");
  virtual ~Model() = default;

  // "cnn", "mlp", or the file's path.
  virtual const std::string& name() const = 0;
  virtual std::string device() const = 0;  // where it trains, e.g. "cpu" or "cuda:0"
  virtual size_t dim() const = 0;
  // Its parameters in flat order: names as libtorch gives them ("conv1.weight") and shapes.
  virtual const codecs::ModelLayout& layout() const = 0;
  virtual std::vector<float> GetFlat() const = 0;
  virtual absl::Status SetFlat(std::span<const float> flat) = 0;

  // Whether the model takes `data`: one forward pass on its first examples (shape, output
  // size against the labels or targets, the loss), and every label within the output's
  // classes. The error names the model and the data and says what does not fit.
  virtual absl::Status CheckFits(const Dataset& data) = 0;

  // Where each buffer tensor of the flat vector begins (buffers "average"; empty
  // otherwise). Statistics such as a running variance live on another scale than the
  // weights: codecs restart their blocks there (EncodeOptions::cuts), so that no bucket's
  // scale spans both (a 4-bit bucket scaled by a variance's change would wipe out the
  // weights beside it).
  virtual std::vector<uint64_t> ScaleCuts() const = 0;

  // Frozen and personal parameters (neither travels).
  virtual const ParameterGroups& parameter_groups() const = 0;

  // What a client keeps to itself, to persist it between runs: its personal parameters (in
  // named_parameters() order), then, under buffers "local", its floating-point buffers (in
  // named_buffers() order), one flat float vector; empty when there are none.
  virtual std::vector<float> GetLocalTensors() const = 0;
  virtual absl::Status SetLocalTensors(std::span<const float> flat) = 0;

  // Trains on data[indices] starting from the current weights.
  virtual absl::StatusOr<TrainResult> Train(const Dataset& data, std::span<const uint32_t> indices,
                                            const TrainOptions& opts) = 0;
  // Loss and accuracy over the first `limit` examples (0 = all).
  virtual absl::StatusOr<EvalResult> Evaluate(const Dataset& data, size_t limit = 0) = 0;
  // Batch normalisation's running statistics re-estimated for the current weights: forward
  // passes over data[indices] in order (the caller shuffles), in batches of
  // opts.batch_size (at most opts.max_batches; a last batch of one example is left out),
  // without gradients, the network in eval mode but for the modules that own a statistics
  // pair. Whatever momentum those modules have, the result is the batches' mean
  // (Statistics), and the model's statistics are set to it; its weights and its
  // num_batches_tracked stay as they were, and it is left in eval mode. Nothing for a
  // model without statistics in its flat vector (built-ins; buffers "local").
  virtual absl::StatusOr<Statistics> ReestimateStatistics(const Dataset& data,
                                                          std::span<const uint32_t> indices,
                                                          const StatisticsOptions& opts) = 0;

  // The model with its current weights as the bytes of a TorchScript file that plain
  // PyTorch loads (torch.jit.load) with nothing of fedlgc installed: a module's own file
  // with these weights and buffers (batch normalisation statistics in their own form, not
  // the flat vector's), a built-in as a scripted module of the same parameter names and
  // forward. On the CPU, in eval mode. `extra_files` go into the archive
  // (torch.jit.load(path, _extra_files={name: ""}) reads them back).
  virtual absl::StatusOr<std::string> TorchScriptBytes(
      const std::map<std::string, std::string>& extra_files) const = 0;
  // Every parameter and buffer by the name state_dict() gives it (integer buffers such as
  // num_batches_tracked included), as the module holds it: its dtype (bfloat16 as
  // float32), on the CPU.
  virtual absl::StatusOr<NpzArrays> StateArrays() const = 0;
};

// The values of `model`'s frozen parameters (parameter_groups().frozen), in that order, each
// flattened as the module holds it.
absl::StatusOr<std::vector<float>> FrozenValues(const Model& model);

// The layout of the model (builds it on the CPU; an unknown name is an error).
absl::StatusOr<codecs::ModelLayout> ModelLayoutOf(const ModelOptions& options);
absl::StatusOr<codecs::ModelLayout> ModelLayoutOf(const std::string& name);

// True when the libtorch in use was built with CUDA and sees a GPU.
bool CudaAvailable();

// Intra-op threads for libtorch in this process (libtorch defaults to 1 here).
void SetTorchThreads(int n);

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_MODEL_H_
