// libtorch implementation of the model facade: the built-in networks and TorchScript
// modules behind one training loop. The only file of core/ that includes torch.
#include "core/model.h"

#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "base/str.h"
#include "core/optimizer.h"
#include "core/statistics.h"

namespace fedlgc::core {
namespace {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// The line of a libtorch message that says what went wrong: the first (C++ and Python
// stacks follow it), or the last of an error raised inside TorchScript code (which
// starts with a traceback, e.g. "RuntimeError: mat1 and mat2 shapes cannot be
// multiplied (2x3072 and 784x48)").
std::string FirstLine(const std::exception& e) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&e);
  std::string s = c10 != nullptr ? c10->what_without_backtrace() : e.what();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (s.rfind("The following operation failed in the TorchScript interpreter", 0) == 0) {
    const size_t nl = s.rfind('\n');
    return nl == std::string::npos ? s : s.substr(nl + 1);
  }
  const size_t nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  return s;
}

std::string ShapeOf(const torch::Tensor& t) {
  return Dataset::ShapeText(std::vector<int64_t>(t.sizes().begin(), t.sizes().end()));
}

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
  // forward above in TorchScript, for the scripted module an export writes.
  static constexpr char kScript[] = R"(
def forward(self, x):
    x = torch.reshape(x, [x.size(0), 1, 28, 28])
    x = torch.conv2d(x, self.conv1.weight, self.conv1.bias, [1, 1], [2, 2])
    x = torch.max_pool2d(torch.relu(x), [2, 2])
    x = torch.conv2d(x, self.conv2.weight, self.conv2.bias, [1, 1], [2, 2])
    x = torch.max_pool2d(torch.relu(x), [2, 2])
    x = torch.relu(torch.linear(torch.flatten(x, 1), self.fc1.weight, self.fc1.bias))
    return torch.linear(x, self.fc2.weight, self.fc2.bias)
)";
};

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(28 * 28, 200))),
        fc2(register_module("fc2", torch::nn::Linear(200, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    return fc2->forward(torch::relu(fc1->forward(x.flatten(1))));
  }
  torch::nn::Linear fc1, fc2;
  static constexpr char kScript[] = R"(
def forward(self, x):
    x = torch.reshape(x, [x.size(0), 784])
    x = torch.relu(torch.linear(x, self.fc1.weight, self.fc1.bias))
    return torch.linear(x, self.fc2.weight, self.fc2.bias)
)";
};

// A parameter-name pattern (ModelOptions::freeze, local_params): none when empty. Throws
// std::regex_error on a bad one (Validate reports it first).
std::optional<std::regex> NameMatcher(const std::string& pattern) {
  if (pattern.empty()) return std::nullopt;
  return std::regex(pattern, std::regex::ECMAScript);
}

// A tensor as an export holds it: detached, on the CPU, its own storage.
torch::Tensor ExportCopy(const torch::Tensor& t) {
  torch::Tensor c = t.detach().to(torch::kCPU).clone();
  if (c.scalar_type() == torch::kBFloat16) c = c.to(torch::kFloat32);
  return c;
}

// A scripted module of class `type` with `params` ("fc1.weight": a submodule fc1 holding
// weight) and the TorchScript methods of `source`: what plain PyTorch loads in place of a
// built-in network.
torch::jit::Module ScriptedBuiltin(const std::string& type, const NamedTensors& params,
                                   const char* source) {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  // Every module of Python's has a training flag (module.train() and .eval() set it).
  const auto with_flag = [](torch::jit::Module m) {
    m.register_attribute("training", c10::BoolType::get(), false);
    return m;
  };
  torch::jit::Module root =
      with_flag(torch::jit::Module(c10::QualifiedName(StrCat("__torch__.fedlgc.", type)), cu));
  std::vector<std::pair<std::string, torch::jit::Module>> subs;
  for (const auto& [name, t] : params) {
    const size_t dot = name.find('.');
    const std::string sub = name.substr(0, dot), leaf = name.substr(dot + 1);
    auto it = std::find_if(subs.begin(), subs.end(), [&](const auto& s) { return s.first == sub; });
    if (it == subs.end()) {
      subs.emplace_back(sub, with_flag(torch::jit::Module(
                                 c10::QualifiedName(StrCat("__torch__.fedlgc.", type, "_", sub)), cu)));
      it = std::prev(subs.end());
    }
    torch::Tensor p = ExportCopy(t);
    p.set_requires_grad(t.requires_grad());  // a frozen parameter stays frozen
    it->second.register_parameter(leaf, p, /*is_buffer=*/false);
  }
  for (const auto& [name, m] : subs) root.register_module(name, m);
  root.define(source);
  root.eval();
  return root;
}

// What the training loop needs of a network, built in or TorchScript. Not thread-safe.
class Net {
 public:
  virtual ~Net() = default;
  virtual NamedTensors Parameters() = 0;
  virtual NamedTensors FloatBuffers() = 0;
  // A batch [b, example shape...] in, the network's output out.
  virtual torch::Tensor Forward(const torch::Tensor& x) = 0;
  virtual bool HasOwnLoss() = 0;
  virtual torch::Tensor OwnLoss(const torch::Tensor& out, const torch::Tensor& y) = 0;
  virtual void SetTraining(bool on) = 0;
  // Batch normalisation layers only (evaluation with batch statistics).
  virtual void SetBatchNormTraining(bool /*on*/) {}
  // The submodule of that name only (a dotted path; "" is the root).
  virtual void SetModuleTraining(const std::string& /*name*/, bool /*on*/) {}
  // Why the network cannot take examples of `shape` at all; "" when it may.
  virtual std::string RefusesShape(const std::vector<int64_t>& /*shape*/) { return ""; }
  virtual void To(const torch::Device& device) = 0;
  // A copy as a TorchScript module on the CPU, in eval mode (Model::TorchScriptBytes).
  virtual torch::jit::Module Scripted() = 0;
  // Every parameter and buffer, as state_dict() names them.
  virtual NamedTensors StateTensors() = 0;
};

