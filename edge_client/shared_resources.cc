// What the edge clients of one process share (see shared_resources.h).
#include "edge_client/shared_resources.h"

#include <utility>

#include "base/str.h"
#include "codecs/broadcast.h"
#include "core/partition.h"
#include "edge_client/options.h"

namespace fedlgc::edge_client {

absl::StatusOr<std::shared_ptr<const TrainingData>> DataCache::Get(const EdgeClientOptions& o) {
  const std::string key =
      StrCat(o.data, "\n", o.data_dir, "\n", o.label_column, "\n", o.targets, "\n", o.train_limit,
             "\n", o.partition, "\n", o.num_shards, "\n", o.partition_seed, "\n", o.inputs);
  // One loader at a time: clients that start together wait for the first one's copy
  // rather than each reading the files.
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = sets_.find(key); it != sets_.end()) return it->second;
  auto data = core::LoadDataset(o.data_options(), true, o.train_limit);
  if (!data.ok()) return data.status();
  auto spec = core::PartitionSpec::Parse(o.partition);
  if (!spec.ok()) return spec.status();
  if (absl::Status st = core::CheckPartition(*spec, data->classification(), data->source);
      !st.ok()) {
    return st;
  }
  auto set = std::make_shared<TrainingData>();
  auto shards = core::Partition(data->labels, data->size(), static_cast<int>(data->classes),
                                static_cast<int>(o.num_shards), *spec, o.partition_seed);
  if (!shards.ok()) return shards.status();
  set->shards = std::move(shards).value();
  set->data = std::move(data).value();
  sets_.emplace(key, set);
  return std::shared_ptr<const TrainingData>(std::move(set));
}

size_t DataCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sets_.size();
}

ModelPool::ModelPool(int slots) : slots_(static_cast<size_t>(slots < 1 ? 1 : slots)) {}

absl::StatusOr<std::string> ModelPool::ResolveDevice(const std::string& device) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = devices_.find(device); it != devices_.end()) return it->second;
  auto probe = core::Model::Create("mlp", 0, device);
  if (!probe.ok()) return probe.status();
  return devices_.emplace(device, (*probe)->device()).first->second;
}

absl::StatusOr<std::shared_ptr<const ModelInfo>> ModelPool::Prepare(
    const core::ModelOptions& options, const std::string& device, uint64_t seed) {
  if (options.IsFile()) seed = 0;  // a file's weights are its own
  const std::string key =
      StrCat(options.model, "\n", options.buffers, "\n", options.loss, "\n", options.freeze, "\n",
             options.local_params, "\n", device, "\n", seed);
  // Made under the lock, once: clients that join together wait for the first one's.
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = info_.find(key); it != info_.end()) return it->second;
  auto model = core::Model::Create(options, seed, device);
  if (!model.ok()) return model.status();
  ++made_;
  auto info = std::make_shared<ModelInfo>();
  info->key = key;
  info->options = options;
  info->device = device;
  info->seed = seed;
  info->dim = (*model)->dim();
  info->layout = (*model)->layout();
  info->scale_cuts = (*model)->ScaleCuts();
  info->initial_own = (*model)->GetLocalTensors();
  info->groups = (*model)->parameter_groups();
  auto frozen = core::FrozenValues(**model);
  if (!frozen.ok()) return frozen.status();
  info->initial_frozen = *std::move(frozen);
  if (options.IsFile()) {
    info->initial_flat = (*model)->GetFlat();
    info->initial_crc = codecs::ModelCrc(info->initial_flat);
  }
  info_.emplace(key, info);
  // The model made to learn this is the first training model, where a slot is empty.
  for (Slot& s : slots_) {
    if (!s.busy && s.model == nullptr) {
      s.key = key;
      s.model = std::move(model).value();
      break;
    }
  }
  return std::shared_ptr<const ModelInfo>(std::move(info));
}

absl::StatusOr<ModelPool::Lease> ModelPool::Acquire(const ModelInfo& info) {
  std::unique_lock<std::mutex> lock(mu_);
  size_t slot = slots_.size();
  freed_.wait(lock, [&] {
    // A free slot that holds this model, else any free slot (an empty one first).
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!slots_[i].busy && slots_[i].key == info.key) slot = i;
    }
    for (size_t i = 0; slot == slots_.size() && i < slots_.size(); ++i) {
      if (!slots_[i].busy && slots_[i].model == nullptr) slot = i;
    }
    for (size_t i = 0; slot == slots_.size() && i < slots_.size(); ++i) {
      if (!slots_[i].busy) slot = i;
    }
    return slot < slots_.size();
  });
  Slot& s = slots_[slot];
  s.busy = true;
  if (s.key != info.key || s.model == nullptr) {
    s.model.reset();
    s.key.clear();
    lock.unlock();  // a model takes a while to make; the other slots go on meanwhile
    auto model = core::Model::Create(info.options, info.seed, info.device);
    lock.lock();
    if (!model.ok()) {
      s.busy = false;
      freed_.notify_one();
      return model.status();
    }
    ++made_;
    s.model = std::move(model).value();
    s.key = info.key;
  }
  return Lease(this, slot, s.model.get());
}

void ModelPool::Release(size_t slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    slots_[slot].busy = false;
  }
  freed_.notify_one();
}

uint64_t ModelPool::models_made() const {
  std::lock_guard<std::mutex> lock(mu_);
  return made_;
}

ModelPool::Lease::Lease(Lease&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)), slot_(other.slot_), model_(other.model_) {}

ModelPool::Lease::~Lease() {
  if (pool_ != nullptr) pool_->Release(slot_);
}

}  // namespace fedlgc::edge_client
