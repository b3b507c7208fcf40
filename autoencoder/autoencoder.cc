// libtorch implementation of the LGC autoencoder (see autoencoder.h). The only file of
// autoencoder/ that includes torch.
#include "autoencoder/autoencoder.h"

#include <torch/torch.h>

#include <cstring>
#include <optional>

#include "autoencoder/envelope.h"
#include "base/str.h"
#include "codecs/byte_io.h"
#include "codecs/rng.h"

namespace fedlgc::autoencoder {

using codecs::ByteReader;
using codecs::PutScalar;
namespace {

namespace nn = torch::nn;

torch::Tensor Leaky(const torch::Tensor& x) { return torch::leaky_relu(x, 0.01); }

struct EncoderImpl : nn::Module {
  EncoderImpl()
      : c1(register_module("c1", nn::Conv1d(nn::Conv1dOptions(1, 64, 3).stride(2)))),
        c2(register_module("c2", nn::Conv1d(nn::Conv1dOptions(64, 128, 3).stride(2)))),
        c3(register_module("c3", nn::Conv1d(nn::Conv1dOptions(128, 256, 3).stride(2)))),
        c4(register_module("c4", nn::Conv1d(nn::Conv1dOptions(256, 64, 3).stride(2)))),
        c5(register_module("c5", nn::Conv1d(nn::Conv1dOptions(64, kLatentChannels, 1)))) {}
  // x: [b, 1, L] -> [b, 4, f^4(L)]
  torch::Tensor forward(torch::Tensor x) {
    x = Leaky(c1->forward(x));
    x = Leaky(c2->forward(x));
    x = Leaky(c3->forward(x));
    x = Leaky(c4->forward(x));
    return Leaky(c5->forward(x));
  }
  nn::Conv1d c1, c2, c3, c4, c5;
};
TORCH_MODULE(Encoder);

struct DecoderImpl : nn::Module {
  explicit DecoderImpl(int64_t length)
      : length(length),
        t1(register_module(
            "t1",
            nn::ConvTranspose1d(nn::ConvTranspose1dOptions(kLatentChannels, 32, 3).stride(2)))),
        t2(register_module("t2",
                           nn::ConvTranspose1d(nn::ConvTranspose1dOptions(32, 64, 3).stride(2)))),
        t3(register_module("t3",
                           nn::ConvTranspose1d(nn::ConvTranspose1dOptions(64, 128, 3).stride(2)))),
        t4(register_module("t4",
                           nn::ConvTranspose1d(nn::ConvTranspose1dOptions(128, 32, 3).stride(2)))),
        out(register_module("out", nn::Conv1d(nn::Conv1dOptions(33, 1, 1)))) {}
  // z: [b, 4, f^4(L)], innovation: [b, 1, L] -> [b, 1, L]
  torch::Tensor forward(torch::Tensor z, const torch::Tensor& innovation) {
    z = Leaky(t1->forward(z));
    z = Leaky(t2->forward(z));
    z = Leaky(t3->forward(z));
    z = Leaky(t4->forward(z));
    z = torch::nn::functional::interpolate(z, torch::nn::functional::InterpolateFuncOptions()
                                                  .size(std::vector<int64_t>{length})
                                                  .mode(torch::kLinear)
                                                  .align_corners(false));
    return out->forward(torch::cat({z, innovation}, 1));
  }
  int64_t length;
  nn::ConvTranspose1d t1, t2, t3, t4;
  nn::Conv1d out;
};
TORCH_MODULE(Decoder);

// Appends a module's parameters: count, then per tensor its name, element count and floats.
void PutModule(std::string* out, const nn::Module& m) {
  const auto params = m.named_parameters(/*recurse=*/true);
  PutScalar<uint32_t>(out, static_cast<uint32_t>(params.size()));
  for (const auto& p : params) {
    PutScalar<uint32_t>(out, static_cast<uint32_t>(p.key().size()));
    out->append(p.key());
    torch::Tensor t = p.value().detach().to(torch::kCPU).contiguous();
    PutScalar<uint64_t>(out, static_cast<uint64_t>(t.numel()));
    out->append(reinterpret_cast<const char*>(t.data_ptr<float>()), t.numel() * sizeof(float));
  }
}

// Reads what PutModule wrote into CPU tensors, checking names and sizes against `m`.
absl::StatusOr<std::vector<torch::Tensor>> GetModule(ByteReader* r, const nn::Module& m) {
  const auto params = m.named_parameters(true);
  uint32_t count = 0;
  if (!r->Get(&count)) return absl::DataLossError("autoencoder weights: truncated");
  if (count != params.size()) {
    return absl::InvalidArgumentError(StrCat("autoencoder weights: ", count, " tensors, expected ",
                                             params.size(), " (another architecture)"));
  }
  std::vector<torch::Tensor> out;
  for (const auto& p : params) {
    uint32_t name_len = 0;
    std::span<const uint8_t> name_bytes;
    uint64_t numel = 0;
    std::span<const uint8_t> data;
    if (!r->Get(&name_len) || !r->Take(name_len, &name_bytes) || !r->Get(&numel)) {
      return absl::DataLossError("autoencoder weights: truncated");
    }
    const std::string name(name_bytes.begin(), name_bytes.end());
    if (name != p.key() || numel != static_cast<uint64_t>(p.value().numel())) {
      return absl::InvalidArgumentError(
          StrCat("autoencoder weights: tensor ", name, " does not match ", p.key()));
    }
    if (!r->Take(numel * sizeof(float), &data)) {
      return absl::DataLossError("autoencoder weights: truncated");
    }
    torch::Tensor t = torch::empty(p.value().sizes(), torch::kFloat32);
    std::memcpy(t.data_ptr<float>(), data.data(), data.size());
    if (!torch::isfinite(t).all().item<bool>()) {
      return absl::InvalidArgumentError(StrCat("autoencoder weights: ", p.key(), " not finite"));
    }
    out.push_back(t);
  }
  return out;
}

void Assign(nn::Module& m, const std::vector<torch::Tensor>& values) {
  torch::NoGradGuard guard;
  auto params = m.parameters(true);
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(values[i]);
}

absl::StatusOr<torch::Device> ResolveDevice(const std::string& device) {
  if (device == "auto") {
    return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device("cpu");
  }
  if (device != "cpu" && device.rfind("cuda", 0) != 0) {
    return absl::InvalidArgumentError(StrCat("autoencoder: unknown device '", device, "'"));
  }
  torch::Device d(device);
  if (d.is_cuda() && !torch::cuda::is_available()) {
    return absl::FailedPreconditionError(
        StrCat("autoencoder: device ", device, ": this libtorch has no CUDA or no GPU is visible"));
  }
  return d;
}

class TorchAutoencoder final : public Autoencoder {
 public:
  TorchAutoencoder(int64_t length, AeOptions options, torch::Device device)
      : length_(length), options_(std::move(options)), device_(device) {
    torch::manual_seed(options_.seed);
    encoder_ = Encoder();
    encoder_->to(device_);
    ResetOptimizer();
  }