template <typename Impl>
class BuiltinNet final : public Net {
 public:
  explicit BuiltinNet(std::string name) : name_(std::move(name)), impl_(std::make_shared<Impl>()) {}
  NamedTensors Parameters() override {
    NamedTensors out;
    for (const auto& item : impl_->named_parameters()) out.emplace_back(item.key(), item.value());
    return out;
  }
  NamedTensors FloatBuffers() override { return {}; }
  torch::Tensor Forward(const torch::Tensor& x) override {
    return impl_->forward(x.reshape({x.size(0), 1, 28, 28}));
  }
  bool HasOwnLoss() override { return false; }
  torch::Tensor OwnLoss(const torch::Tensor&, const torch::Tensor&) override { return {}; }
  void SetTraining(bool on) override { impl_->train(on); }
  std::string RefusesShape(const std::vector<int64_t>& shape) override {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    if (n == 28 * 28) return "";
    return StrCat("the built-in ", name_, " takes 28x28 single-channel images (784 values an "
                  "example), not ", Dataset::ShapeText(shape), ": give --model a TorchScript file");
  }
  void To(const torch::Device& device) override { impl_->to(device); }
  torch::jit::Module Scripted() override {
    return ScriptedBuiltin(name_, Parameters(), Impl::kScript);
  }
  NamedTensors StateTensors() override { return Parameters(); }

 private:
  std::string name_;
  std::shared_ptr<Impl> impl_;
};

class ScriptNet final : public Net {
 public:
  explicit ScriptNet(torch::jit::Module module) : module_(std::move(module)) {
    own_loss_ = module_.find_method("loss").has_value();
  }
  // A tensor shared by two submodules (tied weights) is listed once, under its first
  // name, as Python's named_parameters() lists it: libtorch's lists it at every place.
  NamedTensors Parameters() override {
    NamedTensors out;
    std::set<const void*> seen;
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      if (seen.insert(p.value.unsafeGetTensorImpl()).second) out.emplace_back(p.name, p.value);
    }
    return out;
  }
  NamedTensors FloatBuffers() override {
    NamedTensors out;
    std::set<const void*> seen;
    for (const auto& b : module_.named_buffers(/*recurse=*/true)) {
      if (b.value.is_floating_point() && seen.insert(b.value.unsafeGetTensorImpl()).second) {
        out.emplace_back(b.name, b.value);
      }
    }
    return out;
  }
  torch::Tensor Forward(const torch::Tensor& x) override {
    torch::jit::IValue out = module_.forward({x});
    if (out.isTensor()) return out.toTensor();
    if (out.isTuple() && !out.toTupleRef().elements().empty() &&
        out.toTupleRef().elements()[0].isTensor()) {
      return out.toTupleRef().elements()[0].toTensor();
    }
    throw std::runtime_error(StrCat("forward returned a ", out.tagKind(), ", not a tensor"));
  }
  bool HasOwnLoss() override { return own_loss_; }
  torch::Tensor OwnLoss(const torch::Tensor& out, const torch::Tensor& y) override {
    torch::jit::IValue l = module_.get_method("loss")({out, y});
    if (!l.isTensor()) {
      throw std::runtime_error(StrCat("loss() returned a ", l.tagKind(), ", not a tensor"));
    }
    return l.toTensor();
  }
  void SetTraining(bool on) override { module_.train(on); }
  void SetBatchNormTraining(bool on) override {
    for (const auto& m : module_.named_modules()) {
      const auto type = m.value.type()->name();
      if (type && type->qualifiedName().find("BatchNorm") != std::string::npos) {
        torch::jit::Module sub = m.value;
        sub.train(on);
      }
    }
  }
  void SetModuleTraining(const std::string& name, bool on) override {
    for (const auto& m : module_.named_modules()) {
      if (m.name != name) continue;
      torch::jit::Module sub = m.value;
      sub.train(on);
    }
  }
  void To(const torch::Device& device) override { module_.to(device); }
  torch::jit::Module Scripted() override {
    torch::jit::Module copy = module_.deepcopy();
    copy.to(torch::kCPU);
    copy.eval();
    // A copy made without gradients (TorchScriptBytes) would mark every parameter frozen:
    // each keeps the module's flag, so an export fine-tunes as the module trained.
    std::map<std::string, bool> trains;
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      trains[p.name] = p.value.requires_grad();
    }
    for (const auto& p : copy.named_parameters(/*recurse=*/true)) {
      torch::Tensor t = p.value;
      t.set_requires_grad(trains[p.name]);
    }
    return copy;
  }
  NamedTensors StateTensors() override {
    NamedTensors out = Parameters();
    std::set<const void*> seen;
    for (const auto& [n, t] : out) seen.insert(t.unsafeGetTensorImpl());
    for (const auto& b : module_.named_buffers(/*recurse=*/true)) {
      if (seen.insert(b.value.unsafeGetTensorImpl()).second) out.emplace_back(b.name, b.value);
    }
    return out;
  }

 private:
  torch::jit::Module module_;
  bool own_loss_ = false;
};

enum class LossKind { kOwn, kCrossEntropy, kMse };

absl::StatusOr<NpyType> NpyTypeOf(torch::ScalarType t) {
  switch (t) {
    case torch::kBool: return NpyType::kBool;
    case torch::kUInt8: return NpyType::kU8;
    case torch::kInt8: return NpyType::kI8;
    case torch::kInt16: return NpyType::kI16;
    case torch::kInt32: return NpyType::kI32;
    case torch::kInt64: return NpyType::kI64;
    case torch::kFloat16: return NpyType::kF16;
    case torch::kFloat32: return NpyType::kF32;
    case torch::kFloat64: return NpyType::kF64;
    default:
      return absl::InvalidArgumentError(StrCat("dtype ", c10::toString(t), " has no NumPy form"));
  }
}

