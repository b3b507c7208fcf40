// The coordinator's LGC arithmetic without gRPC: a training round reports how alike the
// clients' values are; in a compressed round each client's echo is the reconstruction the
// round's mean was made of, only the round it belongs to serves it, it survives a
// restart, and without echo=1 it keeps none.
#include "modes/lgc/lgc_aggregator.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <tuple>

#include "autoencoder/lgc_codes.h"
#include "autoencoder/lgc_payload.h"
#include "codecs/crc32c.h"
#include "codecs/input_error.h"
#include "codecs/registry.h"
#include "core/atomic_file.h"
#include "gtest/gtest.h"

namespace fedlgc::modes {
namespace {

constexpr uint64_t kDim = 2048;

std::string TempDir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/lgc-driver-" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

std::vector<uint32_t> Support(const LgcAggregator& d) {
  const std::string b = d.SupportBytes();
  std::vector<uint32_t> s(b.size() / 4);
  std::memcpy(s.data(), b.data(), b.size());
  return s;
}

std::vector<float> Gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

// Warm-up (round 1), one training round (2), then the compressed round 3 with a leader c0
// and a follower c1 (weights 1 and 3). Returns the driver after round 3 and its delta.
struct LgcRun {
  std::unique_ptr<LgcAggregator> driver;
  std::vector<uint32_t> support;  // of round 3
  std::vector<float> delta;
};

// Rounds 1 and 2 of `spec` with the clients' updates u0 (c0, the leader) and u1 (c1).
LgcRun TwoRounds(const std::string& dir, const std::string& spec, const std::vector<float>& u0,
                 const std::vector<float>& u1) {
  auto plan = autoencoder::ParseLgcSpec(spec);
  EXPECT_TRUE(plan.ok() && plan->has_value());
  auto d = LgcAggregator::Create(**plan, 1, kDim, dir, 0, 1, "cpu");
  EXPECT_TRUE(d.ok()) << d.status();
  LgcRun run{std::move(d).value(), {}, {}};
  LgcAggregator& lgc = *run.driver;
  const std::vector<float> zero(kDim, 0.0f);
  lgc.ObservePlainRound(zero, Gaussian(kDim, 1));
  const size_t k = lgc.k();
  auto fp32 = codecs::MakeCodec("fp32").value();
  const auto& dense = static_cast<const codecs::DenseCodec&>(*fp32);

  // Round 2: values on the support: the round's (predict=0) or the leader's own top-k
  // (predict=1), which the follower's values name.
  const bool predict = (*plan)->predict;
  autoencoder::LeaderPayload lp;
  lp.support = autoencoder::SelectSupport(u0, k);
  const std::vector<uint32_t> s2 = predict ? lp.support : Support(lgc);
  lp.latent = autoencoder::Gather(u0, s2);
  lp.innovation.assign(k, 0.0f);
  std::map<std::string, PayloadCollector::Payload> p2;
  p2["c0"] = {std::string(autoencoder::kLeaderSpec),
              autoencoder::EncodeLeader(lp, kDim, dense, 2).value(), 1};
  const std::vector<float> v1 = autoencoder::Gather(u1, s2);
  p2["c1"] = {
      std::string(autoencoder::kValuesSpec),
      predict ? autoencoder::EncodeReferencedValues(autoencoder::ReferenceOf(lp.support, {}), v1)
              : std::string(reinterpret_cast<const char*>(v1.data()), v1.size() * 4),
      3};
  // predict=1: values that name another leader payload do not count.
  if (predict) {
    p2["c2"] = {std::string(autoencoder::kValuesSpec), autoencoder::EncodeReferencedValues(123, v1),
                3};
  }
  for (const auto& [id, p] : p2) {
    EXPECT_TRUE(lgc.Validate(2, p.spec,
                             std::span<const uint8_t>(
                                 reinterpret_cast<const uint8_t*>(p.body.data()), p.body.size()))
                    .ok())
        << id;
  }
  // Two clients whose values differ in norm by more than the default clip: this test is
  // about the rebuild, so it aggregates without clipping (robust_test.cc tests clipping).
  coordinator::AggregatorOptions unclipped;
  unclipped.clip = 0;
  auto out2 = lgc.Aggregate(2, "c0", p2, nullptr, unclipped);
  EXPECT_TRUE(out2.ok()) << out2.status();
  if (out2.ok()) {  // exactly the mean of the two clients' values, on s2
    EXPECT_EQ(out2->counted, (std::set<std::string>{"c0", "c1"}));
    for (size_t j = 0; j < k; ++j) {
      EXPECT_EQ(out2->delta[s2[j]], static_cast<float>((1.0 * lp.latent[j] + 3.0 * v1[j]) / 4));
    }
    // The two clients' values on the support: their cosine similarity.
    double ab = 0, aa = 0, bb = 0;
    for (size_t j = 0; j < k; ++j) {
      ab += double(lp.latent[j]) * v1[j];
      aa += double(lp.latent[j]) * lp.latent[j];
      bb += double(v1[j]) * v1[j];
    }
    EXPECT_NEAR(out2->values_cosine, ab / std::sqrt(aa * bb), 1e-12);
  }
  EXPECT_EQ(lgc.Echo("c0", 2), nullptr);  // stage 2 is exact: nothing to echo
  run.support = Support(lgc);
  EXPECT_EQ(run.support, lp.support);
  return run;
}

LgcRun ThreeRounds(const std::string& dir, const std::string& spec) {
  const std::vector<float> u0 = Gaussian(kDim, 2), u1 = Gaussian(kDim, 3);
  LgcRun run = TwoRounds(dir, spec, u0, u1);
  LgcAggregator& lgc = *run.driver;
  const size_t k = lgc.k();
  auto plan = autoencoder::ParseLgcSpec(spec);
  // Round 3: the leader's latent, the follower's innovation.
  autoencoder::AeOptions ao;
  auto enc = autoencoder::Autoencoder::Create(static_cast<int64_t>(k), ao).value();
  EXPECT_TRUE(enc->LoadEncoder(lgc.EncoderBytes()).ok());
  const std::vector<float> w0 = autoencoder::Gather(u0, run.support);
  const std::vector<float> w1 = autoencoder::Gather(u1, run.support);
  autoencoder::LeaderPayload l3;
  l3.support = autoencoder::SelectSupport(u1, k);
  l3.scale = autoencoder::RmsScale(w0);
  std::vector<float> normalized = w0;
  for (float& x : normalized) x /= l3.scale;
  l3.latent = enc->Encode(normalized).value();
  l3.innovation = autoencoder::InnovationOfValues(w0, lgc.k_innovation());
  auto latent_codec = codecs::MakeCodec(plan->value().latent).value();
  std::map<std::string, PayloadCollector::Payload> p3;
  p3["c0"] = {
      std::string(autoencoder::kLeaderSpec),
      autoencoder::EncodeLeader(l3, kDim, static_cast<const codecs::DenseCodec&>(*latent_codec), 3)
          .value(),
      1};
  p3["c1"] = {std::string(autoencoder::kInnovationSpec),
              autoencoder::EncodeInnovation(autoencoder::InnovationOfValues(w1, lgc.k_innovation()),
                                            autoencoder::RmsScale(w1))
                  .value(),
              3};
  auto out = lgc.Aggregate(3, "c0", p3);
  EXPECT_TRUE(out.ok()) << out.status();
  if (out.ok()) {
    EXPECT_TRUE(out->latent);
    EXPECT_EQ(out->counted.size(), 2u);
    run.delta = std::move(out->delta);
  }
  return run;
}

std::vector<float> Floats(const std::shared_ptr<const ModelBlob>& b) {
  std::vector<float> v(b->bytes.size() / 4);
  std::memcpy(v.data(), b->bytes.data(), b->bytes.size());
  return v;
}

TEST(LgcAggregator, EchoesAreTheReconstructionsTheRoundAveraged) {
  const std::string dir = TempDir("echo");
  LgcRun run = ThreeRounds(dir, "lgc(ratio=0.05,train=1,ae_steps=2,echo=1)");
  ASSERT_EQ(run.delta.size(), kDim);
  const auto e0 = run.driver->Echo("c0", 3), e1 = run.driver->Echo("c1", 3);
  ASSERT_NE(e0, nullptr);
  ASSERT_NE(e1, nullptr);
  const std::vector<float> r0 = Floats(e0), r1 = Floats(e1);
  ASSERT_EQ(r0.size(), run.support.size());
  ASSERT_EQ(r1.size(), run.support.size());
  // The mean of the round (weights 1 and 3) is made of exactly these reconstructions.
  double differ = 0;
  for (size_t j = 0; j < run.support.size(); ++j) {
    const float mean = static_cast<float>((1.0 * r0[j] + 3.0 * r1[j]) / 4.0);
    EXPECT_EQ(run.delta[run.support[j]], mean) << j;
    differ += std::abs(r0[j] - r1[j]);
  }
  EXPECT_GT(differ, 0);  // each client is decoded with its own innovation and decoder
  // Only the round it belongs to, and only its own client, get an echo.
  EXPECT_EQ(run.driver->Echo("c0", 2), nullptr);
  EXPECT_EQ(run.driver->Echo("c0", 4), nullptr);
  EXPECT_EQ(run.driver->Echo("c2", 3), nullptr);

  // Across a restart: the state of round 3 brings the same echoes back.
  ASSERT_TRUE(run.driver->Save(3).ok());
  auto plan =
      autoencoder::ParseLgcSpec("lgc(ratio=0.05,train=1,ae_steps=2,echo=1)").value().value();
  auto back = LgcAggregator::Create(plan, 1, kDim, dir, 3, 1, "cpu");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_NE((*back)->Echo("c1", 3), nullptr);
  EXPECT_EQ((*back)->Echo("c1", 3)->bytes, e1->bytes);
  EXPECT_EQ((*back)->Echo("c1", 3)->crc32c, e1->crc32c);
}

std::span<const uint8_t> View(const std::string& b) {
  return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(b.data()), b.size());
}

// A client's autoencoder in stage 3 of predict=1: the shared encoder, its own decoder as
// the coordinator serves it.
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

// The leader c0 of a predict=1 round: the latent of its top-k values, the latent as the
// coordinator decodes and pushes it (z), and its correction against its own prediction.
struct PredictLeader {
  autoencoder::LeaderPayload payload;
  std::vector<float> values;  // on its support
  std::vector<float> z;
  autoencoder::Correction correction;
};

PredictLeader MakePredictLeader(LgcAggregator& lgc, const codecs::DenseCodec& dense,
                                const std::vector<float>& u) {
  const size_t k = lgc.k();
  const std::vector<float> zeros(k, 0.0f);
  auto ae0 = ClientAutoencoder(lgc, "c0");
  PredictLeader l;
  l.payload.support = autoencoder::SelectSupport(u, k);
  l.values = autoencoder::Gather(u, l.payload.support);
  std::vector<float> normalized = l.values;
  for (float& x : normalized) x /= autoencoder::RmsScale(l.values);
  l.payload.latent = ae0->Encode(normalized).value();
  l.payload.innovation = zeros;
  const std::string first = autoencoder::EncodeLeader(l.payload, kDim, dense, 3, true).value();
  l.z = autoencoder::DecodeLeader(View(first), kDim, dense, l.payload.latent.size(), true)
            ->latent;
  const auto pushed = lgc.LeaderPayloadBytes(3, View(first)).value();
  EXPECT_EQ(pushed.latent,
            std::string(reinterpret_cast<const char*>(l.z.data()), l.z.size() * 4));
  EXPECT_EQ(pushed.support,
            std::string(reinterpret_cast<const char*>(l.payload.support.data()), k * 4));
  l.correction =
      autoencoder::Correct(l.values, ae0->Decode("c0", l.z, zeros).value(), lgc.k_innovation());
  l.payload.scale = l.correction.gain;
  l.payload.step = l.correction.step;
  l.payload.sent_crc = l.correction.sent_crc;
  l.payload.innovation = l.correction.innovation;
  return l;
}

TEST(LgcAggregator, PredictRebuildsExactlyWhatEachClientComputedFromTheLatentItNamed) {
  // predict=1: the leader sends the latent of its values on its own top-k; the others decode
  // it with their own decoders (fetched as blobs) and send a gain and an innovation; the
  // coordinator's mean is made of exactly the values the clients computed, placed on the
  // leader's support, and a correction against another latent does not count.
  const std::string spec = "lgc(ratio=0.05,train=1,ae_steps=2,innovation=0.1,predict=1,echo=1)";
  const std::vector<float> u0 = Gaussian(kDim, 2), u1 = Gaussian(kDim, 3);
  LgcRun run = TwoRounds(TempDir("predict"), spec, u0, u1);
  LgcAggregator& lgc = *run.driver;
  const size_t k = lgc.k(), k_inn = lgc.k_innovation();
  EXPECT_EQ(lgc.Decoder("c1"), nullptr) << "served before stage 3";
  lgc.Freeze();
  auto plan = autoencoder::ParseLgcSpec(spec).value().value();
  auto codec = codecs::MakeCodec(plan.latent).value();
  const auto& dense = static_cast<const codecs::DenseCodec&>(*codec);
  const std::vector<float> zeros(k, 0.0f);
  // The leader: the latent of its top-k, then its own prediction from the latent as the
  // coordinator will decode it.
  const PredictLeader leader = MakePredictLeader(lgc, dense, Gaussian(kDim, 4));
  const autoencoder::LeaderPayload& l3 = leader.payload;
  const std::vector<float>& w0 = leader.values;
  const std::vector<float>& z = leader.z;
  const autoencoder::Correction& c0 = leader.correction;
  // The followers: their values on the leader's support, predicted from the pushed latent.
  auto follower = [&](const std::string& id, const std::vector<float>& u) {
    auto ae = ClientAutoencoder(lgc, id);
    auto c = autoencoder::Correct(autoencoder::Gather(u, l3.support),
                                  ae->Decode(id, z, zeros).value(), k_inn);
    c.reference = autoencoder::ReferenceOf(l3.support, z);
    return c;
  };
  const auto c1 = follower("c1", u1);
  auto c2 = follower("c2", Gaussian(kDim, 5));
  c2.reference ^= 1;  // names another latent: not counted
  auto c3 = follower("c3", Gaussian(kDim, 6));
  c3.sent_crc ^= 1;  // a rebuild the coordinator cannot match: counted, reported
  std::map<std::string, PayloadCollector::Payload> p3;
  p3["c0"] = {std::string(autoencoder::kLeaderSpec),
              autoencoder::EncodeLeader(l3, kDim, dense, 3, true).value(), 1};
  for (const auto& [id, c, w] : {std::tuple{"c1", &c1, 3}, {"c2", &c2, 5}, {"c3", &c3, 2}}) {
    p3[id] = {std::string(autoencoder::kCorrectionSpec), autoencoder::EncodeCorrection(*c).value(),
              static_cast<double>(w)};
  }
  // A leader payload from a client that was not asked to lead counts for nothing.
  p3["c4"] = {std::string(autoencoder::kLeaderSpec), p3["c0"].body, 7};
  for (const auto& [id, p] : p3) EXPECT_TRUE(lgc.Validate(3, p.spec, View(p.body)).ok()) << id;
  const std::string inn = autoencoder::EncodeInnovation(c1.innovation, 1.0f).value();
  // predict=1 rounds take corrections, not innovations: the wrong codec for the round.
  const absl::Status wrong = lgc.Validate(3, autoencoder::kInnovationSpec, View(inn));
  EXPECT_TRUE(absl::IsInvalidArgument(wrong)) << wrong;
  EXPECT_EQ(codecs::InputErrorOf(wrong), codecs::InputError::kWrongCodec);
  auto out = lgc.Aggregate(3, "c0", p3);
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
  EXPECT_EQ(Floats(lgc.Echo("c1", 3)), c1.sent);
  // Decoders are per client, and the blob is the one a client loads.
  EXPECT_NE(lgc.Decoder("c0")->bytes, lgc.Decoder("c1")->bytes);
  EXPECT_EQ(lgc.Decoder("c1"), lgc.Decoder("c1"));
}

TEST(LgcAggregator, WithoutEchoItKeepsNone) {
  LgcRun run = ThreeRounds(TempDir("no-echo"), "lgc(ratio=0.05,train=1,ae_steps=2)");
  ASSERT_EQ(run.delta.size(), kDim);
  EXPECT_EQ(run.driver->Echo("c0", 3), nullptr);
  EXPECT_EQ(run.driver->Echo("c1", 3), nullptr);
}

TEST(LgcAggregator, AVersion1StateStillLoads) {
  // Version 1 wrote the autoencoder's steps, the support and the autoencoder, no echoes.
  const std::string dir = TempDir("v1");
  auto plan = autoencoder::ParseLgcSpec("lgc(ratio=0.05,echo=1)").value().value();
  const uint64_t k = plan.SupportSize(kDim);
  std::vector<uint32_t> support(k);
  for (uint32_t j = 0; j < k; ++j) support[j] = 3 * j;
  auto ae = autoencoder::Autoencoder::Create(static_cast<int64_t>(k), {}).value();
  core::StateWriter w = core::BeginRoundState(0x53474C46, 1, 4);
  w.U64(7);
  w.Str(std::string_view(reinterpret_cast<const char*>(support.data()), k * 4));
  w.Str(ae->Serialize());
  ASSERT_TRUE(core::SaveRoundState(dir, "lgc", 4, w.Finish()).ok());
  auto d = LgcAggregator::Create(plan, 1, kDim, dir, 4, 1, "cpu");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(Support(**d), support);
  EXPECT_EQ((*d)->Echo("c0", 4), nullptr);
}

std::span<const uint8_t> Span(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// code=cells: compressed from the first round (no warm-up), the leader's cells count as
// they decode, each follower as the gain times them plus its correction, exactly what it
// computed; a correction against another leader payload or in another width does not count.
TEST(LgcAggregator, ACellsRoundCountsTheLeadersCellsAndEachFollowersRebuild) {
  const std::string dir = TempDir("cells");
  auto plan = autoencoder::ParseLgcSpec("lgc(ratio=0.05,train=3,predict=1,code=cells,bits=2)");
  ASSERT_TRUE(plan.ok() && plan->has_value()) << plan.status();
  auto zero_warmup = LgcAggregator::Create(**plan, 0, kDim, dir, 0, 1, "cpu");
  ASSERT_TRUE(zero_warmup.ok()) << zero_warmup.status();
  LgcAggregator& lgc = **zero_warmup;
  EXPECT_EQ(lgc.Stage(1), 2);
  const size_t k = lgc.k();
  const std::vector<float> u0 = Gaussian(kDim, 11), u1 = Gaussian(kDim, 12);
  const std::vector<uint32_t> support = autoencoder::SelectSupportSet(u0, k);
  std::vector<float> leader_sent;
  const std::string leader =
      autoencoder::EncodeLeaderCells(support, autoencoder::Gather(u0, support), kDim, &leader_sent);
  // What the coordinator pushes to followers: the leader's body itself.
  auto pushed = lgc.LeaderPayloadBytes(1, Span(leader));
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_EQ(pushed->cells, leader);
  EXPECT_TRUE(pushed->support.empty() && pushed->latent.empty());
  autoencoder::BitCorrection c =
      autoencoder::CorrectBits(autoencoder::Gather(u1, support), leader_sent, 2);
  c.reference = autoencoder::ReferenceOf(support, leader_sent);
  std::map<std::string, PayloadCollector::Payload> p;
  p["c0"] = {std::string(autoencoder::kLeaderCellsSpec), leader, 1};
  p["c1"] = {std::string(autoencoder::kBitCorrectionSpec),
             autoencoder::EncodeBitCorrection(c).value(), 3};
  autoencoder::BitCorrection stray = c;
  stray.reference = 123;
  p["c2"] = {std::string(autoencoder::kBitCorrectionSpec),
             autoencoder::EncodeBitCorrection(stray).value(), 3};
  for (const auto& [id, payload] : p) EXPECT_TRUE(lgc.Validate(1, payload.spec, Span(payload.body)).ok()) << id;
  const autoencoder::BitCorrection one_bit =
      autoencoder::CorrectBits(autoencoder::Gather(u1, support), leader_sent, 1);
  EXPECT_FALSE(lgc.Validate(1, autoencoder::kBitCorrectionSpec,
                            Span(autoencoder::EncodeBitCorrection(one_bit).value()))
                   .ok());
  // The formats of code=fp32 are refused as a wrong codec.
  EXPECT_EQ(codecs::InputErrorOf(lgc.Validate(1, autoencoder::kValuesSpec,
                                              Span(autoencoder::EncodeReferencedValues(1, {})))),
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
  EXPECT_EQ(Support(lgc), support);
  // Its state, with the set as the next support, survives a restart.
  ASSERT_TRUE(lgc.Save(1).ok());
  auto back = LgcAggregator::Create(**plan, 0, kDim, dir, 1, 1, "cpu");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(Support(**back), support);
}

// ramp=2: rounds 1 and 2 send on 4x and 2x the plan's support, round 3 on it; a ramped
// round takes only its own size, and aggregates like any other.
TEST(LgcAggregator, TheRampWidensTheFirstRoundsSupports) {
  auto plan = autoencoder::ParseLgcSpec("lgc(ratio=0.02,predict=1,code=cells,ramp=2)");
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
    const std::vector<uint32_t> support = autoencoder::SelectSupportSet(u0, k);
    std::vector<float> sent;
    const std::string leader =
        autoencoder::EncodeLeaderCells(support, autoencoder::Gather(u0, support), kDim, &sent);
    EXPECT_TRUE(lgc.Validate(round, autoencoder::kLeaderCellsSpec, Span(leader)).ok()) << round;
    const std::string other = autoencoder::EncodeLeaderCells(
        autoencoder::SelectSupportSet(u0, 41 + 164 - k), std::vector<float>(41 + 164 - k, 1.0f),
        kDim, nullptr);
    EXPECT_FALSE(lgc.Validate(round, autoencoder::kLeaderCellsSpec, Span(other)).ok()) << round;
    autoencoder::BitCorrection c =
        autoencoder::CorrectBits(autoencoder::Gather(u1, support), sent, 1);
    c.reference = autoencoder::ReferenceOf(support, sent);
    std::map<std::string, PayloadCollector::Payload> p;
    p["c0"] = {std::string(autoencoder::kLeaderCellsSpec), leader, 1};
    p["c1"] = {std::string(autoencoder::kBitCorrectionSpec),
               autoencoder::EncodeBitCorrection(c).value(), 1};
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
  EXPECT_FALSE(autoencoder::ParseLgcSpec("lgc(predict=1,ramp=2)").ok());  // ramp needs cells
}

TEST(LgcAggregator, PredictZeroStillNeedsAWarmupRound) {
  auto plan = autoencoder::ParseLgcSpec("lgc(ratio=0.05)");
  ASSERT_TRUE(plan.ok() && plan->has_value());
  EXPECT_FALSE(LgcAggregator::Create(**plan, 0, kDim, TempDir("nowarm"), 0, 1, "cpu").ok());
  EXPECT_FALSE(autoencoder::ParseLgcSpec("lgc(code=cells)").ok());  // cells need predict=1
  EXPECT_FALSE(autoencoder::ParseLgcSpec("lgc(predict=1,code=cells,bits=3)").ok());
}

}  // namespace
}  // namespace fedlgc::modes
