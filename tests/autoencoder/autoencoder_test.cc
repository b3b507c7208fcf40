// The LGC autoencoder against LGC's oracles (docs/lgc.md): latent [1, 4, f^4(L)] and
// a decoder of exactly L values; online training lowers both loss terms on correlated
// synthetic gradients; identical clients with zero innovation reconstruct identically;
// weights travel byte-exact and corrupted bytes are refused.
#include "autoencoder/autoencoder.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace fedlgc::autoencoder {
namespace {

std::unique_ptr<Autoencoder> Make(int64_t length, AeOptions o = {}) {
  auto ae = Autoencoder::Create(length, o);
  EXPECT_TRUE(ae.ok()) << ae.status();
  return std::move(ae).value();
}

// n clients with g_i = c + 0.1 * noise_i around a common heavy-tailed c, in the order of
// c's values ascending (the leader's support in LGC's order), as the coordinator sees
// them in the training stage.
std::vector<Sample> Correlated(int n, int64_t length, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::student_t_distribution<float> heavy(3.0f);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> c(length);
  for (float& x : c) x = 0.5f * heavy(rng);
  std::sort(c.begin(), c.end());  // the leader's order: its values ascending
  std::vector<Sample> out;
  for (int i = 0; i < n; ++i) {
    Sample s;
    s.client = "client-" + std::to_string(i);
    for (float x : c) s.values.push_back(x + 0.1f * noise(rng));
    s.innovation.assign(length, 0.0f);
    // The innovation: the client's 5 largest deviations from c, at their positions.
    std::vector<size_t> idx(length);
    for (size_t j = 0; j < idx.size(); ++j) idx[j] = j;
    std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(), [&](size_t a, size_t b) {
      return std::fabs(s.values[a] - c[a]) > std::fabs(s.values[b] - c[b]);
    });
    for (int k = 0; k < 5; ++k) s.innovation[idx[k]] = s.values[idx[k]];
    out.push_back(std::move(s));
  }
  return out;
}