class TorchModel final : public Model {
 public:
  TorchModel(std::string name, ModelOptions options, std::unique_ptr<Net> net,
             const torch::Device& device)
      : name_(std::move(name)), options_(std::move(options)), net_(std::move(net)), device_(device) {
    net_->To(device_);
    NamedTensors flat = SortParameters();
    const size_t params = flat.size();  // the tensors after them are buffers
    NamedTensors buffers = net_->FloatBuffers();
    if (options_.buffers == "local") {
      local_.insert(local_.end(), buffers.begin(), buffers.end());
    } else {
      flat.insert(flat.end(), buffers.begin(), buffers.end());
    }
    std::vector<std::pair<std::string, std::vector<uint64_t>>> tensors;
    for (size_t i = 0; i < flat.size(); ++i) {
      const auto& [n, t] = flat[i];
      if (t.numel() == 0) continue;  // nothing to send; a layout has no empty tensors
      if (i >= params && dim_ > 0) scale_cuts_.push_back(dim_);
      dim_ += static_cast<size_t>(t.numel());
      std::vector<uint64_t> shape;
      for (int64_t e : t.sizes()) shape.push_back(static_cast<uint64_t>(e));
      tensors.emplace_back(n, std::move(shape));
      flat_.push_back(t);
      flat_names_.push_back(n);
    }
    // Batch normalisation's statistics, a running_mean and a running_var of one prefix,
    // travel scale-free (statistics_ below).
    for (size_t i = 0; i < flat_names_.size(); ++i) {
      const std::string& n = flat_names_[i];
      if (!std::string_view(n).ends_with("running_mean")) continue;
      const std::string var = n.substr(0, n.size() - 4) + "var";
      for (size_t j = 0; j < flat_names_.size(); ++j) {
        if (flat_names_[j] == var && flat_[j].numel() == flat_[i].numel()) {
          statistics_.push_back({i, j});
        }
      }
    }
    auto layout = codecs::ModelLayout::Create(std::move(tensors));
    if (layout.ok()) {
      layout_ = *std::move(layout);
    } else if (init_error_.ok()) {
      init_error_ = layout.status();
    }
  }

  // Three kinds of parameter: frozen ones (requires_grad false in the module, or named by
  // options.freeze) stay as they are and never travel; personal ones (options.local_params)
  // train and stay with the client (local_); the others train and travel: returned, the
  // start of the flat vector. A contradiction goes into init_error_.
  NamedTensors SortParameters() {
    const std::optional<std::regex> freeze = NameMatcher(options_.freeze);
    const std::optional<std::regex> personal = NameMatcher(options_.local_params);
    NamedTensors flat;
    int64_t at = 0;
    bool any_frozen = false, any_mine = false;
    std::string names;
    const auto fail = [this](std::string message) {
      if (init_error_.ok()) init_error_ = absl::InvalidArgumentError(std::move(message));
    };
    for (auto& [n, t] : net_->Parameters()) {
      const bool frozen = freeze.has_value() && std::regex_search(n, *freeze);
      const bool mine = personal.has_value() && std::regex_search(n, *personal);
      any_frozen |= frozen;
      any_mine |= mine;
      StrAppend(&names, names.empty() ? "" : ", ", n);
      if (frozen && mine) {
        fail(StrCat("parameter ", n,
                    " matches both --freeze and --local-params (a personal parameter trains; "
                    "leave it out of one)"));
      }
      if (mine && !t.requires_grad()) {
        fail(StrCat("parameter ", n,
                    " matches --local-params but the module freezes it "
                    "(requires_grad=False): a personal parameter trains"));
      }
      if (frozen || !t.requires_grad()) {
        t.set_requires_grad(false);
        groups_.frozen.push_back(n);
        groups_.frozen_values += static_cast<uint64_t>(t.numel());
        continue;
      }
      trainable_.push_back(t);
      if (mine) {
        trainable_at_.push_back(-1);
        groups_.local.push_back(n);
        groups_.local_values += static_cast<uint64_t>(t.numel());
        local_.emplace_back(n, t);
        continue;
      }
      trainable_at_.push_back(at);
      at += t.numel();
      flat.emplace_back(n, t);
    }
    // A pattern that names nothing is a mistake (a typo would change the job unsaid).
    if (freeze.has_value() && !any_frozen) {
      fail(StrCat("--freeze '", options_.freeze, "' names no parameter (they are: ", names, ")"));
    }
    if (personal.has_value() && !any_mine) {
      fail(StrCat("--local-params '", options_.local_params,
                  "' names no parameter (they are: ", names, ")"));
    }
    if (flat.empty()) {
      fail(StrCat("no parameter travels: all ", groups_.frozen.size() + groups_.local.size(),
                  " are frozen (requires_grad=False or --freeze) or personal (--local-params)"));
    }
    return flat;
  }

  // A module whose names or shapes no layout can hold, or options that leave nothing to
  // train or contradict each other (Create refuses it).
  const absl::Status& init_error() const { return init_error_; }
  const ParameterGroups& parameter_groups() const override { return groups_; }

  const std::string& name() const override { return name_; }
  std::string device() const override { return device_.str(); }
  size_t dim() const override { return dim_; }
  const codecs::ModelLayout& layout() const override { return layout_; }

  std::vector<float> GetFlat() const override {
    std::vector<torch::Tensor> out = flat_;
    torch::NoGradGuard guard;
    for (const auto& [mean, var] : statistics_) {
      const torch::Tensor v = flat_[var].to(torch::kFloat32) + kStatisticsEps;
      out[mean] = flat_[mean].to(torch::kFloat32) / v.sqrt();
      out[var] = v.log();
    }
    return Gather(out, dim_);
  }

  absl::Status SetFlat(std::span<const float> flat) override {
    if (flat.size() != dim_) {
      return absl::InvalidArgumentError(
          StrCat(name_, ": flat weights of ", flat.size(), " values, the model has ", dim_));
    }
    Scatter(flat, flat_);
    torch::NoGradGuard guard;
    for (const auto& [mean, var] : statistics_) {
      // exp(log(v + eps)) - eps; a lossy code may take it a hair below zero.
      torch::Tensor v = flat_[var];
      v.copy_((flat_[var].exp() - kStatisticsEps).clamp_min(0));
      torch::Tensor m = flat_[mean];
      m.mul_((v + kStatisticsEps).sqrt());
    }
    return absl::OkStatus();
  }

  std::vector<uint64_t> ScaleCuts() const override { return scale_cuts_; }

  std::vector<float> GetLocalTensors() const override {
    size_t n = 0;
    for (const auto& [name, t] : local_) n += static_cast<size_t>(t.numel());
    std::vector<torch::Tensor> ts;
    for (const auto& [name, t] : local_) ts.push_back(t);
    return Gather(ts, n);
  }

  absl::Status SetLocalTensors(std::span<const float> flat) override {
    size_t n = 0;
    std::vector<torch::Tensor> ts;
    for (const auto& [name, t] : local_) {
      n += static_cast<size_t>(t.numel());
      ts.push_back(t);
    }
    if (flat.size() != n) {
      return absl::InvalidArgumentError(
          StrCat(name_, ": ", flat.size(), " values of a client's own, the model has ", n));
    }
    Scatter(flat, ts);
    return absl::OkStatus();
  }

