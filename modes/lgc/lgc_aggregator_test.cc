// The coordinator's LGC arithmetic without gRPC. Stage 2 (the compact codes, from the
// first round): the leader's cells count as they decode and each follower as its exact
// rebuild, packed with zstd or not, on supports the ramp widens; stage 3 (train > 0): the
// autoencoder trained on stage 2's rebuilds codes the leader's values and each client is
// rebuilt exactly from the latent it named. States of the protocols before still load.
#include "modes/lgc/lgc_aggregator.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <tuple>

#include "base/file.h"
#include "base/str.h"
#include "codecs/input_error.h"
#include "codecs/registry.h"
#include "codecs/zstd_codec.h"
#include "core/state_file.h"
#include "gtest/gtest.h"
#include "modes/lgc/lgc_codes.h"
#include "modes/lgc/lgc_payload.h"
#include "modes/lgc/lgc_state.h"

namespace fedlgc::modes {
namespace {

constexpr uint64_t kDim = 2048;

std::string TempDir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/lgc-driver-" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

std::vector<float> Gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

std::span<const uint8_t> View(const std::string& b) {
  return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(b.data()), b.size());
}
std::span<const uint8_t> Span(const std::string& s) { return View(s); }

std::unique_ptr<LgcAggregator> Make(const std::string& spec, const std::string& dir,
                                    uint64_t warmup = 0, uint64_t committed = 0) {
  auto plan = lgc::ParseLgcSpec(spec);
  EXPECT_TRUE(plan.ok() && plan->has_value()) << plan.status();
  auto d = LgcAggregator::Create(**plan, warmup, kDim, dir, committed, 1, "cpu");
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? std::move(d).value() : nullptr;
}

// One stage-2 round `round` of `lgc` (plan `spec`): the leader c0 sends the cells of u0's
// top-k, the follower c1 (weight 3) its 2-bit correction of u1 against them. Checks that the
// mean is exactly that of what the two computed, and returns the outcome.
LgcAggregator::Outcome CellsRound(LgcAggregator& lgc, const std::string& spec, uint64_t round,
                                  const std::vector<float>& u0, const std::vector<float>& u1) {
  const lgc::LgcPlan plan = lgc::ParseLgcSpec(spec).value().value();
  const size_t k = lgc.KAt(round);
  const std::vector<uint32_t> support = lgc::SelectSupportSet(u0, k);
  std::vector<float> sent;
  const std::string leader = lgc::EncodeLeaderCells(support, lgc::Gather(u0, support), kDim, &sent);
  lgc::BitCorrection c = lgc::CorrectBits(lgc::Gather(u1, support), sent, 2);
  c.reference = lgc::ReferenceOf(support, sent);
  std::map<std::string, PayloadCollector::Payload> p;
  p["c0"] = {std::string(lgc::kLeaderCellsSpec),
             lgc::PackLeaderCells(plan, leader, support, kDim).value(), 1};
  p["c1"] = {std::string(lgc::kBitCorrectionSpec),
             lgc::PackBitCorrection(plan, lgc::EncodeBitCorrection(c).value(), c).value(), 3};
  for (const auto& [id, payload] : p) {
    EXPECT_TRUE(lgc.Validate(round, payload.spec, View(payload.body)).ok()) << id;
  }
  coordinator::AggregatorOptions unclipped;
  unclipped.clip = 0;
  auto out = lgc.Aggregate(round, "c0", p, nullptr, unclipped);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  EXPECT_EQ(out->counted, (std::set<std::string>{"c0", "c1"}));
  EXPECT_EQ(out->rebuild_mismatches, 0);
  for (size_t j = 0; j < k; ++j) {
    EXPECT_EQ(out->delta[support[j]], static_cast<float>((1.0 * sent[j] + 3.0 * c.sent[j]) / 4))
        << j;
  }
  return *std::move(out);
}

// A client's autoencoder in stage 3: the shared encoder, its own decoder as the
// coordinator serves it.
std::unique_ptr<autoencoder::Autoencoder> ClientAutoencoder(LgcAggregator& lgc,
                                                            const std::string& id) {
  auto ae = autoencoder::Autoencoder::Create(static_cast<int64_t>(lgc.k()), {}).value();
  EXPECT_TRUE(ae->LoadEncoder(lgc.EncoderBytes()).ok());
  auto blob = lgc.Decoder(id);
  EXPECT_NE(blob, nullptr);
  if (blob) {
    EXPECT_TRUE(ae->LoadDecoder(id, blob->bytes).ok());
  }
  return ae;
}

// The leader c0 of a stage-3 round: the latent of its top-k values, the latent as the
// coordinator decodes and pushes it (z), and its correction against its own prediction.
struct PredictLeader {
  lgc::LeaderPayload payload;
  std::vector<float> values;  // on its support
  std::vector<float> z;
  lgc::Correction correction;
};

PredictLeader MakePredictLeader(LgcAggregator& lgc, const codecs::DenseCodec& dense,
                                const std::vector<float>& u, size_t k_inn) {
  const size_t k = lgc.k();
  const std::vector<float> zeros(k, 0.0f);
  auto ae0 = ClientAutoencoder(lgc, "c0");
  PredictLeader l;
  l.payload.support = lgc::SelectSupport(u, k);
  l.values = lgc::Gather(u, l.payload.support);
  std::vector<float> normalized = l.values;
  for (float& x : normalized) x /= lgc::RmsScale(l.values);
  l.payload.latent = ae0->Encode(normalized).value();
  l.payload.innovation = zeros;
  const std::string first = lgc::EncodeLeader(l.payload, kDim, dense, 2).value();
  l.z = lgc::DecodeLeader(View(first), kDim, dense, l.payload.latent.size())->latent;
  const auto pushed = lgc.LeaderPayloadBytes(2, View(first)).value();
  EXPECT_EQ(pushed.latent,
            std::string(reinterpret_cast<const char*>(l.z.data()), l.z.size() * 4));
  EXPECT_EQ(pushed.support,
            std::string(reinterpret_cast<const char*>(l.payload.support.data()), k * 4));
  l.correction = lgc::Correct(l.values, ae0->Decode("c0", l.z, zeros).value(), k_inn);
  l.payload.scale = l.correction.gain;
  l.payload.step = l.correction.step;
  l.payload.sent_crc = l.correction.sent_crc;
  l.payload.innovation = l.correction.innovation;
  return l;
}

TEST(LgcAggregator, Stage3RebuildsExactlyWhatEachClientComputedFromTheLatentItNamed) {
  // train=1: round 1 (the compact codes) trains the autoencoder on its rebuilds. Round 2:
  // the leader sends the latent of its values on its own top-k; the others decode it with
  // their own decoders (fetched as blobs) and send a gain and an innovation; the
  // coordinator's mean is made of exactly the values the clients computed, placed on the
  // leader's support, and a correction against another latent does not count.
  // ae_wait=1: round 2 waits for the training, so that it is the switch.
  const std::string spec = "lgc(ratio=0.05,train=1,ae_steps=2,innovation=0.1,ae_wait=1)";
  const std::vector<float> u0 = Gaussian(kDim, 2), u1 = Gaussian(kDim, 3);
  const std::string dir = TempDir("stage3");
  auto made = Make(spec, dir);
  ASSERT_NE(made, nullptr);
  LgcAggregator& lgc = *made;
  EXPECT_EQ(lgc.BeginRound(1).value(), LgcStage::kCells);
  const LgcAggregator::Outcome trained = CellsRound(lgc, spec, 1, u0, u1);
  EXPECT_GE(trained.ae_backlog, 0) << "round 1 trains";
  EXPECT_GT(trained.values_cosine, -2);
  EXPECT_EQ(lgc.BeginRound(2).value(), LgcStage::kAutoencoder);
  EXPECT_EQ(lgc.Stage(2), LgcStage::kAutoencoder);
  EXPECT_EQ(lgc.switch_round(), 2u);
  // The switch is in round 1's state, after round 1's 2 training steps.
  const LgcState saved = LoadLgcState(dir, 1).value();
  EXPECT_EQ(saved.switch_round, 2u);
  EXPECT_EQ(saved.ae_steps, 2u);
  auto plan = lgc::ParseLgcSpec(spec).value().value();
  const size_t k = lgc.k(), k_inn = plan.InnovationSize(k);
  EXPECT_EQ(lgc.Decoder("c1"), nullptr) << "served before stage 3";
  lgc.Freeze();
  auto codec = codecs::MakeCodec(plan.latent).value();
  const auto& dense = static_cast<const codecs::DenseCodec&>(*codec);
  const std::vector<float> zeros(k, 0.0f);
  // The leader: the latent of its top-k, then its own prediction from the latent as the
  // coordinator will decode it.
  const PredictLeader leader = MakePredictLeader(lgc, dense, Gaussian(kDim, 4), k_inn);
  const lgc::LeaderPayload& l3 = leader.payload;
  const std::vector<float>& w0 = leader.values;
  const std::vector<float>& z = leader.z;
  const lgc::Correction& c0 = leader.correction;
  // The followers: their values on the leader's support, predicted from the pushed latent.
  auto follower = [&](const std::string& id, const std::vector<float>& u) {
    auto ae = ClientAutoencoder(lgc, id);
    auto c = lgc::Correct(lgc::Gather(u, l3.support), ae->Decode(id, z, zeros).value(), k_inn);
    c.reference = lgc::ReferenceOf(l3.support, z);
    return c;
  };
  const auto c1 = follower("c1", u1);
  auto c2 = follower("c2", Gaussian(kDim, 5));
  c2.reference ^= 1;  // names another latent: not counted
  auto c3 = follower("c3", Gaussian(kDim, 6));
  c3.sent_crc ^= 1;  // a rebuild the coordinator cannot match: counted, reported
  std::map<std::string, PayloadCollector::Payload> p3;
  p3["c0"] = {std::string(lgc::kLeaderSpec), lgc::EncodeLeader(l3, kDim, dense, 2).value(), 1};
  for (const auto& [id, c, w] : {std::tuple{"c1", &c1, 3}, {"c2", &c2, 5}, {"c3", &c3, 2}}) {
    p3[id] = {std::string(lgc::kCorrectionSpec), lgc::EncodeCorrection(*c).value(),
              static_cast<double>(w)};
  }
  // A leader payload from a client that was not asked to lead counts for nothing.
  p3["c4"] = {std::string(lgc::kLeaderSpec), p3["c0"].body, 7};
  for (const auto& [id, p] : p3) EXPECT_TRUE(lgc.Validate(2, p.spec, View(p.body)).ok()) << id;
  // Stage 3 takes no compact codes: the wrong codec for the round.
  const absl::Status wrong = lgc.Validate(2, lgc::kBitCorrectionSpec, View(p3["c1"].body));
  EXPECT_TRUE(absl::IsInvalidArgument(wrong)) << wrong;
  EXPECT_EQ(codecs::InputErrorOf(wrong), codecs::InputError::kWrongCodec);
  auto out = lgc.Aggregate(2, "c0", p3);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->counted, (std::set<std::string>{"c0", "c1", "c3"}));
  EXPECT_EQ(out->rebuild_mismatches, 1);
  double miss0 = 0, norm0 = 0;
  for (size_t j = 0; j < k; ++j) {
    const float mean =
        static_cast<float>((1.0 * c0.sent[j] + 3.0 * c1.sent[j] + 2.0 * c3.sent[j]) / 6.0);
    EXPECT_EQ(out->delta[l3.support[j]], mean) << j;
    miss0 += (w0[j] - c0.sent[j]) * (w0[j] - c0.sent[j]);
    norm0 += w0[j] * w0[j];
  }
  EXPECT_LT(miss0, norm0);
  // Decoders are per client, and the blob is the one a client loads.
  EXPECT_NE(lgc.Decoder("c0")->bytes, lgc.Decoder("c1")->bytes);
  EXPECT_EQ(lgc.Decoder("c1"), lgc.Decoder("c1"));
}

