// Secure aggregation rounds (secagg_rounds.h, secagg_client.h) on a loopback host: the
// FedAvg driver and FedAvgClients in this thread over the real round engine. A masked
// round commits bit for bit the model the same codes commit unmasked, and that model is
// the mean of what the codes decode to; with 30% of the clients gone after masking (two
// whose input never arrives, one that never reveals) the round still commits the others'
// mean; clients that did not count keep their update in their residual and send it in the
// next round; a lying share is found and left out; too few inputs count
// nothing; what cannot run with secure aggregation is refused; the collector's refusals.
#include "modes/fedavg/secagg_rounds.h"

#include <cmath>

#include "base/str.h"
#include "codecs/frame.h"
#include "codecs/sparse_codec.h"
#include "codecs/input_error.h"
#include "codecs/sum_code.h"
#include "codecs/zmod_frame.h"
#include "gtest/gtest.h"
#include "modes/fedavg/fedavg_driver.h"
#include "modes/fedavg/fedavg_test_clients.h"
#include "modes/fedavg/secagg_collector.h"
#include "privacy/rdp_accountant.h"
#include "privacy/skellam.h"
#include "protos/fedlgc.pb.h"
#include "tests/coordinator/loopback_host.h"

namespace fedlgc::modes {
namespace {

using edge_client::FakeClientEnv;
using testing::LoopbackHost;

codecs::ModelLayout Layout() {
  return codecs::ModelLayout::Create({{"w", {64, 32}}, {"b", {64}}}).value();
}

// A FedAvgClient that misses the events of one kind (a client gone at that point).
class Deaf final : public edge_client::ClientMode {
 public:
  Deaf(edge_client::ClientEnv& env, protos::ModeEvent::KindCase deaf_to)
      : inner_(env), deaf_to_(deaf_to) {}
  absl::Status OnRoundStart(const protos::RoundStart& start) override {
    return inner_.OnRoundStart(start);
  }
  absl::Status OnReceipt(const protos::RoundReceipt& r) override { return inner_.OnReceipt(r); }
  absl::Status OnModeEvent(const protos::ModeEvent& e) override {
    return e.kind_case() == deaf_to_ ? absl::OkStatus() : inner_.OnModeEvent(e);
  }

 private:
  FedAvgClient inner_;
  const protos::ModeEvent::KindCase deaf_to_;
};

struct Job {
  codecs::ModelLayout layout = Layout();
  coordinator::RoundPlan plan;
  std::unique_ptr<FedAvgDriver> driver;
  std::unique_ptr<LoopbackHost> host;

