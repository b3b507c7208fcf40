// What the edge clients of one process share (fedlgc-edge --client-ids, client_host.h): one
// copy of each training set and its partition, a few models that train in turn, and one
// metrics registry. A client on its own gets resources of its own (one model, its data);
// the code path is the same.
//
// Why a pool of models rather than a model per client: between rounds a client's model
// holds nothing of its own (its weights come with each round, its optimizer is made fresh
// by every Train, its local buffers are kept by the client), so a hosted client needs a
// model only while it trains. The pool keeps `slots` models; a client leases one for its
// training and gives it back.
#ifndef FEDLGC_EDGE_CLIENT_SHARED_RESOURCES_H_
#define FEDLGC_EDGE_CLIENT_SHARED_RESOURCES_H_

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/layout.h"
#include "core/dataset.h"
#include "core/model.h"

namespace fedlgc::monitoring {
class Metrics;
}

namespace fedlgc::edge_client {

struct EdgeClientOptions;

// A training set and the split of it among the clients (one shard each).
struct TrainingData {
  core::Dataset data;
  std::vector<std::vector<uint32_t>> shards;
};

// Training sets by what they were read from and how they are split: clients of one
// process with the same data options share one copy. Thread-safe.
class DataCache {
 public:
  // The data and split of `options` (its data, label column, targets, train limit,
  // partition, shard count and seed), loaded on first use.
  absl::StatusOr<std::shared_ptr<const TrainingData>> Get(const EdgeClientOptions& options);
  // Distinct training sets held (for tests and the host's log).
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const TrainingData>> sets_;  // guarded by mu_
};

// What a client keeps of the job's model: everything but the model itself.
struct ModelInfo {
  std::string key;  // the model's file (or built-in), its rules (core::ModelOptions), device, seed
  core::ModelOptions options;
  std::string device;
  uint64_t seed = 0;  // a built-in's initial weights
  size_t dim = 0;
  codecs::ModelLayout layout;
  std::vector<uint64_t> scale_cuts;
  // What a client keeps to itself (core::Model::GetLocalTensors: personal parameters,
  // buffers under "local") as the model holds it, where a client without its own starts.
  std::vector<float> initial_own;
  core::ParameterGroups groups;  // frozen and personal parameters
  // The frozen parameters' values (in groups.frozen's order, flat): what a Python client's
  // module takes, since they never travel.
  std::vector<float> initial_frozen;
  // A TorchScript file's weights as the file holds them (the flat vector; empty for a
  // built-in) and their CRC32C (codecs::ModelCrc): a job's version 0 when the coordinator
  // names that CRC (JoinReply.initial_model_crc32c).
  std::vector<float> initial_flat;
  uint32_t initial_crc = 0;
};

// Models that train in turn. Thread-safe: Acquire blocks while every slot trains.
class ModelPool {
 public:
  explicit ModelPool(int slots);
  ModelPool(const ModelPool&) = delete;
  ModelPool& operator=(const ModelPool&) = delete;

  // `device` as a model would run on it ("auto" -> "cuda:0" or "cpu"); an unavailable
  // device is an error. Resolved once per name.
  absl::StatusOr<std::string> ResolveDevice(const std::string& device);

  // The model of `options` on `device` (resolved), made once: its layout, cuts and
  // initial buffers; a built-in's weights drawn from `seed` (the job's, JoinReply.init_seed,
  // so that its frozen parameters are the coordinator's). A file that is not TorchScript is
  // INVALID_ARGUMENT naming it.
  absl::StatusOr<std::shared_ptr<const ModelInfo>> Prepare(const core::ModelOptions& options,
                                                           const std::string& device,
                                                           uint64_t seed = 0);

  // A model of `info` that only the lease holder uses until the lease goes. Its weights
  // and buffers are whatever the last holder left: set them.
  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    core::Model& model() const { return *model_; }

   private:
    friend class ModelPool;
    Lease(ModelPool* pool, size_t slot, core::Model* model)
        : pool_(pool), slot_(slot), model_(model) {}
    ModelPool* pool_;
    size_t slot_;
    core::Model* model_;
  };
  absl::StatusOr<Lease> Acquire(const ModelInfo& info);

  int slots() const { return static_cast<int>(slots_.size()); }
  // Models made so far (a slot remade for another model counts again).
  uint64_t models_made() const;

 private:
  struct Slot {
    std::string key;
    std::unique_ptr<core::Model> model;
    bool busy = false;
  };
  void Release(size_t slot);

  mutable std::mutex mu_;
  std::condition_variable freed_;
  std::vector<Slot> slots_;                                       // guarded by mu_
  std::map<std::string, std::shared_ptr<const ModelInfo>> info_;  // guarded by mu_
  std::map<std::string, std::string> devices_;                    // guarded by mu_
  uint64_t made_ = 0;                                             // guarded by mu_
};

// What a client uses that may be shared; a null member is made for the client alone.
struct SharedResources {
  std::shared_ptr<monitoring::Metrics> metrics;
  std::shared_ptr<ModelPool> models;
  std::shared_ptr<DataCache> data;
};

}  // namespace fedlgc::edge_client

#endif  // FEDLGC_EDGE_CLIENT_SHARED_RESOURCES_H_