// The autoencoder trains on a thread of its own: a training round's aggregation hands its
// batch over and returns, the rounds after the training rounds keep the cells until the
// training is done, and the first one after that is the switch, written into the state of
// the round before it with the weights it codes with. A coordinator restarted from a
// state saved mid-training trains on and switches; one restarted after the switch codes
// with the same encoder and trains no more.
TEST(LgcAggregator, TrainingRunsOffTheRoundLoopAndTheSwitchSurvivesARestart) {
  const std::string spec = "lgc(ratio=0.05,train=2,ae_steps=60)";
  const std::string dir = TempDir("off-loop");
  auto made = Make(spec, dir);
  ASSERT_NE(made, nullptr);
  LgcAggregator& lgc = *made;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  double aggregate_s = 0;
  for (uint64_t r : {1, 2}) {
    EXPECT_EQ(lgc.BeginRound(r).value(), LgcStage::kCells);
    const auto a0 = Clock::now();
    const LgcAggregator::Outcome out = CellsRound(lgc, spec, r, Gaussian(kDim, 20 + r),
                                                  Gaussian(kDim, 30 + r));
    aggregate_s += std::chrono::duration<double>(Clock::now() - a0).count();
    EXPECT_GE(out.ae_backlog, 1) << "round " << r << "'s batch waits for the trainer";
  }
  ASSERT_TRUE(lgc.Save(2).ok());  // mid-training
  const std::string mid = TempDir("off-loop-mid");
  std::filesystem::copy(dir + "/lgc-2.bin", mid + "/lgc-2.bin");
  // Round 3 is past the training rounds: the cells while the trainer is busy.
  ASSERT_FALSE(lgc.TrainingDone()) << "60 steps a batch took less than two aggregations";
  EXPECT_EQ(lgc.BeginRound(3).value(), LgcStage::kCells);
  lgc.AwaitTraining();
  EXPECT_TRUE(lgc.TrainingDone());
  const double training_s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(aggregate_s, 0.25 * training_s) << "the rounds waited for the training";
  EXPECT_EQ(lgc.switch_round(), 0u);
  EXPECT_EQ(lgc.BeginRound(4).value(), LgcStage::kAutoencoder);
  EXPECT_EQ(lgc.Stage(3), LgcStage::kCells);
  lgc.Freeze();
  const std::string encoder = lgc.EncoderBytes();
  const LgcState saved = LoadLgcState(dir, 3).value();
  EXPECT_EQ(saved.switch_round, 4u);
  EXPECT_EQ(saved.ae_steps, 120u);
  // Killed after the switch: the same encoder, stage 3 from round 4, no trainer.
  auto after = Make(spec, dir, 0, 3);
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->Stage(4), LgcStage::kAutoencoder);
  EXPECT_EQ(after->BeginRound(4).value(), LgcStage::kAutoencoder);
  EXPECT_TRUE(after->TrainingDone());
  EXPECT_EQ(after->EncoderBytes(), encoder);
  // Killed mid-training: the state of round 2 had trained fewer steps and no switch; the
  // restarted coordinator's next round past the training rounds finds nothing to train
  // and switches.
  const LgcState partial = LoadLgcState(mid, 2).value();
  EXPECT_EQ(partial.switch_round, 0u);
  EXPECT_LT(partial.ae_steps, 120u);
  auto resumed = Make(spec, mid, 0, 2);
  ASSERT_NE(resumed, nullptr);
  EXPECT_EQ(resumed->Stage(3), LgcStage::kCells);
  EXPECT_EQ(resumed->BeginRound(3).value(), LgcStage::kAutoencoder);
  EXPECT_EQ(LoadLgcState(mid, 2).value().switch_round, 3u);
}

