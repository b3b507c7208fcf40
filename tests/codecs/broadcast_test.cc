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

using absl::StatusCode;
using testing::FailsWith;

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

// The mean distance (in steps) of the held model from the true one over versions 21-100,
// and the compression of the deltas against fp32.
std::pair<double, double> LagAndRatio(const std::string& codec) {
  Trajectory t(3);
  auto enc = Encoder(codec, t.model());
  std::vector<float> previous = t.model();
  double lag = 0;
  uint64_t bytes = 0;
  for (uint64_t v = 1; v <= 100; ++v) {
    const std::vector<float> now = t.Step();
    auto d = enc->Advance(v, now);
    EXPECT_TRUE(d.ok()) << d.status();
    bytes += (*d)->wire_bytes();
    if (v > 20) lag += Distance(enc->held(), now) / Distance(now, previous) / 80;
    previous = now;
  }
  return {lag, 100.0 * kDim * 4 / bytes};
}

TEST(Broadcast, FourBitLevelsOfTheLargestMagnitudeKeepTheHeldModelCloser) {
  // The broadcast needs no unbiased codec (its error feedback is exact): QSGD's levels of
  // the bucket's largest magnitude (norm=linf) err far less than levels of its L2 norm.
  const auto [l2_lag, l2_ratio] = LagAndRatio("qsgd(bits=4,bucket=512)");
  const auto [linf_lag, linf_ratio] = LagAndRatio("qsgd(bits=4,bucket=512,norm=linf)");
  std::printf("held model behind by %.3f steps (l2) and %.3f (linf), at %.2fx and %.2fx\n",
              l2_lag, linf_lag, l2_ratio, linf_ratio);
  EXPECT_LT(linf_lag, 0.3);
  EXPECT_GT(l2_lag, 4 * linf_lag);
  EXPECT_NEAR(linf_ratio, l2_ratio, 0.05 * l2_ratio) << "the same bytes";
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
  EXPECT_TRUE(FailsWith(ApplyDelta(enc->codec(), bad, &version, &copy), StatusCode::kDataLoss));
  EXPECT_EQ(copy, model);
  EXPECT_EQ(version, 0u);
  // A frame left out: the delta no longer tiles the model.
  bad = good;
  bad.frames.pop_back();
  EXPECT_TRUE(FailsWith(ApplyDelta(enc->codec(), bad, &version, &copy), InputError::kMalformed));
  // A model that is not the sender's (another start): the rebuild's CRC differs.
  std::vector<float> other = model;
  other[17] += 1.0f;
  auto st = ApplyDelta(enc->codec(), good, &version, &other);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  // Another codec's frames.
  auto fp16 = testing::Make("fp16");
  EXPECT_TRUE(FailsWith(ApplyDelta(*fp16, good, &version, &copy), InputError::kWrongCodec));
  EXPECT_EQ(copy, model);
  // The wire format refuses what is not a delta.
  std::string bytes = SerializeDelta(good);
  EXPECT_TRUE(FailsWith(ParseDelta(bytes.substr(0, bytes.size() - 1)), InputError::kMalformed));
  EXPECT_TRUE(FailsWith(ParseDelta(bytes + "x"), InputError::kMalformed));
  EXPECT_TRUE(FailsWith(ParseDelta("FLGB"), InputError::kMalformed));
  bytes[5] ^= 0x01;  // from = 1, to = 1
  EXPECT_TRUE(FailsWith(ParseDelta(bytes), InputError::kMalformed));
  // And the good one still applies.
  EXPECT_TRUE(ApplyDelta(enc->codec(), good, &version, &copy).ok());
  EXPECT_EQ(0, std::memcmp(copy.data(), enc->held().data(), kDim * sizeof(float)));
}