  explicit Job(const std::string& secagg, const std::string& codec = "qsgd(bits=4)",
               const std::string& dp = "") {
    plan.codec = codec;
    plan.local_steps = 1;
    host = std::make_unique<LoopbackHost>(plan, layout);
    coordinator::DriverEnv env = host->DriverEnvFor(&plan, "secagg_rounds_test");
    FedAvgOptions options;
    options.secagg = secagg;
    options.dp = dp;
    driver = FedAvgDriver::Create(options, env).value();
    host->set_driver(driver.get());
  }
  // Client i trains a step of scale 1 + i / 4; `deaf_to`: the event it misses.
  FakeClientEnv& Add(int i, protos::ModeEvent::KindCase deaf_to = protos::ModeEvent::KIND_NOT_SET) {
    const std::string id = StrCat("c", i);
    LoopbackHost::Client& c = host->AddClient(id, 100, layout, [deaf_to](edge_client::ClientEnv& e) {
      return std::unique_ptr<edge_client::ClientMode>(new Deaf(e, deaf_to));
    });
    c.env->step_scale = 1.0f + static_cast<float>(i) / 4;
    return *c.env;
  }
  coordinator::CommitResult Run(const std::vector<std::string>& participants, RoundReport* report) {
    coordinator::CommitResult commit;
    const auto deadline = host->Now() + std::chrono::seconds(60);
    EXPECT_TRUE(driver->RunRound(*host, participants, deadline, &commit, report).ok());
    host->SendReceipts(commit);
    return commit;
  }
  std::vector<float> model() { return host->engine().ModelVector(); }
};

std::vector<std::string> Ids(int n) {
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) ids.push_back(StrCat("c", i));
  return ids;
}

// The mean of the unmasked codes `clients` uploaded, decoded as the round does.
std::vector<float> MeanOfPlainCodes(LoopbackHost& host, const std::vector<std::string>& clients,
                                    const protos::SecAggRound& sa, uint64_t dim) {
  const codecs::SumCode code = codecs::SumCode::Create(dim, static_cast<int>(sa.levels()),
                                                       sa.clip(), sa.kappa(), sa.rotation_seed())
                                   .value();
  std::vector<int64_t> sum(dim, 0);
  for (const std::string& c : clients) {
    for (const std::string& f : host.client(c).env->uploads.back().frames) {
      auto view = codecs::ParseFrame(f, codecs::FrameLimits()).value();
      std::vector<uint32_t> words;
      EXPECT_TRUE(codecs::ReadZmod(view, static_cast<int>(sa.width()), dim, &words).ok());
      for (size_t i = 0; i < words.size(); ++i) {
        sum[view.begin + i] += SignExtend(words[i], static_cast<int>(sa.width()));
      }
    }
  }
  std::vector<float> mean(dim);
  EXPECT_TRUE(code.DecodeSum(sum, static_cast<double>(clients.size()), mean).ok());
  return mean;
}

TEST(SecAggRounds, AMaskedRoundCommitsBitForBitWhatTheSameCodesCommitUnmasked) {
  // Updates of norm 0.33 to 0.65 (none cut at 0.7).
  Job masked("secagg(clip=0.7)"), plain("secagg(clip=0.7,masks=0)");
  for (int i = 0; i < 5; ++i) {
    masked.Add(i);
    plain.Add(i);
  }
  RoundReport mr, pr;
  const coordinator::CommitResult mc = masked.Run(Ids(5), &mr);
  const coordinator::CommitResult pc = plain.Run(Ids(5), &pr);
  EXPECT_TRUE(masked.host->refused().empty());
  EXPECT_EQ(mc.participants, 5);
  EXPECT_EQ(pc.participants, 5);
  EXPECT_EQ(mr.Label("secagg_failed"), "");
  EXPECT_EQ(mr.Figure("secagg_masked"), 5);
  EXPECT_EQ(mr.Figure("secagg_width_bits"), 7);  // 4-bit codes of 5 clients: -35..35
  EXPECT_EQ(pr.Figure("secagg_width_bits"), 4);
  const std::vector<float> m = masked.model(), p = plain.model();
  ASSERT_EQ(m, p) << "the masks cancel exactly";
  // The model moved by the mean of the codes as decoded from the plain uploads...
  protos::RoundStart start;
  start.set_round(1);
  plain.driver->DecorateRoundStart("c0", &start);  // the round is over: nothing is added
  EXPECT_FALSE(start.fedavg().has_secagg());
  const uint64_t dim = masked.layout.dim();
  const uint64_t seed = plain.host->engine().terms().SharedSeed(1);
  protos::SecAggRound sa;
  sa.set_levels(7);
  sa.set_clip(0.7);
  sa.set_kappa(4);
  sa.set_rotation_seed(seed);
  sa.set_width(4);
  const std::vector<float> mean = MeanOfPlainCodes(*plain.host, Ids(5), sa, dim);
  double err = 0, norm = 0;
  for (size_t i = 0; i < dim; ++i) {
    ASSERT_FLOAT_EQ(p[i], 1.0f + mean[i]) << i;
    // ... which is close to the mean of the updates.
    double truth = 0;
    for (int c = 0; c < 5; ++c) truth += (1.0 + c / 4.0) * FakeClientEnv::Step(i, 1) / 5;
    err += (mean[i] - truth) * (mean[i] - truth);
    norm += truth * truth;
  }
  EXPECT_LT(std::sqrt(err / norm), 0.35) << "a 4-bit grid's rounding, averaged over 5";
  // Every client's update counted: its residual is empty and nothing is in flight.
  for (const std::string& id : Ids(5)) {
    const FakeClientEnv& env = *masked.host->client(id).env;
    EXPECT_FALSE(const_cast<FakeClientEnv&>(env).state().pending) << id;
    for (float r : const_cast<FakeClientEnv&>(env).state().residual) ASSERT_EQ(r, 0.0f) << id;
  }
}

TEST(SecAggRounds, RandKCodesOfTheRoundsSharedSupportAddUpAndCostAQuarter) {
  const std::string codec = "randk(ratio=0.25,values=qsgd(bits=4),seed=round)";
  Job masked("secagg(clip=0.7)", codec), plain("secagg(clip=0.7,masks=0)", codec);
  for (int i = 0; i < 5; ++i) {
    masked.Add(i);
    plain.Add(i);
  }
  RoundReport mr, pr;
  EXPECT_EQ(masked.Run(Ids(5), &mr).participants, 5);
  EXPECT_EQ(plain.Run(Ids(5), &pr).participants, 5);
  EXPECT_EQ(mr.Label("secagg_failed"), "");
  EXPECT_EQ(masked.model(), plain.model());
  EXPECT_NE(masked.model(), std::vector<float>(masked.layout.dim(), 1.0f));
  // Each client sent a quarter of the coordinates' words.
  const uint64_t k = codecs::KeptForRatio(0.25, masked.layout.dim());
  uint64_t words = 0;
  for (const std::string& f : masked.host->client("c0").env->uploads.back().frames) {
    words += codecs::ParseFrame(f, codecs::FrameLimits()).value().length;
  }
  EXPECT_EQ(words, k);
}

TEST(SecAggRounds, ThirtyPercentGoneAfterMaskingStillCommitsTheOthersMeanExactly) {
  // Of 10 clients, c0 and c1 never get their peers' boxes (their masked input never
  // arrives) and c2 never reveals: 3 of 10 gone after masking.
  Job masked("secagg(clip=2)"), plain("secagg(clip=2,masks=0)");
  for (int i = 0; i < 10; ++i) {
    const auto deaf = i < 2 ? protos::ModeEvent::kSecaggShares
                            : i == 2 ? protos::ModeEvent::kSecaggUnmask
                                     : protos::ModeEvent::KIND_NOT_SET;
    masked.Add(i, deaf);
    plain.Add(i);
  }
  RoundReport mr, pr;
  const coordinator::CommitResult mc = masked.Run(Ids(10), &mr);
  ASSERT_EQ(mr.Label("secagg_failed"), "");
  EXPECT_EQ(mc.participants, 8);
  EXPECT_EQ(mr.Figure("secagg_shared"), 10);
  EXPECT_EQ(mr.Figure("secagg_masked"), 8);
  EXPECT_EQ(mr.Figure("secagg_dropped"), 2);
  EXPECT_EQ(mc.receipts.at("c0").counted.size(), 0u);
  // The same 8 unmasked: c0 and c1 silent.
  plain.host->client("c0").silent = plain.host->client("c1").silent = true;
  const coordinator::CommitResult pc = plain.Run(Ids(10), &pr);
  EXPECT_EQ(pc.participants, 8);
  EXPECT_EQ(masked.model(), plain.model());
  // c0 kept its update in its residual; once it hears everything it sends it.
  FakeClientEnv& c0 = *masked.host->client("c0").env;
  double kept = 0;
  for (float r : c0.state().residual) kept += std::abs(r);
  EXPECT_GT(kept, 0);
  EXPECT_FALSE(c0.state().pending) << "its stale masked code went with the round";
}

TEST(SecAggRounds, ALyingShareIsFoundAndLeftOutAndTheRoundCommits) {
  Job job("secagg(clip=2)");
  for (int i = 0; i < 6; ++i) {
    FakeClientEnv& env = job.Add(i);
    if (i == 4) {
      env.tamper = [](protos::ProgressReport* r) {
        if (r->fedavg().has_secagg_reveal()) {
          std::string* y = r->mutable_fedavg()->mutable_secagg_reveal()->mutable_reveals(0)->mutable_y();
          (*y)[3] ^= 0x11;
        }
      };
    }
  }
  RoundReport report;
  const coordinator::CommitResult commit = job.Run(Ids(6), &report);
  EXPECT_EQ(report.Label("secagg_failed"), "");
  EXPECT_EQ(commit.participants, 6);
  EXPECT_EQ(report.Figure("secagg_off_shares"), 1);
  EXPECT_EQ(report.per_client.at("secagg_off_share").count("c4"), 1u);
  // Its dealer might have dealt it that share: nobody is quarantined for it.
  EXPECT_EQ(report.Figure("secagg_liars"), 0);
  EXPECT_TRUE(job.host->quarantined().empty());
}

TEST(SecAggRounds, TooFewInputsCountNothingAndTheUpdatesWaitInTheResiduals) {
  Job job("secagg(clip=2)");
  job.Add(0);
  job.Add(1, protos::ModeEvent::kSecaggShares);
  job.Add(2, protos::ModeEvent::kSecaggShares);
  RoundReport report;
  const coordinator::CommitResult commit = job.Run(Ids(3), &report);
  EXPECT_EQ(commit.participants, 0);
  EXPECT_NE(report.Label("secagg_failed"), "");
  for (float v : job.model()) ASSERT_EQ(v, 1.0f);
  for (const std::string& id : Ids(3)) {
    double kept = 0;
    for (float r : job.host->client(id).env->state().residual) kept += std::abs(r);
    EXPECT_GT(kept, 0) << id;
  }
}

TEST(SecAggRounds, WithAQuantileTheNextClipIsTheTopOfTheMedianNormsBin) {
  // Clipped at 0.1 at first, far below every update's norm (0.33 to 0.65).
  Job job("secagg(clip=0.1,quantile=0.5)");
  std::vector<double> norms;
  for (int i = 0; i < 5; ++i) {
    job.Add(i);
    double sq = 0;
    for (size_t j = 0; j < job.layout.dim(); ++j) {
      const double v = (1.0 + i / 4.0) * FakeClientEnv::Step(j, 1);
      sq += v * v;
    }
    norms.push_back(std::sqrt(sq));
  }
  RoundReport report;
  const coordinator::CommitResult commit = job.Run(Ids(5), &report);
  EXPECT_EQ(commit.participants, 5);
  EXPECT_EQ(report.Figure("clip_bound"), 0.1);
  const double next = report.Figure("secagg_next_clip");
  EXPECT_EQ(next, codecs::SumCode::NormBinTop(codecs::SumCode::NormBin(norms[2])));
  EXPECT_GE(next, norms[2]);
  EXPECT_LT(next, norms[2] * std::sqrt(2.0));
  // The next round clips there.
  RoundReport second;
  EXPECT_EQ(job.Run(Ids(5), &second).participants, 5);
  EXPECT_EQ(second.Figure("clip_bound"), next);
}

TEST(SecAggRounds, DistributedSkellamNoiseHasTheVarianceTheAccountantCharges) {
  // The same 5 clients and codes with and without --dp skellam(noise=0.5,clip=0.7): the
  // models differ by the sum's noise over 5, z x C / 5 a coordinate (rotated back).
  const std::string dp = "skellam(noise=0.5,clip=0.7)";
  Job noised("secagg(clip=0.7)", "qsgd(bits=4)", dp), plain("secagg(clip=0.7)");
  for (int i = 0; i < 5; ++i) {
    noised.Add(i);
    plain.Add(i);
  }
  RoundReport nr, pr;
  EXPECT_EQ(noised.Run(Ids(5), &nr).participants, 5);
  EXPECT_EQ(plain.Run(Ids(5), &pr).participants, 5);
  ASSERT_EQ(nr.Label("secagg_failed"), "");
  const std::vector<float> a = noised.model(), b = plain.model();
  double sq = 0;
  for (size_t i = 0; i < a.size(); ++i) sq += (a[i] - b[i]) * (a[i] - b[i]);
  const double var = sq / a.size(), expected = std::pow(0.5 * 0.7 / 5, 2);
  EXPECT_NEAR(var, expected, 5 * expected * std::sqrt(2.0 / a.size()));
  // The words hold the codes' sum and 6 standard deviations of the noise: sqrt(V) =
  // 0.5 x sqrt(2112) x 7 / 4 = 40 steps, so 2 (35 + 241) + 1 values, 10 bits.
  EXPECT_EQ(nr.Figure("secagg_width_bits"), 10);
  // The round is charged as the Skellam mechanism of that noise (every client asked).
  const SkellamGrid grid{a.size(), 7, 4};
  privacy::SkellamStep step = privacy::RoundedSensitivity(grid.ClipInSteps(), grid.dim);
  step.variance = std::pow(0.5 * grid.ClipInSteps(), 2);
  EXPECT_NEAR(nr.Figure("dp_noise_variance"), step.variance, 1e-9 * step.variance);
  privacy::RdpAccountant acct;
  acct.ComposeRdp([&](double order) { return step.Rdp(std::ceil(order)); });
  EXPECT_NEAR(nr.Figure("dp_epsilon"), acct.Spent(1e-5).epsilon, 1e-9);
  EXPECT_NEAR(nr.Figure("dp_epsilon_coordinator"), acct.Spent(1e-5).epsilon, 1e-9);
  EXPECT_EQ(nr.per_client.at("dp_asked").size(), 5u);
}

TEST(SecAggRounds, WhatCannotRunWithSecureAggregationIsRefused) {
  const codecs::ModelLayout layout = Layout();
  coordinator::RoundPlan plan;
  const auto refused = [&](const std::string& codec, const std::function<void(
                                                         coordinator::DriverEnv*, FedAvgOptions*)>& change) {
    plan.codec = codec;
    LoopbackHost host(plan, layout);
    coordinator::DriverEnv env = host.DriverEnvFor(&plan, "secagg_refused");
    FedAvgOptions o;
    o.secagg = "secagg(clip=1)";
    change(&env, &o);
    return FedAvgDriver::Create(o, env).status();
  };
  const auto none = [](coordinator::DriverEnv*, FedAvgOptions*) {};
  EXPECT_TRUE(refused("qsgd(bits=4)", none).ok());
  EXPECT_TRUE(refused("terngrad", none).ok());
  for (const char* codec : {"topk(ratio=0.01)", "fp32", "zstd(qsgd(bits=4))",
                            "terngrad(shared=1)", "qsgd(bits=4,elias=1)",
                            "randk(ratio=0.1,values=qsgd(bits=4))"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(refused(codec, none))) << codec;
  }
  EXPECT_FALSE(refused("qsgd(bits=4)", [](auto*, FedAvgOptions* o) {
                 o->rounds_mode = "buffered(k=2,concurrency=4)";
               }).ok());
  EXPECT_FALSE(refused("qsgd(bits=4)", [](auto*, FedAvgOptions* o) {
                 o->dp = "gaussian(noise=1,clip=1)";
               }).ok());
  EXPECT_TRUE(refused("qsgd(bits=4)", [](auto*, FedAvgOptions* o) {
                o->dp = "skellam(noise=1,clip=1)";
              }).ok());
  for (const char* secagg : {"", "secagg(clip=2)", "secagg(clip=1,masks=0)",
                             "secagg(clip=1,quantile=0.5)"}) {
    EXPECT_FALSE(refused("qsgd(bits=4)", [&](auto*, FedAvgOptions* o) {
                   o->dp = "skellam(noise=1,clip=1)";
                   o->secagg = secagg;
                 }).ok())
        << secagg;
  }
  EXPECT_FALSE(refused("qsgd(bits=4)", [](coordinator::DriverEnv* e, auto*) {
                 e->robust.kind = coordinator::AggregatorKind::kMedian;
               }).ok());
  EXPECT_FALSE(refused("qsgd(bits=4)", [](coordinator::DriverEnv* e, auto*) {
                 e->codec_ladder = true;
               }).ok());
  for (const char* spec : {"secagg", "secagg(clip=0)", "secagg(clip=1,threshold=0.4)",
                           "secagg(clip=1,masks=2)", "secagg(clip=1,neighbours=2.5)",
                           "secagg(clip=1,margin=9)", "gaussian(clip=1)", "secagg(clip=1,x=1)"}) {
    EXPECT_FALSE(ParseSecAgg(spec).ok()) << spec;
  }
}

TEST(ZmodSumCollector, RefusesAnotherWidthCodesOutsideTheLevelsAndSendersNotAllowed) {
  coordinator::RoundFacts facts;
  facts.dim = 10;
  ZmodSumCollector plain(10, 4, 8, 7);
  std::vector<uint64_t> words(10, 3);
  words[9] = 8;  // -8 in 4 bits: outside [-7, 7]
  std::vector<codecs::Frame> frames;
  ASSERT_TRUE(codecs::EncodeZmod(words, 4, 0, &frames).ok());
  coordinator::ChunkIn c;
  c.client_id = "a";
  c.chunk_count = 1;
  c.frame = frames[0].bytes;
  EXPECT_EQ(codecs::InputErrorOf(plain.Decode(c, facts).status()), codecs::InputError::kNonFinite);
  frames.clear();
  ASSERT_TRUE(codecs::EncodeZmod(words, 5, 0, &frames).ok());
  c.frame = frames[0].bytes;
  EXPECT_EQ(codecs::InputErrorOf(plain.Decode(c, facts).status()), codecs::InputError::kWrongCodec);
  ZmodSumCollector masked(10, 8, 8, 0);
  masked.AllowOnly(std::set<std::string>{"b"});
  EXPECT_TRUE(masked.Admit(c, nullptr, facts).has_value());
  c.client_id = "b";
  EXPECT_FALSE(masked.Admit(c, nullptr, facts).has_value());
  // Two chunks of which one arrived: nothing in the sum; both: their words mod 2^8.
  frames.clear();
  std::vector<uint64_t> big(10, 200);
  ASSERT_TRUE(codecs::EncodeZmod(big, 8, codecs::ZmodFrameBytes(5, 8), &frames).ok());
  ASSERT_EQ(frames.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    c.chunk_count = 2;
    c.chunk_index = static_cast<uint32_t>(i);
    c.frame = frames[i].bytes;
    auto d = masked.Decode(c, facts);
    ASSERT_TRUE(d.ok());
    masked.Collect(c, *std::move(d), i == 0, i == 1, facts);
    EXPECT_EQ(masked.Complete().size(), static_cast<size_t>(i));
  }
  c.client_id = "b2";
  masked.AllowOnly(std::nullopt);
  for (int i = 0; i < 2; ++i) {
    c.chunk_index = static_cast<uint32_t>(i);
    c.frame = frames[i].bytes;
    masked.Collect(c, masked.Decode(c, facts).value(), i == 0, i == 1, facts);
  }
  EXPECT_EQ(masked.Sum(), std::vector<uint64_t>(10, 400 % 256));
}

}  // namespace
}  // namespace fedlgc::modes