// Compressed from the first round (no warm-up), the leader's cells count as they decode,
// each follower as the gain times them plus its correction, exactly what it computed; a
// correction against another leader payload or in another width does not count.
TEST(LgcAggregator, ACellsRoundCountsTheLeadersCellsAndEachFollowersRebuild) {
  const std::string dir = TempDir("cells");
  auto plan = lgc::ParseLgcSpec("lgc(ratio=0.05,bits=2,entropy=0,zstd=0)");
  ASSERT_TRUE(plan.ok() && plan->has_value()) << plan.status();
  auto zero_warmup = LgcAggregator::Create(**plan, 0, kDim, dir, 0, 1, "cpu");
  ASSERT_TRUE(zero_warmup.ok()) << zero_warmup.status();
  LgcAggregator& lgc = **zero_warmup;
  EXPECT_EQ(lgc.Stage(1), LgcStage::kCells);
  const size_t k = lgc.k();
  const std::vector<float> u0 = Gaussian(kDim, 11), u1 = Gaussian(kDim, 12);
  const std::vector<uint32_t> support = lgc::SelectSupportSet(u0, k);
  std::vector<float> leader_sent;
  const std::string leader =
      lgc::EncodeLeaderCells(support, lgc::Gather(u0, support), kDim, &leader_sent);
  // What the coordinator pushes to followers: the leader's body itself.
  auto pushed = lgc.LeaderPayloadBytes(1, Span(leader));
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_EQ(pushed->cells, leader);
  EXPECT_TRUE(pushed->support.empty() && pushed->latent.empty());
  lgc::BitCorrection c = lgc::CorrectBits(lgc::Gather(u1, support), leader_sent, 2);
  c.reference = lgc::ReferenceOf(support, leader_sent);
  std::map<std::string, PayloadCollector::Payload> p;
  p["c0"] = {std::string(lgc::kLeaderCellsSpec), leader, 1};
  p["c1"] = {std::string(lgc::kBitCorrectionSpec), lgc::EncodeBitCorrection(c).value(), 3};
  lgc::BitCorrection stray = c;
  stray.reference = 123;
  p["c2"] = {std::string(lgc::kBitCorrectionSpec), lgc::EncodeBitCorrection(stray).value(), 3};
  for (const auto& [id, payload] : p) EXPECT_TRUE(lgc.Validate(1, payload.spec, Span(payload.body)).ok()) << id;
  const lgc::BitCorrection one_bit = lgc::CorrectBits(lgc::Gather(u1, support), leader_sent, 1);
  EXPECT_FALSE(
      lgc.Validate(1, lgc::kBitCorrectionSpec, Span(lgc::EncodeBitCorrection(one_bit).value()))
          .ok());
  // Stage 3's formats are refused as a wrong codec.
  EXPECT_EQ(codecs::InputErrorOf(lgc.Validate(1, lgc::kLeaderSpec, Span(leader))),
            codecs::InputError::kWrongCodec);
  coordinator::AggregatorOptions unclipped;
  unclipped.clip = 0;
  auto out = lgc.Aggregate(1, "c0", p, nullptr, unclipped);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->counted, (std::set<std::string>{"c0", "c1"}));
  EXPECT_EQ(out->rebuild_mismatches, 0);
  for (size_t j = 0; j < k; ++j) {
    EXPECT_EQ(out->delta[support[j]],
              static_cast<float>((1.0 * leader_sent[j] + 3.0 * c.sent[j]) / 4)) << j;
  }
  // Without the autoencoder there is nothing to train, serve or keep but the state itself.
  EXPECT_LT(out->ae_reconstruction, 0);
  EXPECT_TRUE(lgc.EncoderBytes().empty());
  lgc.Freeze();
  EXPECT_EQ(lgc.Decoder("c1"), nullptr);
  EXPECT_EQ(lgc.Stage(1000), LgcStage::kCells);
  // Who led when comes back with the state: a restarted coordinator chooses as before.
  lgc.Led("c0", 1);
  lgc.Led("c1", 0);
  ASSERT_TRUE(lgc.Save(1).ok());
  auto back = LgcAggregator::Create(**plan, 0, kDim, dir, 1, 1, "cpu");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->led(), (std::map<std::string, uint64_t>{{"c0", 1}, {"c1", 0}}));
}