TEST(Broadcast, AChainTravelsAsBytesAndAppliesAllOrNothing) {
  Trajectory t(17);
  auto enc = Encoder("qsgd(bits=4,bucket=512)", t.model());
  std::vector<float> at2;
  for (uint64_t v = 1; v <= 5; ++v) {
    ASSERT_TRUE(enc->Advance(v, t.Step()).ok());
    if (v == 2) at2.assign(enc->held().begin(), enc->held().end());
  }
  const auto deltas = enc->ChainFrom(2);
  ASSERT_EQ(deltas.size(), 3u);
  const std::string bytes = SerializeChain(5, enc->held_crc(), deltas);
  uint64_t wire = 4 + 1 + 8 + 4 + 4;
  for (const BroadcastDelta* d : deltas) wire += 4 + d->wire_bytes();
  EXPECT_EQ(bytes.size(), wire);
  auto chain = ParseChain(bytes);
  ASSERT_TRUE(chain.ok()) << chain.status();
  ASSERT_EQ(chain->deltas.size(), 3u);
  std::vector<float> model = at2;
  uint64_t version = 2;
  ASSERT_TRUE(ApplyChain(enc->codec(), *chain, &version, &model).ok());
  EXPECT_EQ(version, 5u);
  EXPECT_EQ(0, std::memcmp(model.data(), enc->held().data(), kDim * sizeof(float)));
  // Up to date: an empty chain only checks the model's CRC.
  auto empty = ParseChain(SerializeChain(5, enc->held_crc(), {}));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(ApplyChain(enc->codec(), *empty, &version, &model).ok());
  std::vector<float> drifted = model;
  drifted[3] = std::nextafter(drifted[3], 1.0f);
  EXPECT_EQ(ApplyChain(enc->codec(), *empty, &version, &drifted).code(),
            absl::StatusCode::kDataLoss);
  // A model one ulp off at the start: the last CRC differs, and nothing is applied.
  model = at2;
  model[100] = std::nextafter(model[100], 1.0f);
  const std::vector<float> before = model;
  version = 2;
  EXPECT_EQ(ApplyChain(enc->codec(), *chain, &version, &model).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(version, 2u);
  EXPECT_EQ(model, before);
  // Bytes that are not a chain, or a chain with a gap or the wrong end.
  EXPECT_TRUE(FailsWith(ParseChain(bytes.substr(0, bytes.size() - 3)), InputError::kMalformed));
  EXPECT_TRUE(FailsWith(ParseChain(bytes + "x"), InputError::kMalformed));
  EXPECT_TRUE(
      FailsWith(ParseChain(SerializeChain(6, enc->held_crc(), deltas)), InputError::kMalformed))
      << "wrong end";
  const BroadcastDelta* gap[] = {deltas[0], deltas[2]};
  EXPECT_TRUE(
      FailsWith(ParseChain(SerializeChain(5, enc->held_crc(), gap)), InputError::kMalformed))
      << "gap";
  std::string huge = bytes;
  huge[4 + 1 + 8 + 4 + 3] = '\x7f';  // a count (2^31 and more) the bytes cannot hold
  EXPECT_TRUE(FailsWith(ParseChain(huge), InputError::kMalformed));
}

TEST(Broadcast, ARestoredEncoderGoesOnWithTheSameBytes) {
  Trajectory t(19);
  auto enc = Encoder("qsgd(bits=4,bucket=512)", t.model(), /*window=*/3);
  for (uint64_t v = 1; v <= 5; ++v) ASSERT_TRUE(enc->Advance(v, t.Step()).ok());
  const std::string state = enc->SaveState();
  BroadcastOptions o;
  o.codec = "qsgd(bits=4,bucket=512)";
  o.window = 3;
  o.max_frame_bytes = 16384;
  auto restored = BroadcastEncoder::Restore(o, state);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->version(), 5u);
  EXPECT_EQ((*restored)->held_crc(), enc->held_crc());
  ASSERT_EQ((*restored)->ChainFrom(2).size(), 3u) << "the window survives";
  // The next version codes to the same bytes from both.
  const std::vector<float> next = t.Step();
  auto a = enc->Advance(6, next);
  auto b = (*restored)->Advance(6, next);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(SerializeDelta(**a), SerializeDelta(**b));
  // A damaged state is refused.
  EXPECT_TRUE(FailsWith(BroadcastEncoder::Restore(o, state.substr(0, state.size() - 1)),
                        InputError::kMalformed));
  EXPECT_TRUE(FailsWith(BroadcastEncoder::Restore(o, "FLGS"), InputError::kMalformed));
  std::string other = state;
  other[4 + 1 + 8 + 8 + 40] ^= 0x01;  // a held value changed: the deltas no longer end at it
  EXPECT_TRUE(FailsWith(BroadcastEncoder::Restore(o, other), InputError::kMalformed));
}

TEST(Broadcast, RefusesStatefulCodecsAndBadOptions) {
  BroadcastOptions o;
  o.codec = "ef(topk(ratio=0.01))";
  EXPECT_TRUE(FailsWith(BroadcastEncoder::Create(o, std::vector<float>(10, 0.0f), 0),
                        StatusCode::kInvalidArgument));
  o.codec = "qsgd(bits=4)";
  o.window = 0;
  EXPECT_TRUE(FailsWith(BroadcastEncoder::Create(o, std::vector<float>(10, 0.0f), 0),
                        StatusCode::kInvalidArgument));
  o.window = 2;
  EXPECT_TRUE(
      FailsWith(BroadcastEncoder::Create(o, {1.0f, std::nanf("")}, 0), InputError::kNonFinite));
  auto e = BroadcastEncoder::Create(o, std::vector<float>(10, 0.0f), 3);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(
      FailsWith((*e)->Advance(3, std::vector<float>(10, 1.0f)), StatusCode::kInvalidArgument))
      << "not after 3";
  EXPECT_TRUE(
      FailsWith((*e)->Advance(4, std::vector<float>(9, 1.0f)), StatusCode::kInvalidArgument))
      << "another size";
}

}  // namespace
}  // namespace fedlgc::codecs
