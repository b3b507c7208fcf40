// libtorch implementation of the model zoo. The only file of core/ that includes torch.
#include "core/model.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <numeric>
#include <optional>
#include <random>

#include "codecs/str.h"

namespace fedlgc::core {
namespace {

struct CnnImpl : torch::nn::Module {
  CnnImpl()
      : conv1(register_module("conv1",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 5).padding(2)))),
        conv2(register_module("conv2",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 5).padding(2)))),
        fc1(register_module("fc1", torch::nn::Linear(32 * 7 * 7, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    x = torch::relu(fc1->forward(x.flatten(1)));
    return fc2->forward(x);
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(28 * 28, 200))),
        fc2(register_module("fc2", torch::nn::Linear(200, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    return fc2->forward(torch::relu(fc1->forward(x.flatten(1))));
  }
  torch::nn::Linear fc1, fc2;
};

template <typename Net>
class TorchModel final : public Model {
 public:
  TorchModel(std::string name, uint64_t seed, torch::Device device)
      : name_(std::move(name)), device_(device) {
    torch::manual_seed(seed);
    net_ = std::make_shared<Net>();  // initialised on the CPU: the same weights everywhere
    net_->to(device_);
    std::vector<std::pair<std::string, std::vector<uint64_t>>> tensors;
    for (const auto& item : net_->named_parameters()) {
      dim_ += static_cast<size_t>(item.value().numel());
      std::vector<uint64_t> shape;
      for (int64_t e : item.value().sizes()) shape.push_back(static_cast<uint64_t>(e));
      tensors.emplace_back(item.key(), std::move(shape));
    }
    // Parameter names and shapes of the zoo's nets are always a valid layout.
    layout_ = codecs::ModelLayout::Create(std::move(tensors)).value();
  }

  const std::string& name() const override { return name_; }
  std::string device() const override { return device_.str(); }
  size_t dim() const override { return dim_; }
  const codecs::ModelLayout& layout() const override { return layout_; }

  std::vector<float> GetFlat() const override {
    std::vector<float> flat(dim_);
    size_t off = 0;
    torch::NoGradGuard guard;
    for (const torch::Tensor& p : net_->parameters()) {
      torch::Tensor c = p.detach().to(torch::kCPU).contiguous();
      std::memcpy(flat.data() + off, c.data_ptr<float>(), c.numel() * sizeof(float));
      off += static_cast<size_t>(c.numel());
    }
    return flat;
  }

  absl::Status SetFlat(std::span<const float> flat) override {
    if (flat.size() != dim_) {
      return absl::InvalidArgumentError(
          StrCat(name_, ": flat weights of ", flat.size(), " values, the model has ", dim_));
    }
    size_t off = 0;
    torch::NoGradGuard guard;
    for (torch::Tensor& p : net_->parameters()) {
      torch::Tensor src =
          torch::from_blob(const_cast<float*>(flat.data() + off), p.sizes(), torch::kFloat32);
      p.copy_(src);
      off += static_cast<size_t>(p.numel());
    }
    return absl::OkStatus();
  }

  absl::StatusOr<TrainResult> Train(const Dataset& data, std::span<const uint32_t> indices,
                                    const TrainOptions& opts) override {
    try {
      return TrainImpl(data, indices, opts);
    } catch (const std::exception& e) {
      return absl::InternalError(StrCat(name_, ": training failed: ", e.what()));
    }
  }

  absl::StatusOr<EvalResult> Evaluate(const Dataset& data, size_t limit) override {
    try {
      return EvalImpl(data, limit);
    } catch (const std::exception& e) {
      return absl::InternalError(StrCat(name_, ": evaluation failed: ", e.what()));
    }
  }

 private:
  // Copies the examples at idx[begin, end) into a [b, 1, rows, cols] batch on the device.
  static std::pair<torch::Tensor, torch::Tensor> Batch(const Dataset& data,
                                                       std::span<const uint32_t> idx,
                                                       const torch::Device& device) {
    auto x = torch::empty({static_cast<int64_t>(idx.size()), 1, static_cast<int64_t>(data.rows),
                           static_cast<int64_t>(data.cols)},
                          torch::kFloat32);
    auto y = torch::empty({static_cast<int64_t>(idx.size())}, torch::kInt64);
    float* xp = x.data_ptr<float>();
    int64_t* yp = y.data_ptr<int64_t>();
    for (size_t i = 0; i < idx.size(); ++i) {
      const auto img = data.image(idx[i]);
      std::memcpy(xp + i * data.pixels(), img.data(), data.pixels() * sizeof(float));
      yp[i] = data.labels[idx[i]];
    }
    if (device.is_cpu()) return {x, y};
    return {x.to(device), y.to(device)};
  }

  TrainResult TrainImpl(const Dataset& data, std::span<const uint32_t> indices,
                        const TrainOptions& opts) {
    const auto start = std::chrono::steady_clock::now();
    net_->train();
    torch::optim::SGD sgd(net_->parameters(),
                          torch::optim::SGDOptions(opts.lr).momentum(opts.momentum));
    std::vector<uint32_t> order(indices.begin(), indices.end());
    std::mt19937_64 rng(opts.seed);
    TrainResult r;
    std::deque<double> last;
    double total = 0;
    const size_t bs = static_cast<size_t>(std::max(1, opts.batch_size));
    const int64_t max_steps = opts.steps > 0 ? opts.steps : std::numeric_limits<int64_t>::max();
    const int epochs = opts.steps > 0 ? std::numeric_limits<int>::max() : std::max(1, opts.epochs);
    for (int e = 0; e < epochs && r.steps < max_steps && !order.empty(); ++e) {
      std::shuffle(order.begin(), order.end(), rng);
      for (size_t b = 0; b < order.size() && r.steps < max_steps; b += bs) {
        auto [x, y] =
            Batch(data, std::span<const uint32_t>(order).subspan(b, std::min(bs, order.size() - b)),
                  device_);
        sgd.zero_grad();
        torch::Tensor logits = net_->forward(x);
        torch::Tensor loss = torch::nn::functional::cross_entropy(logits, y);
        loss.backward();
        sgd.step();
        const double l = loss.item<double>();
        total += l;
        last.push_back(l);
        if (last.size() > 10) last.pop_front();
        ++r.steps;
      }
    }
    r.mean_loss = r.steps ? total / static_cast<double>(r.steps) : 0;
    r.running_loss =
        last.empty() ? 0 : std::accumulate(last.begin(), last.end(), 0.0) / last.size();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  }

  EvalResult EvalImpl(const Dataset& data, size_t limit) {
    torch::NoGradGuard guard;
    net_->eval();
    const size_t n = limit > 0 ? std::min(limit, data.size()) : data.size();
    std::vector<uint32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0u);
    EvalResult r;
    double loss = 0;
    size_t correct = 0;
    for (size_t b = 0; b < n; b += 1000) {
      auto [x, y] = Batch(
          data, std::span<const uint32_t>(idx).subspan(b, std::min<size_t>(1000, n - b)), device_);
      torch::Tensor logits = net_->forward(x);
      loss +=
          torch::nn::functional::cross_entropy(
              logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
              .item<double>();
      correct += static_cast<size_t>(logits.argmax(1).eq(y).sum().item<int64_t>());
    }
    r.examples = n;
    r.loss = n ? loss / n : 0;
    r.accuracy = n ? static_cast<double>(correct) / n : 0;
    return r;
  }

  std::string name_;
  torch::Device device_;
  std::shared_ptr<Net> net_;
  size_t dim_ = 0;
  codecs::ModelLayout layout_;
};

}  // namespace

bool CudaAvailable() { return torch::cuda::is_available(); }

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const std::string& name, uint64_t seed,
                                                     const std::string& device) {
  try {
    std::optional<torch::Device> dev;
    if (device == "auto") {
      dev = torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device("cpu");
    } else if (device == "cpu" || device.rfind("cuda", 0) == 0) {
      dev = torch::Device(device);
      if (dev->is_cuda() && !torch::cuda::is_available()) {
        return absl::FailedPreconditionError(
            StrCat("device ", device,
                   ": this libtorch has no CUDA or no GPU is visible (use --device=cpu or auto)"));
      }
      if (dev->is_cuda() && dev->has_index() &&
          dev->index() >= static_cast<int>(torch::cuda::device_count())) {
        return absl::FailedPreconditionError(
            StrCat("device ", device, ": only ", torch::cuda::device_count(), " GPUs"));
      }
    } else {
      return absl::InvalidArgumentError(
          StrCat("unknown device '", device, "' (known: cpu, cuda, cuda:N, auto)"));
    }
    if (name == "cnn") return std::unique_ptr<Model>(new TorchModel<CnnImpl>(name, seed, *dev));
    if (name == "mlp") return std::unique_ptr<Model>(new TorchModel<MlpImpl>(name, seed, *dev));
  } catch (const std::exception& e) {
    return absl::InternalError(StrCat("model ", name, ": ", e.what()));
  }
  return absl::InvalidArgumentError(StrCat("unknown model '", name, "' (known: cnn, mlp)"));
}

absl::StatusOr<codecs::ModelLayout> ModelLayoutOf(const std::string& name) {
  auto model = Model::Create(name, 0, "cpu");
  if (!model.ok()) return model.status();
  return (*model)->layout();
}

void SetTorchThreads(int n) { torch::set_num_threads(std::max(1, n)); }

}  // namespace fedlgc::core