// ramp=2: rounds 1 and 2 send on 4x and 2x the plan's support, round 3 on it; a ramped
// round takes only its own size, and aggregates like any other.
TEST(LgcAggregator, TheRampWidensTheFirstRoundsSupports) {
  auto plan = lgc::ParseLgcSpec("lgc(ratio=0.02,ramp=2,entropy=0,zstd=0)");
  ASSERT_TRUE(plan.ok() && plan->has_value()) << plan.status();
  EXPECT_EQ((*plan)->SupportSizeAt(kDim, 1), 164u);  // ceil(0.08 x 2048)
  EXPECT_EQ((*plan)->SupportSizeAt(kDim, 2), 82u);
  EXPECT_EQ((*plan)->SupportSizeAt(kDim, 3), 41u);
  EXPECT_EQ((*plan)->SupportSizeAt(kDim, 0), 41u);
  auto d = LgcAggregator::Create(**plan, 1, kDim, TempDir("ramp"), 0, 1, "cpu");
  ASSERT_TRUE(d.ok()) << d.status();
  LgcAggregator& lgc = **d;
  // One warm-up round: LGC round 1 is job round 2.
  EXPECT_EQ(lgc.KAt(1), 41u);
  EXPECT_EQ(lgc.KAt(2), 164u);
  EXPECT_EQ(lgc.KAt(3), 82u);
  EXPECT_EQ(lgc.KAt(4), 41u);
  const std::vector<float> u0 = Gaussian(kDim, 21), u1 = Gaussian(kDim, 22);
  for (uint64_t round : {2, 4}) {
    const size_t k = lgc.KAt(round);
    const std::vector<uint32_t> support = lgc::SelectSupportSet(u0, k);
    std::vector<float> sent;
    const std::string leader =
        lgc::EncodeLeaderCells(support, lgc::Gather(u0, support), kDim, &sent);
    EXPECT_TRUE(lgc.Validate(round, lgc::kLeaderCellsSpec, Span(leader)).ok()) << round;
    const std::string other =
        lgc::EncodeLeaderCells(lgc::SelectSupportSet(u0, 41 + 164 - k),
                               std::vector<float>(41 + 164 - k, 1.0f), kDim, nullptr);
    EXPECT_FALSE(lgc.Validate(round, lgc::kLeaderCellsSpec, Span(other)).ok()) << round;
    lgc::BitCorrection c = lgc::CorrectBits(lgc::Gather(u1, support), sent, 2);
    c.reference = lgc::ReferenceOf(support, sent);
    std::map<std::string, PayloadCollector::Payload> p;
    p["c0"] = {std::string(lgc::kLeaderCellsSpec), leader, 1};
    p["c1"] = {std::string(lgc::kBitCorrectionSpec), lgc::EncodeBitCorrection(c).value(), 1};
    EXPECT_TRUE(lgc.Validate(round, p["c1"].spec, Span(p["c1"].body)).ok()) << round;
    coordinator::AggregatorOptions unclipped;
    unclipped.clip = 0;
    auto out = lgc.Aggregate(round, "c0", p, nullptr, unclipped);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->counted.size(), 2u) << round;
    for (size_t j = 0; j < k; ++j) {
      EXPECT_EQ(out->delta[support[j]], static_cast<float>((1.0 * sent[j] + 1.0 * c.sent[j]) / 2));
    }
  }
}