  absl::Status CheckFits(const Dataset& data) override {
    try {
      return CheckFitsImpl(data);
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          StrCat("model ", name_, " does not fit ", data.source, ": ", FirstLine(e)));
    }
  }

  absl::StatusOr<TrainResult> Train(const Dataset& data, std::span<const uint32_t> indices,
                                    const TrainOptions& opts) override {
    try {
      return TrainImpl(data, indices, opts);
    } catch (const std::exception& e) {
      // What libtorch throws past the first batch's check (a later batch's label out of
      // range, a loss() that fails on some input) is the model's or the data's, and
      // another try would throw again: a precondition, so the client ends with it.
      return absl::FailedPreconditionError(
          StrCat(name_, ": training failed: ", FirstLine(e)));
    }
  }

  absl::StatusOr<EvalResult> Evaluate(const Dataset& data, size_t limit) override {
    try {
      return EvalImpl(data, limit);
    } catch (const std::exception& e) {
      return absl::InternalError(StrCat(name_, ": evaluation failed: ", FirstLine(e)));
    }
  }

  absl::StatusOr<Statistics> ReestimateStatistics(const Dataset& data,
                                                  std::span<const uint32_t> indices,
                                                  const StatisticsOptions& opts) override {
    if (statistics_.empty()) return Statistics{};
    if (opts.batch_size < 2) {
      return absl::InvalidArgumentError("statistics need batches of at least 2 examples");
    }
    StatisticsRun run = StartStatistics();
    try {
      auto got = ReestimateImpl(data, indices, opts, &run);
      FinishStatistics(run, got.ok() ? &*got : nullptr);
      return got;
    } catch (const std::exception& e) {
      FinishStatistics(run, nullptr);
      return absl::InternalError(
          StrCat(name_, ": re-estimating the statistics failed: ", FirstLine(e)));
    }
  }

  absl::StatusOr<std::string> TorchScriptBytes(
      const std::map<std::string, std::string>& extra_files) const override {
    try {
      torch::NoGradGuard guard;
      torch::jit::Module m = net_->Scripted();
      std::ostringstream out;
      m.save(out, torch::jit::ExtraFilesMap(extra_files.begin(), extra_files.end()));
      return std::move(out).str();
    } catch (const std::exception& e) {
      return absl::InternalError(StrCat(name_, ": cannot write it as TorchScript: ", FirstLine(e)));
    }
  }

  absl::StatusOr<NpzArrays> StateArrays() const override {
    try {
      NpzArrays out;
      for (const auto& [name, t] : net_->StateTensors()) {
        torch::Tensor c = ExportCopy(t).contiguous();
        auto type = NpyTypeOf(c.scalar_type());
        if (!type.ok()) {
          return absl::InvalidArgumentError(StrCat(name_, ": tensor ", name, ": ", type.status().message()));
        }
        NpyArray a;
        a.type = *type;
        a.shape.assign(c.sizes().begin(), c.sizes().end());
        a.data.assign(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
        out[name] = std::move(a);
      }
      return out;
    } catch (const std::exception& e) {
      return absl::InternalError(StrCat(name_, ": cannot read its tensors: ", FirstLine(e)));
    }
  }

 private:
  static std::vector<float> Gather(const std::vector<torch::Tensor>& ts, size_t n) {
    std::vector<float> flat(n);
    size_t off = 0;
    torch::NoGradGuard guard;
    for (const torch::Tensor& t : ts) {
      torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
      std::memcpy(flat.data() + off, c.data_ptr<float>(), c.numel() * sizeof(float));
      off += static_cast<size_t>(c.numel());
    }
    return flat;
  }

  static void Scatter(std::span<const float> flat, const std::vector<torch::Tensor>& ts) {
    size_t off = 0;
    torch::NoGradGuard guard;
    for (const torch::Tensor& t : ts) {
      torch::Tensor src = torch::from_blob(const_cast<float*>(flat.data() + off), t.sizes(),
                                           torch::kFloat32);
      torch::Tensor dst = t;
      dst.copy_(src);
      off += static_cast<size_t>(t.numel());
    }
  }

  // The examples at idx as a batch [b, shape...] and their labels [b] (int64) or targets
  // [b, target shape...] (float), on the device.
  std::pair<torch::Tensor, torch::Tensor> Batch(const Dataset& data,
                                                std::span<const uint32_t> idx) const {
    std::vector<int64_t> xs{static_cast<int64_t>(idx.size())};
    xs.insert(xs.end(), data.shape.begin(), data.shape.end());
    const size_t es = data.example_size();
    torch::Tensor x;
    if (data.integer_inputs) {  // token ids: int64, as an embedding takes them
      x = torch::empty(xs, torch::kInt64);
      int64_t* xp = x.data_ptr<int64_t>();
      for (size_t i = 0; i < idx.size(); ++i) {
        std::memcpy(xp + i * es, data.ids.data() + idx[i] * es, es * sizeof(int64_t));
      }
    } else {
      x = torch::empty(xs, torch::kFloat32);
      float* xp = x.data_ptr<float>();
      for (size_t i = 0; i < idx.size(); ++i) {
        std::memcpy(xp + i * es, data.x.data() + idx[i] * es, es * sizeof(float));
      }
    }
    torch::Tensor y;
    if (data.classification()) {
      y = torch::empty({static_cast<int64_t>(idx.size())}, torch::kInt64);
      int64_t* yp = y.data_ptr<int64_t>();
      for (size_t i = 0; i < idx.size(); ++i) yp[i] = data.labels[idx[i]];
    } else {
      std::vector<int64_t> ys{static_cast<int64_t>(idx.size())};
      ys.insert(ys.end(), data.target_shape.begin(), data.target_shape.end());
      y = torch::empty(ys, torch::kFloat32);
      float* yp = y.data_ptr<float>();
      const size_t ts = data.target_size();
      for (size_t i = 0; i < idx.size(); ++i) {
        std::memcpy(yp + i * ts, data.targets.data() + idx[i] * ts, ts * sizeof(float));
      }
    }
    if (device_.is_cpu()) return {x, y};
    return {x.to(device_), y.to(device_)};
  }

  // The loss for `data`: the module's own, or the option's (auto picks by the targets).
  absl::StatusOr<LossKind> LossFor(const Dataset& data) {
    if (net_->HasOwnLoss()) return LossKind::kOwn;
    const std::string& l = options_.loss;
    if (l == "cross_entropy" || (l == "auto" && data.classification())) {
      if (!data.classification()) {
        return absl::InvalidArgumentError(StrCat("--loss cross_entropy needs class labels; ",
                                                 data.source, " has float targets"));
      }
      return LossKind::kCrossEntropy;
    }
    if (data.classification()) {
      return absl::InvalidArgumentError(StrCat(
          "--loss mse needs float targets; ", data.source,
          " has class labels (--targets values reads them as numbers)"));
    }
    return LossKind::kMse;
  }

  // The batch's mean loss.
  torch::Tensor Loss(LossKind kind, const torch::Tensor& out, const torch::Tensor& y) {
    switch (kind) {
      case LossKind::kOwn: {
        torch::Tensor l = net_->OwnLoss(out, y);
        if (l.numel() != 1) {
          throw std::runtime_error(
              StrCat("loss() returned a tensor of shape ", ShapeOf(l), ", not a scalar"));
        }
        return l.reshape({});
      }
      case LossKind::kCrossEntropy:
        return torch::nn::functional::cross_entropy(out, y);
      case LossKind::kMse:
        return torch::mse_loss(out, y.reshape(out.sizes()));
    }
    return {};
  }

  absl::Status CheckFitsImpl(const Dataset& data) {
    auto fail = [&](std::string_view why) {
      return absl::InvalidArgumentError(
          StrCat("model ", name_, " does not fit ", data.source, ": ", why));
    };
    if (std::string why = net_->RefusesShape(data.shape); !why.empty()) return fail(why);
    if (data.size() == 0) return fail("no examples");
    auto kind = LossFor(data);
    if (!kind.ok()) return fail(std::string(kind.status().message()));
    std::vector<uint32_t> idx(std::min<size_t>(2, data.size()));
    std::iota(idx.begin(), idx.end(), 0u);
    auto [x, y] = Batch(data, idx);
    torch::NoGradGuard guard;
    net_->SetTraining(false);
    torch::Tensor out;
    try {
      out = net_->Forward(x);
    } catch (const std::exception& e) {
      // An embedding first wants integers: say how to give them.
      const std::string why = FirstLine(e);
      const bool wants_ids = !data.integer_inputs && (why.find("Long") != std::string::npos ||
                                                      why.find("Int") != std::string::npos);
      return fail(StrCat("a batch of shape ", ShapeOf(x), " (", data.integer_inputs ? "int64" : "float32",
                         ") fails in forward: ", why,
                         wants_ids ? " (integer inputs such as token ids: save x with an integer "
                                     "dtype in the npz, or --inputs ids)"
                                   : ""));
    }
    if (*kind == LossKind::kCrossEntropy &&
        (out.dim() != 2 || out.size(0) != x.size(0))) {
      return fail(StrCat("for class labels the output must be [batch, classes]; a batch of ",
                         ShapeOf(x), " gives ", ShapeOf(out)));
    }
    // Class scores [batch, classes], under cross entropy or a loss() of the module's own
    // (whose [batch, 1] output may be a binary score, so one column says nothing): every
    // label of the data, not only the first batch's, must have its column.
    const bool scores = *kind == LossKind::kCrossEntropy ||
                        (data.classification() && out.dim() == 2 && out.size(1) > 1 &&
                         out.size(0) == x.size(0));
    if (scores && static_cast<int64_t>(data.classes) > out.size(1)) {
      return fail(StrCat("labels go up to ", data.classes - 1, " but the model outputs ",
                         out.size(1), " classes"));
    }
    if (*kind == LossKind::kMse && out.numel() != y.numel()) {
      // Class labels saved as floats read as float targets (--targets auto by dtype).
      const bool labels_as_floats = data.target_size() == 1 && out.dim() == 2 &&
                                    out.size(1) > 1;
      return fail(StrCat("a batch of ", ShapeOf(x), " gives outputs ", ShapeOf(out),
                         " for targets ", ShapeOf(y),
                         labels_as_floats ? " (if the labels are classes stored as floats, "
                                            "--targets classes reads them as class labels)"
                                          : ""));
    }
    torch::Tensor loss;
    try {
      loss = Loss(*kind, out, y);
    } catch (const std::exception& e) {
      return fail(StrCat("the loss fails on outputs ", ShapeOf(out), " and targets ", ShapeOf(y),
                         ": ", FirstLine(e)));
    }
    if (!std::isfinite(loss.item<double>())) return fail("the loss of the first batch is not finite");
    return absl::OkStatus();
  }

  std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const OptimizerSpec& spec,
                                                         const TrainOptions& opts) {
    const double lr = spec.LearningRate(opts.lr);
    if (spec.kind == OptimizerSpec::Kind::kAdam) {
      return std::make_unique<torch::optim::Adam>(
          trainable_, torch::optim::AdamOptions(lr)
                          .betas({spec.beta1, spec.beta2})
                          .eps(spec.eps)
                          .weight_decay(spec.weight_decay));
    }
    const double momentum = opts.optimizer.empty() ? opts.momentum : spec.momentum;
    return std::make_unique<torch::optim::SGD>(trainable_, torch::optim::SGDOptions(lr)
                                                               .momentum(momentum)
                                                               .weight_decay(spec.weight_decay)
                                                               .nesterov(spec.nesterov));
  }

  // lr x correction as a tensor per trainable parameter, on the model's device.
  absl::StatusOr<std::vector<torch::Tensor>> CorrectionSteps(std::span<const float> correction,
                                                             double lr) const {
    std::vector<torch::Tensor> out;
    if (correction.empty()) return out;
    if (correction.size() != dim_) {
      return absl::InvalidArgumentError(
          StrCat(name_, ": a correction of ", correction.size(), " values, the model has ", dim_));
    }
    for (size_t i = 0; i < trainable_.size(); ++i) {
      const torch::Tensor& p = trainable_[i];
      if (trainable_at_[i] < 0) {  // a personal parameter: no control variate
        out.push_back(torch::zeros_like(p));
        continue;
      }
      torch::Tensor c = torch::from_blob(const_cast<float*>(correction.data()) + trainable_at_[i],
                                         p.sizes(), torch::kFloat32);
      out.push_back((c * lr).to(p.device(), p.scalar_type()));
    }
    return out;
  }

  void AddProximalGradient(const std::vector<torch::Tensor>& anchor, double mu) {
    torch::NoGradGuard guard;
    for (size_t i = 0; i < trainable_.size(); ++i) {
      torch::Tensor& p = trainable_[i];
      torch::Tensor pull = (p.detach() - anchor[i]).mul_(mu);
      if (p.mutable_grad().defined()) {
        p.mutable_grad().add_(pull);
      } else {
        p.mutable_grad() = pull;
      }
    }
  }

  absl::StatusOr<TrainResult> TrainImpl(const Dataset& data, std::span<const uint32_t> indices,
                                        const TrainOptions& opts) {
    const auto start = std::chrono::steady_clock::now();
    auto spec = OptimizerSpec::Parse(opts.optimizer);
    if (!spec.ok()) return spec.status();
    auto kind = LossFor(data);
    if (!kind.ok()) return kind.status();
    net_->SetTraining(true);
    std::unique_ptr<torch::optim::Optimizer> opt = MakeOptimizer(*spec, opts);
    std::vector<uint32_t> order(indices.begin(), indices.end());
    std::mt19937_64 rng(opts.seed);
    // FedProx's anchor: the gradient of (mu / 2) ||w - w0||^2 is mu (w - w0), added to
    // each step's gradient before the optimizer sees it (momentum and weight decay apply
    // to it as to the loss's, as they would to an autograd loss term).
    std::vector<torch::Tensor> anchor;
    if (opts.prox_mu > 0) {
      for (const torch::Tensor& p : trainable_) anchor.push_back(p.detach().clone());
    }
    TrainResult r;
    r.lr = spec->LearningRate(opts.lr);
    auto shift = CorrectionSteps(opts.correction, r.lr);
    if (!shift.ok()) return shift.status();
    std::deque<double> last;
    double total = 0;
    const size_t bs = static_cast<size_t>(std::max(1, opts.batch_size));
    const int64_t max_steps = opts.steps > 0 ? opts.steps : std::numeric_limits<int64_t>::max();
    const int epochs = opts.steps > 0 ? std::numeric_limits<int>::max() : std::max(1, opts.epochs);
    for (int e = 0; e < epochs && r.steps < max_steps && !order.empty(); ++e) {
      std::shuffle(order.begin(), order.end(), rng);
      for (size_t b = 0; b < order.size() && r.steps < max_steps; b += bs) {
        auto [x, y] =
            Batch(data, std::span<const uint32_t>(order).subspan(b, std::min(bs, order.size() - b)));
        opt->zero_grad();
        torch::Tensor loss = Loss(*kind, net_->Forward(x), y);
        loss.backward();
        if (!anchor.empty()) AddProximalGradient(anchor, opts.prox_mu);
        opt->step();
        if (!shift->empty()) {
          torch::NoGradGuard guard;
          for (size_t i = 0; i < trainable_.size(); ++i) trainable_[i].sub_((*shift)[i]);
        }
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

  // ReestimateStatistics's state: the statistics and counters as they were, put back
  // where nothing was estimated.
  struct StatisticsRun {
    std::vector<torch::Tensor> mean, var;  // clones
    std::vector<torch::Tensor> tracked;    // each pair's num_batches_tracked (undefined: none)
    std::vector<torch::Tensor> tracked_was;
    std::vector<double> factor;  // each pair's update factor (0: not BatchNorm's rule)
    std::vector<std::vector<double>> sum_mean, sum_var;
  };

  StatisticsRun StartStatistics() {
    torch::NoGradGuard guard;
    StatisticsRun run;
    const NamedTensors state = net_->StateTensors();
    net_->SetTraining(false);
    for (const auto& [mean, var] : statistics_) {
      run.mean.push_back(flat_[mean].clone());
      run.var.push_back(flat_[var].clone());
      const std::string module = StatisticsModule(mean);
      torch::Tensor tracked;
      for (const auto& [n, t] : state) {
        if (n == (module.empty() ? "" : module + ".") + "num_batches_tracked") tracked = t;
      }
      run.tracked.push_back(tracked);
      run.tracked_was.push_back(tracked.defined() ? tracked.clone() : torch::Tensor());
      net_->SetModuleTraining(module, true);
    }
    return run;
  }

  // The module that owns the statistics pair whose running_mean is flat_[mean].
  std::string StatisticsModule(size_t mean) const {
    const std::string& n = flat_names_[mean];
    const size_t dot = n.rfind('.');
    return dot == std::string::npos ? "" : n.substr(0, dot);
  }

  // Every pair's statistics and counter at `value` before a forward pass.
  void ResetStatistics(StatisticsRun& run, double value) {
    for (size_t p = 0; p < statistics_.size(); ++p) {
      flat_[statistics_[p].first].fill_(value);
      flat_[statistics_[p].second].fill_(value);
      if (run.tracked[p].defined()) run.tracked[p].zero_();
    }
  }

  static std::vector<double> Doubles(const torch::Tensor& t) {
    const torch::Tensor d = t.detach().to(torch::kCPU, torch::kFloat64).contiguous();
    return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
  }

  // With the statistics at 0 before the pass, a module that follows BatchNorm's rule
  // (running = (1 - f) running + f batch) holds f x the batch's; passing the same batch
  // again from 1 gives 1 - f + f x the batch's, which measures f whatever the module's
  // momentum (None: f = 1 once its counter is reset). f must be one number for every
  // channel of the mean and the variance, or the pair is not BatchNorm's.
  void CalibrateStatistics(StatisticsRun& run, const torch::Tensor& x) {
    std::vector<std::vector<double>> zero_mean, zero_var;
    for (const auto& [mean, var] : statistics_) {
      zero_mean.push_back(Doubles(flat_[mean]));
      zero_var.push_back(Doubles(flat_[var]));
    }
    ResetStatistics(run, 1.0);
    net_->Forward(x);
    for (size_t p = 0; p < statistics_.size(); ++p) {
      const std::vector<double> m = Doubles(flat_[statistics_[p].first]);
      const std::vector<double> v = Doubles(flat_[statistics_[p].second]);
      double f = 1 - (m[0] - zero_mean[p][0]);
      bool ok = f > 1e-6 && f <= 1 + 1e-6;
      for (size_t c = 0; c < m.size() && ok; ++c) {
        // float32 statistics: the measured f is good to a few ulps of the larger value.
        const double tol = 1e-5 * (1 + std::fabs(zero_mean[p][c]) + std::fabs(zero_var[p][c]));
        ok = std::fabs(1 - (m[c] - zero_mean[p][c]) - f) <= tol &&
             std::fabs(1 - (v[c] - zero_var[p][c]) - f) <= tol;
      }
      run.factor.push_back(ok ? f : 0);
      run.sum_mean.emplace_back(m.size(), 0.0);
      run.sum_var.emplace_back(v.size(), 0.0);
      for (size_t c = 0; c < m.size() && ok; ++c) {
        run.sum_mean[p][c] = zero_mean[p][c] / f;
        run.sum_var[p][c] = zero_var[p][c] / f;
      }
    }
  }

  absl::StatusOr<Statistics> ReestimateImpl(const Dataset& data, std::span<const uint32_t> indices,
                                            const StatisticsOptions& opts, StatisticsRun* run) {
    torch::NoGradGuard guard;
    Statistics out;
    for (size_t at = 0; out.batches < opts.max_batches && at + 2 <= indices.size();) {
      const size_t len = std::min(opts.batch_size, indices.size() - at);
      auto [x, y] = Batch(data, indices.subspan(at, len));
      at += len;
      ResetStatistics(*run, 0.0);
      net_->Forward(x);
      if (out.batches == 0) {
        CalibrateStatistics(*run, x);
      } else {
        for (size_t p = 0; p < statistics_.size(); ++p) {
          if (run->factor[p] == 0) continue;
          const std::vector<double> m = Doubles(flat_[statistics_[p].first]);
          const std::vector<double> v = Doubles(flat_[statistics_[p].second]);
          for (size_t c = 0; c < m.size(); ++c) {
            run->sum_mean[p][c] += m[c] / run->factor[p];
            run->sum_var[p][c] += v[c] / run->factor[p];
          }
        }
      }
      out.examples += len;
      ++out.batches;
    }
    if (out.batches == 0) {
      return absl::InvalidArgumentError(
          StrCat(name_, ": no batch of at least 2 examples to re-estimate the statistics with (",
                 indices.size(), " examples)"));
    }
    for (size_t p = 0; p < statistics_.size(); ++p) {
      if (run->factor[p] == 0) out.skipped.push_back(static_cast<uint32_t>(p));
      for (size_t c = 0; c < run->sum_mean[p].size(); ++c) {
        out.mean.push_back(static_cast<float>(run->sum_mean[p][c] / out.batches));
        out.var.push_back(static_cast<float>(run->sum_var[p][c] / out.batches));
      }
    }
    return out;
  }

  // Sets the statistics to `got` (pairs it skipped, or all of them without it: as they
  // were), the counters and the training flags as they were.
  void FinishStatistics(const StatisticsRun& run, const Statistics* got) {
    torch::NoGradGuard guard;
    size_t at = 0;
    for (size_t p = 0; p < statistics_.size(); ++p) {
      torch::Tensor mean = flat_[statistics_[p].first];
      torch::Tensor var = flat_[statistics_[p].second];
      const int64_t n = mean.numel();
      const bool set = got != nullptr && p < run.factor.size() && run.factor[p] != 0;
      if (set) {
        const auto opts = torch::TensorOptions().dtype(torch::kFloat32);
        mean.copy_(torch::from_blob(const_cast<float*>(got->mean.data() + at), mean.sizes(), opts));
        var.copy_(torch::from_blob(const_cast<float*>(got->var.data() + at), var.sizes(), opts));
      } else {
        mean.copy_(run.mean[p]);
        var.copy_(run.var[p]);
      }
      at += static_cast<size_t>(n);
      if (run.tracked[p].defined()) run.tracked[p].copy_(run.tracked_was[p]);
    }
    net_->SetTraining(false);
  }

  absl::StatusOr<EvalResult> EvalImpl(const Dataset& data, size_t limit) {
    auto kind = LossFor(data);
    if (!kind.ok()) return kind.status();
    torch::NoGradGuard guard;
    net_->SetTraining(false);
    // Local buffers: the coordinator holds none of the clients', so batch normalisation
    // uses each batch's statistics; its running statistics are put back afterwards.
    std::vector<torch::Tensor> saved;
    const bool batch_statistics = options_.buffers == "local";
    if (batch_statistics) {
      for (const auto& [n, t] : local_) saved.push_back(t.clone());
      net_->SetBatchNormTraining(true);
    }
    const size_t n = limit > 0 ? std::min(limit, data.size()) : data.size();
    std::vector<uint32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0u);
    EvalResult r;
    if (data.classification()) {
      r.class_examples.assign(data.classes, 0);
      r.class_correct.assign(data.classes, 0);
    }
    double loss = 0;
    size_t correct = 0;
    for (size_t b = 0; b < n; b += 1000) {
      const size_t len = std::min<size_t>(1000, n - b);
      auto [x, y] = Batch(data, std::span<const uint32_t>(idx).subspan(b, len));
      torch::Tensor out = net_->Forward(x);
      loss += Loss(*kind, out, y).item<double>() * static_cast<double>(len);
      if (data.classification() && out.dim() == 2) {
        const torch::Tensor hit = out.argmax(1).eq(y).to(torch::kCPU);
        const torch::Tensor labels = y.to(torch::kCPU);
        const bool* h = hit.data_ptr<bool>();
        const int64_t* l = labels.data_ptr<int64_t>();
        for (int64_t i = 0; i < labels.size(0); ++i) {
          ++r.class_examples[static_cast<size_t>(l[i])];
          if (h[i]) {
            ++r.class_correct[static_cast<size_t>(l[i])];
            ++correct;
          }
        }
      }
    }
    if (batch_statistics) {
      net_->SetBatchNormTraining(false);
      for (size_t i = 0; i < saved.size(); ++i) {
        torch::Tensor t = local_[i].second;
        t.copy_(saved[i]);
      }
    }
    r.examples = n;
    r.loss = n ? loss / n : 0;
    r.accuracy = !data.classification() ? std::numeric_limits<double>::quiet_NaN()
                 : n                    ? static_cast<double>(correct) / n
                                        : 0;
    return r;
  }

  std::string name_;
  ModelOptions options_;
  std::unique_ptr<Net> net_;
  torch::Device device_;
  std::vector<torch::Tensor> flat_;       // the flat vector's tensors, in order
  std::vector<std::string> flat_names_;
  std::vector<torch::Tensor> trainable_;  // parameters that require a gradient
  std::vector<int64_t> trainable_at_;     // where each begins in the flat vector; -1: personal
  ParameterGroups groups_;
  // Averaged batch normalisation statistics, as indices into flat_ of a running_mean and
  // its running_var. The flat vector holds them scale-free: log(var + eps) and
  // mean / sqrt(var + eps). A lossy codec then errs by a factor of the variance and a
  // fraction of the standard deviation, channel by channel, where on the raw values one
  // bucket's step (set by the largest channel) could take a small variance to zero and
  // blow up its channel; and the average of the clients' statistics is that of these
  // forms (a geometric mean of the variances).
  std::vector<std::pair<size_t, size_t>> statistics_;
  // A client's own: personal parameters, then (buffers "local") the floating-point buffers.
  NamedTensors local_;
  size_t dim_ = 0;
  std::vector<uint64_t> scale_cuts_;  // where each averaged buffer begins
  codecs::ModelLayout layout_;
  absl::Status init_error_;
};

absl::StatusOr<torch::Device> ResolveDevice(const std::string& device) {
  if (device == "auto") {
    return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device("cpu");
  }
  if (device != "cpu" && device.rfind("cuda", 0) != 0) {
    return absl::InvalidArgumentError(
        StrCat("unknown device '", device, "' (known: cpu, cuda, cuda:N, auto)"));
  }
  torch::Device dev(device);
  if (dev.is_cuda() && !torch::cuda::is_available()) {
    return absl::FailedPreconditionError(
        StrCat("device ", device,
               ": this libtorch has no CUDA or no GPU is visible (use --device=cpu or auto)"));
  }
  if (dev.is_cuda() && dev.has_index() &&
      dev.index() >= static_cast<int>(torch::cuda::device_count())) {
    return absl::FailedPreconditionError(
        StrCat("device ", device, ": only ", torch::cuda::device_count(), " GPUs"));
  }
  return dev;
}

absl::StatusOr<std::unique_ptr<Net>> LoadScript(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(StrCat("model ", path, ": no such file (--model takes cnn, mlp or ",
                                      "a TorchScript file saved with torch.jit.save)"));
  }
  try {
    // Loaded on the CPU: the model is moved to its device with the rest.
    return std::unique_ptr<Net>(new ScriptNet(torch::jit::load(path, torch::Device("cpu"))));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        StrCat("model ", path, ": not a TorchScript file (save one with torch.jit.save of a ",
               "torch.jit.script or torch.jit.trace module): ", FirstLine(e)));
  }
}

}  // namespace

