// The compressed broadcast (codecs/broadcast.h): receivers rebuild the sender's held model
// bit for bit, error feedback keeps the held model near the true one, chains and full
// downloads are chosen by size, and a damaged delta is refused without touching the model.
#include "codecs/broadcast.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

constexpr size_t kDim = 20000;

// A model that moves like a trained one: each version adds a gradient-like step.
class Trajectory {
 public:
  explicit Trajectory(uint64_t seed) : rng_(seed), model_(testing::GradientLike(kDim, seed)) {}
  const std::vector<float>& Step() {
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (float& x : model_) x += 0.003f * g(rng_);
    return model_;
  }
  const std::vector<float>& model() const { return model_; }

 private:
  std::mt19937_64 rng_;
  std::vector<float> model_;
};

double Distance(std::span<const float> a, std::span<const float> b) {
  double s = 0;
  for (size_t j = 0; j < a.size(); ++j) s += (double(a[j]) - b[j]) * (double(a[j]) - b[j]);
  return std::sqrt(s);
}

std::unique_ptr<BroadcastEncoder> Encoder(const std::string& codec,
                                          const std::vector<float>& initial, size_t window = 8) {
  BroadcastOptions o;
  o.codec = codec;
  o.window = window;
  o.max_frame_bytes = 16384;
  auto e = BroadcastEncoder::Create(o, initial, 0);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(e).value();
}

TEST(Broadcast, ReceiversRebuildTheHeldModelBitForBitOverManyVersions) {
  for (const std::string spec :
       {"qsgd(bits=4,bucket=512)", "topk(ratio=0.05,values=qsgd(bits=8))", "natural", "fp16"}) {
    Trajectory t(7);
    auto enc = Encoder(spec, t.model());
    std::vector<float> receiver = t.model();
    uint64_t version = 0;
    for (uint64_t v = 1; v <= 60; ++v) {
      auto d = enc->Advance(v, t.Step());
      ASSERT_TRUE(d.ok()) << spec << ": " << d.status();
      // Through the wire format.
      auto parsed = ParseDelta(SerializeDelta(**d));
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      ASSERT_TRUE(ApplyDelta(enc->codec(), *parsed, &version, &receiver).ok()) << spec;
      ASSERT_EQ(version, v);
      ASSERT_EQ(0, std::memcmp(receiver.data(), enc->held().data(), kDim * sizeof(float)))
          << spec << " differs at version " << v;
      ASSERT_EQ(ModelCrc(receiver), enc->held_crc());
    }
  }
}

// Error feedback: the held model's miss does not grow with the versions (it is one
// delta's quantization error, not a sum of them); without it (each delta coded against
// the true previous model) the miss drifts like a random walk. Scaled: unscaled 4-bit
// QSGD on buckets of 512 fed back grows without bound (its variance exceeds the signal).
TEST(Broadcast, ErrorFeedbackKeepsTheHeldModelNearTheTrueOne) {
  Trajectory t(3);
  auto enc = Encoder("qsgd(bits=4,bucket=512)", t.model());
  auto plain = testing::Make("qsgd(bits=4,bucket=512)");
  std::vector<float> open_loop = t.model(), previous = t.model();
  double step_norm = 0, worst_feedback = 0;
  for (uint64_t v = 1; v <= 200; ++v) {
    const std::vector<float> now = t.Step();
    step_norm = Distance(now, previous);
    ASSERT_TRUE(enc->Advance(v, now).ok());
    worst_feedback = std::max(worst_feedback, Distance(enc->held(), now));
    // Open loop: code the true step, add it, never look back.
    std::vector<float> diff(kDim);
    for (size_t j = 0; j < kDim; ++j) diff[j] = now[j] - previous[j];
    std::vector<Frame> frames;
    EncodeOptions eo;
    eo.seed = v;
    ASSERT_TRUE(plain->Encode(diff, eo, &frames).ok());
    ASSERT_TRUE(DecodeAll(*plain, frames, diff).ok());
    for (size_t j = 0; j < kDim; ++j) open_loop[j] += diff[j];
    previous = now;
  }
  const double open_miss = Distance(open_loop, t.model());
  std::printf("after 200 versions: held misses by %.3f steps (worst %.3f), open loop by %.3f\n",
              Distance(enc->held(), t.model()) / step_norm, worst_feedback / step_norm,
              open_miss / step_norm);
  // Steady state: with c = cos^2 of a delta and its decoding (about 0.4 here), the miss
  // settles at sqrt((1 - c) / c) steps, about 1.2.
  EXPECT_LT(worst_feedback, 2.0 * step_norm);
  EXPECT_GT(open_miss, 5 * worst_feedback);
}

TEST(Broadcast, FourBitDeltasCostAboutAnEighthOfTheModel) {
  Trajectory t(5);
  const std::vector<float> initial = t.model();
  const std::vector<float> next = t.Step();
  auto enc = Encoder("qsgd(bits=4,bucket=512)", initial);
  auto d = enc->Advance(1, next);
  ASSERT_TRUE(d.ok());
  const double ratio = double(kDim * sizeof(float)) / double((*d)->wire_bytes());
  std::printf("4-bit delta: %llu bytes for a %zu-byte model (%.2fx)\n",
              static_cast<unsigned long long>((*d)->wire_bytes()), kDim * sizeof(float), ratio);
  EXPECT_GT(ratio, 7.5);  // 4 bits + a float per 512 + frame headers
  // Elias coding of the levels goes past 8x.
  auto elias = Encoder("qsgd(bits=4,bucket=512,elias=1)", initial);
  auto e = elias->Advance(1, next);
  ASSERT_TRUE(e.ok());
  const double elias_ratio = double(kDim * sizeof(float)) / double((*e)->wire_bytes());
  std::printf("4-bit Elias delta: %.2fx\n", elias_ratio);
  EXPECT_GT(elias_ratio, 8.0);
  auto fp32 = Encoder("fp32", initial);
  auto whole = fp32->Advance(1, next);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(0, std::memcmp(fp32->held().data(), next.data(), kDim * sizeof(float)))
      << "fp32 deltas rebuild the true model exactly";
}