  int64_t length() const override { return length_; }
  int64_t latent_size() const override { return kLatentChannels * LatentLength(length_); }
  std::string device() const override { return device_.str(); }

  absl::StatusOr<std::vector<float>> Encode(std::span<const float> values) override {
    if (static_cast<int64_t>(values.size()) != length_) return LengthError("values", values.size());
    try {
      torch::NoGradGuard guard;
      encoder_->eval();
      return ToVector(encoder_->forward(Input(values)));
    } catch (const std::exception& e) {
      return absl::InternalError(StrCat("autoencoder encode: ", e.what()));
    }
  }

  absl::StatusOr<std::vector<float>> Decode(const std::string& client,
                                            std::span<const float> latent,
                                            std::span<const float> innovation) override {
    if (static_cast<int64_t>(latent.size()) != latent_size()) {
      return absl::InvalidArgumentError(
          StrCat("autoencoder: latent of ", latent.size(), " floats, expected ", latent_size()));
    }
    if (static_cast<int64_t>(innovation.size()) != length_) {
      return LengthError("innovation", innovation.size());
    }
    try {
      torch::NoGradGuard guard;
      Decoder& d = DecoderOf(client);
      d->eval();
      torch::Tensor z =
          torch::from_blob(const_cast<float*>(latent.data()),
                           {1, kLatentChannels, LatentLength(length_)}, torch::kFloat32)
              .to(device_);
      return ToVector(d->forward(z, Input(innovation)));
    } catch (const std::exception& e) {
      return absl::InternalError(StrCat("autoencoder decode: ", e.what()));
    }
  }

  absl::StatusOr<Losses> Evaluate(const std::vector<Sample>& batch, size_t r) override {
    if (absl::Status st = CheckBatch(batch, r); !st.ok()) return st;
    try {
      torch::NoGradGuard guard;
      encoder_->eval();
      auto [loss, out] = Forward(batch, r);
      return out;
    } catch (const std::exception& e) {
      return absl::InternalError(StrCat("autoencoder evaluate: ", e.what()));
    }
  }