TEST(Autoencoder, LatentIsFourByF4AndTheDecoderReturnsExactlyL) {
  EXPECT_EQ(ConvOut(31), 15);
  EXPECT_EQ(LatentLength(31), 1);
  for (int64_t length : {31, 32, 100, 1000, 2150, 4097}) {
    auto ae = Make(length);
    const int64_t f4 = ConvOut(ConvOut(ConvOut(ConvOut(length))));
    EXPECT_EQ(ae->latent_size(), 4 * f4) << length;
    std::vector<float> v(length, 0.25f);
    auto z = ae->Encode(v);
    ASSERT_TRUE(z.ok()) << z.status();
    EXPECT_EQ(static_cast<int64_t>(z->size()), 4 * f4);
    auto y = ae->Decode("a", *z, std::vector<float>(length, 0.0f));
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(static_cast<int64_t>(y->size()), length);
  }
  EXPECT_FALSE(Autoencoder::Create(30, {}).ok());
  auto ae = Make(100);
  EXPECT_EQ(ae->Encode(std::vector<float>(99)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ae->Decode("a", std::vector<float>(3), std::vector<float>(100)).ok());
  EXPECT_FALSE(ae->Decode("a", std::vector<float>(ae->latent_size()), std::vector<float>(9)).ok());
  AeOptions bad;
  bad.optimizer = "lbfgs";
  EXPECT_FALSE(Autoencoder::Create(100, bad).ok());
}

TEST(Autoencoder, OnlineTrainingLowersBothLossTerms) {
  constexpr int64_t kL = 512;
  AeOptions o;
  o.optimizer = "adam";
  o.lr = 1e-3;
  auto ae = Make(kL, o);
  // Fresh correlated gradients every round, as in the training stage; a held-out batch
  // measures both terms before and after.
  const auto held_out = Correlated(4, kL, 99);
  const Losses before = ae->Evaluate(held_out, 0).value();
  // A fresh encoder maps every input to almost the same latent (similarity ~1e-6): the
  // similarity term first grows while the encoder learns to carry information, then
  // training pulls the clients' latents together. Compare with its peak over the first
  // 30 steps.
  double peak_similarity = 0;
  for (uint64_t step = 0; step < 150; ++step) {
    ASSERT_TRUE(ae->TrainStep(Correlated(4, kL, step), step).ok());
    if (step < 30) {
      peak_similarity = std::max(peak_similarity, ae->Evaluate(held_out, 0)->similarity);
    }
  }
  const Losses after = ae->Evaluate(held_out, 0).value();
  EXPECT_LT(after.reconstruction, 0.1 * before.reconstruction)
      << before.reconstruction << " -> " << after.reconstruction;
  EXPECT_LT(after.similarity, 0.5 * peak_similarity)
      << "peak " << peak_similarity << " -> " << after.similarity;
  EXPECT_NEAR(after.total, 0.5 * after.reconstruction + 0.5 * after.similarity, 1e-6 * after.total);
  EXPECT_EQ(ae->clients().size(), 4u);
}

TEST(Autoencoder, IdenticalClientsWithZeroInnovationReconstructIdentically) {
  constexpr int64_t kL = 300;
  auto ae = Make(kL);
  // Train a little so the decoders are not at their initial weights.
  for (uint64_t step = 0; step < 5; ++step)
    ASSERT_TRUE(ae->TrainStep(Correlated(3, kL, step), step).ok());
  const auto g = Correlated(1, kL, 7)[0].values;
  const std::vector<float> zero(kL, 0.0f);
  auto za = ae->Encode(g), zb = ae->Encode(g);
  ASSERT_TRUE(za.ok() && zb.ok());
  EXPECT_EQ(*za, *zb);
  // The same decoder, the same latent and zero innovation: the same reconstruction.
  EXPECT_EQ(ae->Decode("client-1", *za, zero).value(), ae->Decode("client-1", *zb, zero).value());
  // A new client's decoder is made from the seed and its id: two autoencoders with the
  // same seed agree on it too.
  auto other = Make(kL);
  auto fresh = Make(kL);
  EXPECT_EQ(other->Decode("edge-9", *za, zero).value(), fresh->Decode("edge-9", *za, zero).value());
}

TEST(Autoencoder, EncoderWeightsTravelByteExactAndCorruptionIsRefused) {
  constexpr int64_t kL = 256;
  auto trained = Make(kL);
  for (uint64_t step = 0; step < 3; ++step)
    ASSERT_TRUE(trained->TrainStep(Correlated(2, kL, step), step).ok());
  const std::string bytes = trained->SerializeEncoder();
  AeOptions o;
  o.seed = 12345;  // different initial weights
  auto leader = Make(kL, o);
  const auto g = Correlated(1, kL, 3)[0].values;
  EXPECT_NE(leader->Encode(g).value(), trained->Encode(g).value());
  ASSERT_TRUE(leader->LoadEncoder(bytes).ok());
  EXPECT_EQ(leader->SerializeEncoder(), bytes);  // byte-exact
  EXPECT_EQ(leader->Encode(g).value(), trained->Encode(g).value());

  auto untouched = Make(kL, o);
  const std::string before = untouched->SerializeEncoder();
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x10;
  EXPECT_EQ(untouched->LoadEncoder(flipped).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(untouched->LoadEncoder(bytes.substr(0, bytes.size() - 9)).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_FALSE(untouched->LoadEncoder("").ok());
  // Another length is refused (the checksum is right, the shape is not).
  EXPECT_EQ(Make(kL + 1)->LoadEncoder(bytes).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(untouched->SerializeEncoder(), before) << "a refused load changed the weights";

  // The full state (encoder and every decoder) round-trips exactly too.
  const std::string full = trained->Serialize();
  auto restored = Autoencoder::Deserialize(full, {});
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->Serialize(), full);
  EXPECT_EQ((*restored)->clients(), trained->clients());
  std::string bad_full = full;
  bad_full[20] ^= 1;
  EXPECT_FALSE(Autoencoder::Deserialize(bad_full, {}).ok());
  EXPECT_FALSE(Autoencoder::Deserialize(bytes, {}).ok()) << "an encoder is not a full state";
}

TEST(Autoencoder, ADecoderTravelsByteExactAndDecodesAsAtTheCoordinator) {
  // LGC stage 3: a client decodes the round's latent with its own decoder, as the
  // coordinator will; the transferred decoder must give the very same floats.
  constexpr int64_t kL = 256;
  auto trained = Make(kL);
  for (uint64_t step = 0; step < 3; ++step)
    ASSERT_TRUE(trained->TrainStep(Correlated(3, kL, step), step).ok());
  const auto clients = trained->clients();
  ASSERT_GE(clients.size(), 2u);
  const std::string& me = clients[1];
  const std::string bytes = trained->SerializeDecoder(me);
  AeOptions o;
  o.seed = 777;
  auto client = Make(kL, o);
  const std::vector<float> zero(kL, 0.0f);
  const auto z = trained->Encode(Correlated(1, kL, 9)[0].values).value();
  EXPECT_NE(client->Decode(me, z, zero).value(), trained->Decode(me, z, zero).value());
  ASSERT_TRUE(client->LoadDecoder(me, bytes).ok());
  EXPECT_EQ(client->SerializeDecoder(me), bytes);
  EXPECT_EQ(client->Decode(me, z, zero).value(), trained->Decode(me, z, zero).value());
  // Another client's decoder differs; corrupted, cut, encoder or other-length bytes are
  // refused and leave the decoder as it was.
  EXPECT_NE(trained->SerializeDecoder(clients[0]), bytes);
  auto fresh = Make(kL, o);
  const std::string before = fresh->SerializeDecoder(me);
  std::string flipped = bytes;
  flipped[flipped.size() / 3] ^= 0x04;
  EXPECT_EQ(fresh->LoadDecoder(me, flipped).code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(fresh->LoadDecoder(me, bytes.substr(0, bytes.size() - 5)).ok());
  EXPECT_FALSE(fresh->LoadDecoder(me, trained->SerializeEncoder()).ok());
  EXPECT_FALSE(Make(kL + 2)->LoadDecoder(me, bytes).ok());
  EXPECT_EQ(fresh->SerializeDecoder(me), before) << "a refused load changed the weights";
}

}  // namespace
}  // namespace fedlgc::autoencoder