TEST(Broadcast, ALateReceiverTakesTheChainWhenItIsSmallerAndTheFullModelOtherwise) {
  Trajectory t(11);
  auto enc = Encoder("qsgd(bits=4,bucket=512)", t.model(), /*window=*/4);
  std::vector<float> start = t.model();
  std::vector<std::vector<float>> held = {start};
  for (uint64_t v = 1; v <= 6; ++v) {
    ASSERT_TRUE(enc->Advance(v, t.Step()).ok());
    held.emplace_back(enc->held().begin(), enc->held().end());
  }
  // Window 4 keeps 2->3 .. 5->6: from version 3, three deltas catch up.
  auto chain = enc->ChainFrom(3);
  ASSERT_EQ(chain.size(), 3u);
  std::vector<float> late = held[3];
  uint64_t version = 3;
  for (const BroadcastDelta* d : chain) ASSERT_TRUE(ApplyDelta(enc->codec(), *d, &version, &late).ok());
  EXPECT_EQ(version, 6u);
  EXPECT_EQ(0, std::memcmp(late.data(), enc->held().data(), kDim * sizeof(float)));
  // Older than the window: a full download.
  EXPECT_TRUE(enc->ChainFrom(1).empty());
  EXPECT_TRUE(enc->ChainFrom(6).empty()) << "up to date";
  // fp32 deltas cost more than the model: always the full download.
  auto fp32 = Encoder("fp32", start);
  ASSERT_TRUE(fp32->Advance(1, t.Step()).ok());
  EXPECT_TRUE(fp32->ChainFrom(0).empty());
}

TEST(Broadcast, ADamagedOrMisplacedDeltaIsRefusedAndTheModelKept) {
  Trajectory t(13);
  const std::vector<float> model = t.model();  // what receivers hold at version 0
  auto enc = Encoder("qsgd(bits=8,bucket=256)", model);
  auto d1 = enc->Advance(1, t.Step());
  ASSERT_TRUE(d1.ok());
  const BroadcastDelta good = **d1;
  // Not from this version.
  uint64_t version = 5;
  std::vector<float> copy = model;
  EXPECT_EQ(ApplyDelta(enc->codec(), good, &version, &copy).code(),
            absl::StatusCode::kFailedPrecondition);
  // A frame's byte flipped: its own CRC catches it.
  version = 0;
  BroadcastDelta bad = good;
  bad.frames[0][bad.frames[0].size() / 2] ^= 0x10;
  EXPECT_FALSE(ApplyDelta(enc->codec(), bad, &version, &copy).ok());
  EXPECT_EQ(copy, model);
  EXPECT_EQ(version, 0u);
  // A frame left out: the delta no longer tiles the model.
  bad = good;
  bad.frames.pop_back();
  EXPECT_FALSE(ApplyDelta(enc->codec(), bad, &version, &copy).ok());
  // A model that is not the sender's (another start): the rebuild's CRC differs.
  std::vector<float> other = model;
  other[17] += 1.0f;
  auto st = ApplyDelta(enc->codec(), good, &version, &other);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  // Another codec's frames.
  auto fp16 = testing::Make("fp16");
  EXPECT_FALSE(ApplyDelta(*fp16, good, &version, &copy).ok());
  EXPECT_EQ(copy, model);
  // The wire format refuses what is not a delta.
  std::string bytes = SerializeDelta(good);
  EXPECT_FALSE(ParseDelta(bytes.substr(0, bytes.size() - 1)).ok());
  EXPECT_FALSE(ParseDelta(bytes + "x").ok());
  EXPECT_FALSE(ParseDelta("FLGB").ok());
  bytes[5] ^= 0x01;  // from = 1, to = 1
  EXPECT_FALSE(ParseDelta(bytes).ok());
  // And the good one still applies.
  EXPECT_TRUE(ApplyDelta(enc->codec(), good, &version, &copy).ok());
  EXPECT_EQ(0, std::memcmp(copy.data(), enc->held().data(), kDim * sizeof(float)));
}

TEST(Broadcast, RefusesStatefulCodecsAndBadOptions) {
  BroadcastOptions o;
  o.codec = "ef(topk(ratio=0.01))";
  EXPECT_FALSE(BroadcastEncoder::Create(o, std::vector<float>(10, 0.0f), 0).ok());
  o.codec = "qsgd(bits=4)";
  o.window = 0;
  EXPECT_FALSE(BroadcastEncoder::Create(o, std::vector<float>(10, 0.0f), 0).ok());
  o.window = 2;
  EXPECT_FALSE(BroadcastEncoder::Create(o, {1.0f, std::nanf("")}, 0).ok());
  auto e = BroadcastEncoder::Create(o, std::vector<float>(10, 0.0f), 3);
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE((*e)->Advance(3, std::vector<float>(10, 1.0f)).ok()) << "not after 3";
  EXPECT_FALSE((*e)->Advance(4, std::vector<float>(9, 1.0f)).ok()) << "another size";
}

}  // namespace
}  // namespace fedlgc::codecs
