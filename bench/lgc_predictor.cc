// The probe's learned follower predictor (see lgc_predictor.h), over libtorch.
#include "bench/lgc_predictor.h"

#include <torch/torch.h>

#include <cmath>
#include <random>

namespace fedlgc::bench {

struct FollowerPredictor::Net : torch::nn::Module {
  Net()
      : l1(register_module("l1", torch::nn::Linear(kFeatures, 64))),
        l2(register_module("l2", torch::nn::Linear(64, 64))),
        l3(register_module("l3", torch::nn::Linear(64, 1))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(l1->forward(x));
    x = torch::relu(l2->forward(x));
    return l3->forward(x);
  }
  torch::nn::Linear l1, l2, l3;
};

FollowerPredictor::FollowerPredictor() {
  torch::manual_seed(1);
  net_ = std::make_unique<Net>();
}
FollowerPredictor::~FollowerPredictor() = default;

namespace {
float Rms(std::span<const float> v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  const double r = v.empty() ? 0 : std::sqrt(s / double(v.size()));
  return r > 0 ? static_cast<float>(r) : 1.0f;
}
}  // namespace

std::vector<float> FollowerPredictor::Features(std::span<const float> p, std::span<const float> q,
                                               std::span<const uint32_t> support, uint64_t dim) {
  const float sp = Rms(p), sq = Rms(q);
  std::vector<float> f(p.size() * kFeatures, 0.0f);
  for (size_t j = 0; j < p.size(); ++j) {
    float* row = &f[j * kFeatures];
    row[0] = p[j] / sp;
    row[1] = std::fabs(p[j]) / sp;
    row[2] = q[j] / sq;
    row[3 + static_cast<size_t>(uint64_t{support[j]} * kBuckets / dim)] = 1.0f;
  }
  return f;
}

void FollowerPredictor::Add(std::span<const float> features, std::span<const float> rebuilt) {
  const float s = Rms(rebuilt);
  static std::mt19937_64 rng(5);
  for (size_t j = 0; j < rebuilt.size(); ++j) {
    ++seen_;
    size_t slot = rows_;
    if (rows_ == kLimit) {  // reservoir sampling
      slot = std::uniform_int_distribution<size_t>(0, seen_ - 1)(rng);
      if (slot >= kLimit) continue;
    } else {
      ++rows_;
      x_.resize(rows_ * kFeatures);
      y_.resize(rows_);
    }
    std::copy_n(&features[j * kFeatures], kFeatures, &x_[slot * kFeatures]);
    y_[slot] = rebuilt[j] / s;
  }
}

std::pair<double, double> FollowerPredictor::Train(int steps, uint64_t seed) {
  torch::manual_seed(seed);
  const auto n = static_cast<int64_t>(rows_);
  torch::Tensor x = torch::from_blob(x_.data(), {n, int64_t{kFeatures}}, torch::kFloat32);
  torch::Tensor y = torch::from_blob(y_.data(), {n, 1}, torch::kFloat32);
  torch::optim::Adam opt(net_->parameters(), torch::optim::AdamOptions(1e-3));
  const auto mse = [&] {
    torch::NoGradGuard g;
    return torch::mse_loss(net_->forward(x), y).item<double>();
  };
  const double before = mse();
  for (int s = 0; s < steps; ++s) {
    torch::Tensor idx = torch::randint(n, {8192}, torch::kLong);
    opt.zero_grad();
    torch::Tensor loss =
        torch::mse_loss(net_->forward(x.index_select(0, idx)), y.index_select(0, idx));
    loss.backward();
    opt.step();
  }
  return {before, mse()};
}

std::vector<float> FollowerPredictor::Predict(std::span<const float> features) const {
  torch::NoGradGuard g;
  const auto n = static_cast<int64_t>(features.size() / kFeatures);
  torch::Tensor x = torch::from_blob(const_cast<float*>(features.data()), {n, int64_t{kFeatures}},
                                     torch::kFloat32);
  torch::Tensor out = net_->forward(x).contiguous();
  const float* o = out.data_ptr<float>();
  return std::vector<float>(o, o + n);
}

}  // namespace fedlgc::bench