// entropy=1 (the default) and zstd=1: each body travels in its packed form and counts
// exactly as the unpacked one; a body in another form, cut short, or a zstd frame that
// would inflate beyond the largest body of its kind is refused, the last before inflating.
TEST(LgcAggregator, PackedBodiesCountAsTheirCodesAndBombsAreRefused) {
  const std::vector<float> u0 = Gaussian(kDim, 31), u1 = Gaussian(kDim, 32);
  const std::string entropy_spec = "lgc(ratio=0.05)", zstd_spec = "lgc(ratio=0.05,entropy=0)",
                    plain_spec = "lgc(ratio=0.05,entropy=0,zstd=0)";
  auto entropy = Make(entropy_spec, TempDir("entropy1"));
  auto packed = Make(zstd_spec, TempDir("zstd1"));
  auto plain = Make(plain_spec, TempDir("zstd0"));
  ASSERT_TRUE(entropy && packed && plain);
  const LgcAggregator::Outcome a = CellsRound(*packed, zstd_spec, 1, u0, u1);
  const LgcAggregator::Outcome b = CellsRound(*plain, plain_spec, 1, u0, u1);
  const LgcAggregator::Outcome e = CellsRound(*entropy, entropy_spec, 1, u0, u1);
  EXPECT_EQ(a.delta, b.delta);
  EXPECT_EQ(e.delta, b.delta);
  const size_t k = packed->k();
  const std::vector<uint32_t> support = lgc::SelectSupportSet(u0, k);
  const std::string raw = lgc::EncodeLeaderCells(support, lgc::Gather(u0, support), kDim, nullptr);
  const std::string zstd = codecs::ZstdPack(View(raw), 3).value();
  EXPECT_FALSE(packed->Validate(1, lgc::kLeaderCellsSpec, View(raw)).ok());
  EXPECT_FALSE(plain->Validate(1, lgc::kLeaderCellsSpec, View(zstd)).ok());
  const lgc::LgcPlan plan = lgc::ParseLgcSpec(entropy_spec).value().value();
  const std::string coded = lgc::PackLeaderCells(plan, raw, support, kDim).value();
  EXPECT_LE(coded.size(), raw.size() + 1);
  EXPECT_TRUE(entropy->Validate(1, lgc::kLeaderCellsSpec, View(coded)).ok());
  EXPECT_FALSE(
      entropy->Validate(1, lgc::kLeaderCellsSpec, View(coded.substr(0, coded.size() / 2))).ok());
  // 1 MB of zeros packs into a few hundred bytes: refused from its declared size.
  const std::string bomb = codecs::ZstdPack(View(std::string(1 << 20, '\0')), 3).value();
  ASSERT_LT(bomb.size(), 1000u);
  const absl::Status st = packed->Validate(1, lgc::kLeaderCellsSpec, View(bomb));
  EXPECT_EQ(codecs::InputErrorOf(st), codecs::InputError::kMalformed) << st;
  EXPECT_NE(std::string(st.message()).find("inflates to 1048576"), std::string::npos) << st;
  EXPECT_FALSE(packed->Validate(1, lgc::kBitCorrectionSpec, View(bomb)).ok());
  EXPECT_FALSE(entropy->Validate(1, lgc::kBitCorrectionSpec, View(bomb)).ok());
}