  absl::StatusOr<Losses> TrainStep(const std::vector<Sample>& batch, uint64_t step) override {
    const size_t r = batch.empty() ? 0 : codecs::Mix64(options_.seed ^ (step + 1)) % batch.size();
    if (absl::Status st = CheckBatch(batch, r); !st.ok()) return st;
    try {
      encoder_->train();
      for (const Sample& s : batch) DecoderOf(s.client)->train();
      auto [loss, out] = Forward(batch, r);
      optimizer_->zero_grad();
      loss.backward();
      optimizer_->step();
      return out;
    } catch (const std::exception& e) {
      return absl::InternalError(StrCat("autoencoder train step: ", e.what()));
    }
  }

  std::string SerializeEncoder() const override {
    std::string body;
    PutModule(&body, *encoder_);
    return Seal(kKindEncoder, length_, body);
  }

  absl::Status LoadEncoder(std::string_view bytes) override {
    return LoadModule(bytes, kKindEncoder, *encoder_);
  }

  std::string SerializeDecoder(const std::string& client) override {
    std::string body;
    PutModule(&body, *DecoderOf(client));
    return Seal(kKindDecoder, length_, body);
  }

  absl::Status LoadDecoder(const std::string& client, std::string_view bytes) override {
    return LoadModule(bytes, kKindDecoder, *DecoderOf(client));
  }

  std::string Serialize() const override {
    std::string body;
    PutModule(&body, *encoder_);
    PutScalar<uint32_t>(&body, static_cast<uint32_t>(decoders_.size()));
    for (const auto& [client, d] : decoders_) {
      PutScalar<uint32_t>(&body, static_cast<uint32_t>(client.size()));
      body += client;
      PutModule(&body, *d);
    }
    return Seal(kKindFull, length_, body);
  }

  // Reads Serialize's output into this (fresh) autoencoder.
  absl::Status LoadFull(std::string_view body) {
    ByteReader r(body);
    auto enc = GetModule(&r, *encoder_);
    if (!enc.ok()) return enc.status();
    Assign(*encoder_, *enc);
    uint32_t n = 0;
    if (!r.Get(&n)) return absl::DataLossError("autoencoder weights: truncated");
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t len = 0;
      std::span<const uint8_t> client;
      if (!r.Get(&len) || !r.Take(len, &client)) {
        return absl::DataLossError("autoencoder weights: truncated");
      }
      Decoder& d = DecoderOf(std::string(client.begin(), client.end()));
      auto dec = GetModule(&r, *d);
      if (!dec.ok()) return dec.status();
      Assign(*d, *dec);
    }
    if (!r.done()) return absl::InvalidArgumentError("autoencoder weights: trailing bytes");
    return absl::OkStatus();
  }

  std::vector<std::string> clients() const override {
    std::vector<std::string> out;
    for (const auto& [c, d] : decoders_) out.push_back(c);
    return out;
  }

 private:
  // Checks the envelope, then replaces `module`'s weights only when every tensor reads.
  absl::Status LoadModule(std::string_view bytes, uint32_t kind, nn::Module& module) {
    int64_t length = 0;
    auto body = OpenEnvelope(bytes, kind, &length);
    if (!body.ok()) return body.status();
    if (length != length_) {
      return absl::InvalidArgumentError(
          StrCat("autoencoder weights: for length ", length, "; this one has ", length_));
    }
    ByteReader r(*body);
    auto values = GetModule(&r, module);
    if (!values.ok()) return values.status();
    if (!r.done()) return absl::InvalidArgumentError("autoencoder weights: trailing bytes");
    Assign(module, *values);
    return absl::OkStatus();
  }

  absl::Status LengthError(const char* what, size_t got) const {
    return absl::InvalidArgumentError(
        StrCat("autoencoder: ", what, " of ", got, " values, expected ", length_));
  }

  absl::Status CheckBatch(const std::vector<Sample>& batch, size_t r) const {
    if (batch.size() < 2) return absl::InvalidArgumentError("autoencoder: a batch needs 2 clients");
    if (r >= batch.size()) return absl::InvalidArgumentError("autoencoder: r out of range");
    for (const Sample& s : batch) {
      if (static_cast<int64_t>(s.values.size()) != length_) {
        return LengthError("values", s.values.size());
      }
      if (static_cast<int64_t>(s.innovation.size()) != length_) {
        return LengthError("innovation", s.innovation.size());
      }
    }
    return absl::OkStatus();
  }

  torch::Tensor Input(std::span<const float> v) const {
    return torch::from_blob(const_cast<float*>(v.data()), {1, 1, static_cast<int64_t>(v.size())},
                            torch::kFloat32)
        .to(device_)
        .clone();
  }

