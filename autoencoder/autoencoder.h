// The LGC autoencoder (Abrahamyan et al., TNNLS 2021; docs/lgc.md): a 1-D
// convolutional encoder shared by all clients and one decoder per client, trained online
// at the coordinator on the clients' magnitude-sorted top-k values.
//
// Encoder (no padding, LeakyReLU after every layer):
//   Conv1d(1->64,k3,s2) -> Conv1d(64->128,k3,s2) -> Conv1d(128->256,k3,s2)
//   -> Conv1d(256->64,k3,s2) -> Conv1d(64->4,k1)            latent [1, 4, f^4(L)]
// Decoder of client i:
//   ConvT1d(4->32,k3,s2) -> ConvT1d(32->64) -> ConvT1d(64->128) -> ConvT1d(128->32)
//   -> linear interpolation to length L -> concat the innovation as channel 33
//   -> Conv1d(33->1,k1)                                       reconstruction [1, 1, L]
// Loss of a step over clients i = 1..n with values g_i and innovations inn_i, z_r the
// latent of one client r drawn per step:
//   w_rec * mean_i MSE(g_i, D_i(z_r, inn_i)) + w_sim * mean_{i != j} MSE(E(g_i), E(g_j)).
//
// Input order: LGC feeds the top-k values (selected by magnitude) sorted ascending by
// value, as in the authors' earlier DGC code, and sends the index permutation with them: a
// monotone signal the 1-D convolutions compress well. Sorted by magnitude instead, the
// signs form a random pattern the latent cannot carry (measured: reconstruction error did
// not move in 150 steps, against a 35x drop for ascending order).
//
// libtorch stays in autoencoder.cc: this header is torch-free. Weights travel as bytes with
// a format version and a CRC32C (SerializeEncoder / LoadEncoder, Serialize / Deserialize).
#ifndef FEDLGC_AUTOENCODER_AUTOENCODER_H_
#define FEDLGC_AUTOENCODER_AUTOENCODER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::autoencoder {

inline constexpr int64_t kLatentChannels = 4;
// Shortest input the four stride-2 convolutions accept (f^4(L) >= 1).
inline constexpr int64_t kMinLength = 31;

// Length after one k3/s2 convolution without padding: floor((x - 3) / 2) + 1.
constexpr int64_t ConvOut(int64_t x) { return (x - 3) / 2 + 1; }
// f^4(L): the latent's length per channel.
constexpr int64_t LatentLength(int64_t length) {
  return ConvOut(ConvOut(ConvOut(ConvOut(length))));
}

struct AeOptions {
  std::string optimizer = "sgd";  // sgd or adam
  double lr = 1e-3;
  double momentum = 0.0;  // sgd only
  double recon_weight = 0.5;
  double similarity_weight = 0.5;
  uint64_t seed = 1;           // initial weights and the per-step choice of r
  std::string device = "cpu";  // cpu, cuda, cuda:N or auto
};

// One client's training sample: its values on the common support, sorted, and its
// innovation (length L, zero where it sends nothing).
struct Sample {
  std::string client;
  std::vector<float> values;
  std::vector<float> innovation;
};

struct Losses {
  double reconstruction = 0;  // mean over clients of MSE(g_i, D_i(z_r, inn_i))
  double similarity = 0;      // mean over ordered pairs i != j of MSE(E(g_i), E(g_j))
  double total = 0;           // weighted sum
};

// Not thread-safe.
class Autoencoder {
 public:
  // An autoencoder for inputs of `length` values (>= kMinLength).
  static absl::StatusOr<std::unique_ptr<Autoencoder>> Create(int64_t length, AeOptions options);
  // Everything Serialize wrote (encoder, every decoder), with `options` for training.
  static absl::StatusOr<std::unique_ptr<Autoencoder>> Deserialize(std::string_view bytes,
                                                                  AeOptions options);
  virtual ~Autoencoder() = default;

  virtual int64_t length() const = 0;
  // Floats in a latent: kLatentChannels * LatentLength(length()).
  virtual int64_t latent_size() const = 0;
  virtual std::string device() const = 0;

  // E(values): `values` has length() entries; the latent is channel-major.
  virtual absl::StatusOr<std::vector<float>> Encode(std::span<const float> values) = 0;
  // D_client(latent, innovation): length() values. A client's decoder is created (from the
  // seed and the client id) on first use.
  virtual absl::StatusOr<std::vector<float>> Decode(const std::string& client,
                                                    std::span<const float> latent,
                                                    std::span<const float> innovation) = 0;

  // The loss of `batch` (two or more clients) with z_r the latent of batch[r].
  virtual absl::StatusOr<Losses> Evaluate(const std::vector<Sample>& batch, size_t r) = 0;
  // One optimizer step on `batch`, r drawn from the seed and `step`; the losses before it.
  virtual absl::StatusOr<Losses> TrainStep(const std::vector<Sample>& batch, uint64_t step) = 0;

  // The encoder alone, for the LGC leader: "FLAE" v1, kind encoder, L, tensors, CRC32C.
  virtual std::string SerializeEncoder() const = 0;
  // Replaces the encoder's weights; refuses bytes with a bad checksum, another version,
  // another length or another architecture, and leaves the weights unchanged then.
  virtual absl::Status LoadEncoder(std::string_view bytes) = 0;
  // `client`'s decoder alone (created first if it has none), for LGC's predict=1: "FLAE"
  // v1, kind decoder, L, tensors, CRC32C.
  virtual std::string SerializeDecoder(const std::string& client) = 0;
  // Replaces (or creates) `client`'s decoder from SerializeDecoder's bytes; refuses what
  // LoadEncoder refuses, leaving the weights unchanged.
  virtual absl::Status LoadDecoder(const std::string& client, std::string_view bytes) = 0;
  // Encoder and every decoder (coordinator checkpoints).
  virtual std::string Serialize() const = 0;
  virtual std::vector<std::string> clients() const = 0;
};

}  // namespace fedlgc::autoencoder

#endif  // FEDLGC_AUTOENCODER_AUTOENCODER_H_