// The states of the protocols before this one (version 1: steps, a support, the
// autoencoder; version 2: the same and the echoes) still load; the support and echoes are
// not kept any more.
TEST(LgcAggregator, StatesOfTheProtocolsBeforeStillLoad) {
  const auto plan = lgc::ParseLgcSpec("lgc(ratio=0.05,train=3)").value().value();
  const uint64_t k = plan.SupportSize(kDim);
  std::vector<uint32_t> support(k);
  for (uint32_t j = 0; j < k; ++j) support[j] = 3 * j;
  auto ae = autoencoder::Autoencoder::Create(static_cast<int64_t>(k), {}).value();
  for (uint32_t version : {1u, 2u}) {
    const std::string dir = TempDir(StrCat("v", version));
    core::StateWriter w = core::BeginRoundState(0x53474C46, version, 4);
    w.U64(7);
    w.Str(std::string_view(reinterpret_cast<const char*>(support.data()), k * 4));
    w.Str(ae->Serialize());
    if (version == 2) {
      w.U32(1);
      w.Str("c0");
      w.U64(4);
      w.Str(std::string(k * 4, '\0'));
    }
    ASSERT_TRUE(core::SaveRoundState(dir, "lgc", 4, w.Finish()).ok());
    auto d = LgcAggregator::Create(plan, 0, kDim, dir, 4, 1, "cpu");
    ASSERT_TRUE(d.ok()) << version << ": " << d.status();
    // The autoencoder came back: the encoder it serves is the one saved.
    EXPECT_EQ((*d)->EncoderBytes(), ae->SerializeEncoder()) << version;
    // And its state saves in the new form, which loads too.
    ASSERT_TRUE((*d)->Save(5).ok());
    EXPECT_TRUE(LgcAggregator::Create(plan, 0, kDim, dir, 5, 1, "cpu").ok()) << version;
    // A job without the autoencoder ignores the one in the state.
    const auto plain = lgc::ParseLgcSpec("lgc(ratio=0.05)").value().value();
    auto without = LgcAggregator::Create(plain, 0, kDim, dir, 4, 1, "cpu");
    ASSERT_TRUE(without.ok()) << without.status();
    EXPECT_TRUE((*without)->EncoderBytes().empty());
  }
  // A job with the autoencoder refuses a state without one (saved by a job with train=0),
  // and a torn state is refused.
  const std::string dir = TempDir("v3");
  auto none = Make("lgc(ratio=0.05)", dir);
  ASSERT_NE(none, nullptr);
  none->Led("c0", 2);
  ASSERT_TRUE(none->Save(2).ok());
  const auto refused = LgcAggregator::Create(plan, 0, kDim, dir, 2, 1, "cpu");
  EXPECT_TRUE(absl::IsDataLoss(refused.status())) << refused.status();
  auto bytes = fedlgc::ReadFile(StrCat(dir, "/lgc-2.bin")).value();
  ASSERT_TRUE(
      fedlgc::AtomicWriteFile(StrCat(dir, "/lgc-2.bin"), bytes.substr(0, bytes.size() - 9)).ok());
  EXPECT_FALSE(LgcAggregator::Create(lgc::ParseLgcSpec("lgc(ratio=0.05)").value().value(), 0, kDim,
                                     dir, 2, 1, "cpu")
                   .ok());
}

}  // namespace
}  // namespace fedlgc::modes