  static std::vector<float> ToVector(const torch::Tensor& t) {
    torch::Tensor c = t.detach().to(torch::kCPU).contiguous().flatten();
    return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }

  // The decoder of a client; created on first use with weights drawn from the seed and
  // the client id (so a coordinator restart recreates the same initial decoder), and
  // added to the optimizer.
  Decoder& DecoderOf(const std::string& client) {
    auto it = decoders_.find(client);
    if (it != decoders_.end()) return it->second;
    uint64_t h = codecs::Mix64(options_.seed ^ 0x6c6763ULL);
    for (char c : client) h = codecs::Mix64(h ^ static_cast<unsigned char>(c));
    torch::manual_seed(h);
    Decoder d(length_);
    d->to(device_);
    it = decoders_.emplace(client, d).first;
    std::vector<torch::Tensor> params = d->parameters();
    optimizer_->add_param_group(torch::optim::OptimizerParamGroup(params));
    return it->second;
  }

  void ResetOptimizer() {
    if (options_.optimizer == "adam") {
      optimizer_ = std::make_unique<torch::optim::Adam>(encoder_->parameters(),
                                                        torch::optim::AdamOptions(options_.lr));
    } else {
      optimizer_ = std::make_unique<torch::optim::SGD>(
          encoder_->parameters(),
          torch::optim::SGDOptions(options_.lr).momentum(options_.momentum));
    }
  }

  // The weighted loss of a batch and its two terms.
  std::pair<torch::Tensor, Losses> Forward(const std::vector<Sample>& batch, size_t r) {
    std::vector<torch::Tensor> g, latents;
    for (const Sample& s : batch) {
      g.push_back(Input(s.values));
      latents.push_back(encoder_->forward(g.back()));
    }
    torch::Tensor rec = torch::zeros({}, torch::TensorOptions().device(device_));
    for (size_t i = 0; i < batch.size(); ++i) {
      torch::Tensor y = DecoderOf(batch[i].client)->forward(latents[r], Input(batch[i].innovation));
      rec = rec + torch::mse_loss(y, g[i]);
    }
    rec = rec / static_cast<double>(batch.size());
    torch::Tensor sim = torch::zeros({}, torch::TensorOptions().device(device_));
    for (size_t i = 0; i < batch.size(); ++i) {
      for (size_t j = 0; j < batch.size(); ++j) {
        if (i != j) sim = sim + torch::mse_loss(latents[i], latents[j]);
      }
    }
    sim = sim / static_cast<double>(batch.size() * (batch.size() - 1));
    torch::Tensor total = options_.recon_weight * rec + options_.similarity_weight * sim;
    Losses out;
    out.reconstruction = rec.item<double>();
    out.similarity = sim.item<double>();
    out.total = total.item<double>();
    return {total, out};
  }

  const int64_t length_;
  const AeOptions options_;
  const torch::Device device_;
  Encoder encoder_{nullptr};
  std::map<std::string, Decoder> decoders_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Autoencoder>> Autoencoder::Create(int64_t length,
                                                                 AeOptions options) {
  if (length < kMinLength) {
    return absl::InvalidArgumentError(
        StrCat("autoencoder: length ", length, " is below the minimum ", kMinLength));
  }
  if (options.optimizer != "sgd" && options.optimizer != "adam") {
    return absl::InvalidArgumentError(
        StrCat("autoencoder: unknown optimizer '", options.optimizer, "' (sgd, adam)"));
  }
  if (!(options.lr > 0) || options.recon_weight < 0 || options.similarity_weight < 0) {
    return absl::InvalidArgumentError("autoencoder: lr must be > 0 and loss weights >= 0");
  }
  try {
    auto device = ResolveDevice(options.device);
    if (!device.ok()) return device.status();
    return std::unique_ptr<Autoencoder>(new TorchAutoencoder(length, std::move(options), *device));
  } catch (const std::exception& e) {
    return absl::InternalError(StrCat("autoencoder: ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<Autoencoder>> Autoencoder::Deserialize(std::string_view bytes,
                                                                      AeOptions options) {
  int64_t length = 0;
  auto body = OpenEnvelope(bytes, kKindFull, &length);
  if (!body.ok()) return body.status();
  auto ae = Create(length, std::move(options));
  if (!ae.ok()) return ae.status();
  try {
    if (absl::Status st = static_cast<TorchAutoencoder&>(**ae).LoadFull(*body); !st.ok()) return st;
  } catch (const std::exception& e) {
    return absl::InternalError(StrCat("autoencoder: ", e.what()));
  }
  return ae;
}

}  // namespace fedlgc::autoencoder