absl::Status ModelOptions::Validate() const {
  if (buffers != "average" && buffers != "local") {
    return absl::InvalidArgumentError(
        StrCat("--buffers '", buffers, "': expected average or local"));
  }
  if (loss != "auto" && loss != "cross_entropy" && loss != "mse") {
    return absl::InvalidArgumentError(
        StrCat("--loss '", loss, "': expected auto, cross_entropy or mse"));
  }
  if (model.empty()) return absl::InvalidArgumentError("--model is empty");
  for (const auto& [flag, pattern] :
       {std::pair{"--freeze", &freeze}, {"--local-params", &local_params}}) {
    try {
      NameMatcher(*pattern);
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(
          StrCat(flag, " '", *pattern, "' is not a regular expression: ", e.what()));
    }
  }
  return absl::OkStatus();
}

bool CudaAvailable() { return torch::cuda::is_available(); }

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const ModelOptions& options, uint64_t seed,
                                                     const std::string& device) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  try {
    auto dev = ResolveDevice(device);
    if (!dev.ok()) return dev.status();
    std::unique_ptr<Net> net;
    if (options.model == "cnn" || options.model == "mlp") {
      // Initialised on the CPU from `seed`: the same weights everywhere. The process's
      // generator is put back afterwards, as a Python client's torch shares it.
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      const at::Tensor saved = gen.get_state();
      torch::manual_seed(seed);
      if (options.model == "cnn") {
        net = std::make_unique<BuiltinNet<CnnImpl>>(options.model);
      } else {
        net = std::make_unique<BuiltinNet<MlpImpl>>(options.model);
      }
      gen.set_state(saved);
    } else {
      auto script = LoadScript(options.model);
      if (!script.ok()) return script.status();
      net = *std::move(script);
    }
    if (net->HasOwnLoss() && options.loss != "auto") {
      return absl::InvalidArgumentError(
          StrCat("--loss ", options.loss, ": model ", options.model, " has a loss() method "
                 "of its own, which it trains and is evaluated with (leave --loss at auto)"));
    }
    auto model = std::make_unique<TorchModel>(options.model, options, std::move(net), *dev);
    if (!model->init_error().ok()) {
      return absl::InvalidArgumentError(
          StrCat("model ", options.model, ": ", model->init_error().message()));
    }
    if (model->dim() == 0) {
      return absl::InvalidArgumentError(StrCat("model ", options.model, " has no parameters"));
    }
    return std::unique_ptr<Model>(std::move(model));
  } catch (const std::exception& e) {
    return absl::InternalError(StrCat("model ", options.model, ": ", FirstLine(e)));
  }
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const std::string& name, uint64_t seed,
                                                     const std::string& device) {
  ModelOptions o;
  o.model = name;
  return Create(o, seed, device);
}

absl::StatusOr<std::vector<float>> FrozenValues(const Model& model) {
  std::vector<float> values;
  const std::vector<std::string>& frozen = model.parameter_groups().frozen;
  if (frozen.empty()) return values;
  auto arrays = model.StateArrays();
  if (!arrays.ok()) return arrays.status();
  values.reserve(model.parameter_groups().frozen_values);
  for (const std::string& name : frozen) {
    auto it = arrays->find(name);
    if (it == arrays->end()) {
      return absl::InternalError(StrCat(model.name(), ": no tensor ", name, " to freeze"));
    }
    for (size_t i = 0; i < it->second.elements(); ++i) {
      values.push_back(static_cast<float>(it->second.At(i)));
    }
  }
  return values;
}

absl::StatusOr<codecs::ModelLayout> ModelLayoutOf(const ModelOptions& options) {
  auto model = Model::Create(options, 0, "cpu");
  if (!model.ok()) return model.status();
  return (*model)->layout();
}

absl::StatusOr<codecs::ModelLayout> ModelLayoutOf(const std::string& name) {
  ModelOptions o;
  o.model = name;
  return ModelLayoutOf(o);
}

void SetTorchThreads(int n) { torch::set_num_threads(std::max(1, n)); }

}  // namespace fedlgc::core
