// The decentralised modes over the real service with 4 clients: LSGD (configured and
// latency-formed groups) and SGP (push-sum through the coordinator's relay, with a lossy
// codec, a cut link and a client killed mid-run), checking the oracles of LSGD and SGP
// (docs/modes.md) sections 2 and 3 on what the processes hold at the end.
#include <signal.h>

#include <cmath>
#include <filesystem>
#include <numeric>
#include <thread>

#include "core/model.h"
#include "edge_client/client_state.h"
#include "gtest/gtest.h"
#include "modes/drivers.h"
#include "modes/local_model.h"
#include "modes/lsgd/lsgd_driver.h"
#include "modes/sgp/sgp_driver.h"
#include "monitoring/metrics.h"
#include "tests/integration/harness.h"

namespace fedlgc::testing {
namespace {

using std::chrono::seconds;

struct ModeRun {
  std::string dir, certs;
  coordinator::CoordinatorOptions options;
  std::vector<RoundReport> reports;
  std::vector<float> model;
  std::map<std::string, size_t> groups;          // LSGD
  std::pair<std::vector<double>, double> mail;   // SGP
  std::vector<modes::LocalModel> states;         // each client's model, at the end
  std::string metrics;
  double overlapped_periods = 0;  // clients' fedlgc_sgp_overlapped_periods_total
};

// Client i's local model at the end of a run of `mode` (its slot in the client state).
absl::StatusOr<modes::LocalModel> LocalModelOf(const std::string& dir, int i,
                                               const std::string& mode) {
  auto st = edge_client::LoadClientState(dir + "/clients/client-" + std::to_string(i) + ".state");
  if (!st.ok()) return st.status();
  return modes::LoadLocalModel(*st, mode);
}

coordinator::CoordinatorOptions JobOptions(const std::string& dir, const std::string& certs,
                                           const std::string& mode, int n) {
  auto o = CoordinatorDefaults(dir, certs);
  o.mode = mode;
  o.min_clients = static_cast<uint32_t>(n);
  o.rounds = 4;
  o.plan.local_steps = 20;
  return o;
}

modes::ModeOptions LsgdPeriods() {
  modes::ModeOptions mo;
  mo.lsgd.period = 10;
  mo.lsgd.global_period = 20;
  return mo;
}

// Runs `o` with n in-process clients (client i behind a fault proxy with links[i] when
// given) and collects what the coordinator and the clients hold at the end.
ModeRun RunMode(const std::string& dir, const std::string& certs, coordinator::CoordinatorOptions o,
                const modes::ModeOptions& mo, int n, const std::vector<std::string>& links = {}) {
  ModeRun r;
  r.dir = dir;
  r.certs = certs;
  r.options = o;
  InProcessCoordinator coord(o, mo);
  std::vector<std::unique_ptr<sim::FaultProxy>> proxies;
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < n; ++i) {
    int port = coord.port();
    if (i < static_cast<int>(links.size()) && !links[i].empty()) {
      auto p = sim::FaultProxy::Start("127.0.0.1", coord.port(),
                                      sim::LinkSpec::Parse(links[i]).value(), i);
      EXPECT_TRUE(p.ok());
      port = (*p)->port();
      proxies.push_back(std::move(p).value());
    }
    clients.push_back(std::make_unique<ClientThread>(ClientDefaults(dir, certs, i, n, port)));
  }
  EXPECT_TRUE(coord.Wait(seconds(180))) << "the job did not finish";
  EXPECT_TRUE(coord.result().ok()) << coord.result();
  for (auto& c : clients) {
    EXPECT_TRUE(c->Wait(seconds(30)));
    EXPECT_TRUE(c->result().ok()) << c->result();
    for (const auto& fam : c->get().metrics().registry()->Collect()) {
      if (fam.name != "fedlgc_sgp_overlapped_periods_total") continue;
      for (const auto& m : fam.metric) r.overlapped_periods += m.counter.value;
    }
  }
  r.reports = coord.get().reports();
  r.model = coord.get().engine().ModelVector();
  if (auto* l = dynamic_cast<modes::LsgdDriver*>(&coord.get().driver())) r.groups = l->Groups();
  if (auto* s = dynamic_cast<modes::SgpDriver*>(&coord.get().driver())) r.mail = s->MailTotals();
  r.metrics = ScrapeMetrics(coord.get().metrics_port());
  for (int i = 0; i < n; ++i) {
    auto m = LocalModelOf(dir, i, r.options.mode);
    EXPECT_TRUE(m.ok()) << m.status();
    r.states.push_back(m.ok() ? std::move(m).value() : modes::LocalModel{});
  }
  return r;
}

double MaxAbsDiff(std::span<const float> a, std::span<const float> b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  return worst;
}

// LSGD and SGP account for what a codec loses in their own protocol: a codec with its own
// residual (ef, dgc) would count it twice, so the job is refused before it starts; so is
// gradiveq, whose bases only the FedAvg coordinator fits and serves.
TEST(Modes, LsgdAndSgpRefuseCodecsWithSenderState) {
  auto o = CoordinatorDefaults(FreshDir("stateful_codecs"), "");
  o.insecure = true;
  for (const char* mode : {"lsgd", "sgp"}) {
    o.mode = mode;
    for (const char* codec : {"dgc(ratio=0.01)", "ef(topk(ratio=0.01))", "powersgd(rank=2)",
                              "powersgd(rank=2,phases=2)", "gradiveq(dims=4,slice=64)",
                              "randk(ratio=0.01,seed=round)", "terngrad(shared=1)"}) {
      o.plan.codec = codec;
      const absl::Status st = modes::ValidateJob(o);
      EXPECT_TRUE(absl::IsInvalidArgument(st)) << mode << " " << codec << ": " << st;
      EXPECT_NE(std::string(st.message()).find("--mode fedavg"), std::string::npos) << st;
    }
    o.plan.codec = "topk(ratio=0.01)";
    EXPECT_TRUE(modes::ValidateJob(o).ok()) << mode;
  }
  o.mode = "fedavg";
  o.plan.codec = "dgc(ratio=0.01)";
  EXPECT_TRUE(modes::ValidateJob(o).ok());
  // PowerSGD is built from the job model's layout, which the validation reads too; LGC's
  // warm-up rounds build their codecs without one and refuse it.
  o.plan.codec = "powersgd(rank=2)";
  EXPECT_TRUE(modes::ValidateJob(o).ok()) << modes::ValidateJob(o);
  // GradiVeQ: bare (clients add what they keep of its error), and never as a warm-up codec
  // (its bases belong to the job codec).
  o.plan.codec = "gradiveq(dims=4,slice=64)";
  EXPECT_TRUE(modes::ValidateJob(o).ok()) << modes::ValidateJob(o);
  o.plan.warmup_codecs = {"gradiveq(dims=4,slice=64)"};
  EXPECT_NE(std::string(modes::ValidateJob(o).message()).find("--codec-warmup"), std::string::npos);
  o.plan.warmup_codecs = {"fp32"};
  EXPECT_TRUE(modes::ValidateJob(o).ok()) << modes::ValidateJob(o);
  // rand-k from the round's seed: the FedAvg driver names it, also in warm-up rounds,
  // except before a gradiveq job (whose bases name the rounds' codecs).
  o.plan.warmup_codecs = {"randk(ratio=0.05,seed=round)"};
  EXPECT_NE(std::string(modes::ValidateJob(o).message()).find("--codec-warmup"), std::string::npos);
  o.plan.codec = "topk(ratio=0.01)";
  EXPECT_TRUE(modes::ValidateJob(o).ok()) << modes::ValidateJob(o);
  o.plan.codec = "ef(randk(ratio=0.01,scale=0,seed=round))";
  EXPECT_TRUE(modes::ValidateJob(o).ok()) << modes::ValidateJob(o);
  o.plan.warmup_codecs = {"fp32"};
  o.plan.codec = "ef(gradiveq(dims=4,slice=64))";
  EXPECT_NE(std::string(modes::ValidateJob(o).message()).find("gradiveq(...) itself"),
            std::string::npos);
  o.plan.warmup_codecs.clear();
  // Two-phase PowerSGD is the FedAvg driver's round protocol: the job codec itself, not
  // wrapped, not a warm-up codec, and its Q payload (one chunk) within --chunk-bytes.
  o.plan.codec = "powersgd(rank=2,phases=2)";
  EXPECT_TRUE(modes::ValidateJob(o).ok()) << modes::ValidateJob(o);
  o.plan.codec = "zstd(powersgd(rank=2,phases=2))";
  EXPECT_NE(std::string(modes::ValidateJob(o).message()).find("unwrapped"), std::string::npos)
      << modes::ValidateJob(o);
  o.plan.codec = "fp32";
  o.plan.warmup_codecs = {"powersgd(rank=2,phases=2)"};
  EXPECT_NE(std::string(modes::ValidateJob(o).message()).find("--codec-warmup"), std::string::npos);
  o.plan.warmup_codecs.clear();
  // TernGrad's shared scale is agreed in the FedAvg driver's rounds: the job codec itself.
  o.plan.codec = "terngrad(shared=1)";
  EXPECT_TRUE(modes::ValidateJob(o).ok()) << modes::ValidateJob(o);
  o.plan.codec = "zstd(terngrad(shared=1))";
  EXPECT_NE(std::string(modes::ValidateJob(o).message()).find("not inside another codec"),
            std::string::npos)
      << modes::ValidateJob(o);
  o.plan.codec = "fp32";
  o.plan.warmup_codecs = {"terngrad(shared=1)"};
  EXPECT_NE(std::string(modes::ValidateJob(o).message()).find("--codec-warmup"), std::string::npos);
  o.plan.warmup_codecs.clear();
  o.plan.codec = "powersgd(rank=8,phases=2)";
  o.plan.max_chunk_bytes = 4096;
  EXPECT_NE(std::string(modes::ValidateJob(o).message()).find("--chunk-bytes"), std::string::npos)
      << modes::ValidateJob(o);
  o.model = "no-such-model";
  EXPECT_FALSE(modes::ValidateJob(o).ok());
}

// --codec-ladder: FedAvg only, its first rung is the job codec, no warm-up codecs, rungs
// that get cheaper and decode alike in every round.
TEST(Modes, ACodecLadderIsAFedAvgListOfCodecsThatGetCheaper) {
  auto o = CoordinatorDefaults(FreshDir("codec_ladder"), "");
  o.insecure = true;
  o.codec_ladder = {"fp32", "qsgd(bits=8)", "topk(ratio=0.01,values=qsgd(bits=8))"};
  o.plan.codec = "fp32";
  EXPECT_TRUE(modes::ValidateJob(o).ok()) << modes::ValidateJob(o);
  const auto refused = [&](const std::string& why) {
    const absl::Status st = modes::ValidateJob(o);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_NE(std::string(st.message()).find(why), std::string::npos) << st;
  };
  for (const char* mode : {"lsgd", "sgp"}) {
    o.mode = mode;
    refused("the ladder runs with --mode fedavg");
  }
  o.mode = "fedavg";
  o.plan.codec = "qsgd(bits=8)";
  refused("its first rung, fp32, is the job codec");
  o.plan.codec = "fp32";
  o.plan.warmup_codecs = {"topk(ratio=0.1)"};
  refused("takes no --codec-warmup");
  o.plan.warmup_codecs.clear();
  o.codec_ladder = {"fp32", "topk(ratio=0.01)", "qsgd(bits=4)"};
  refused("densest first");
  o.codec_ladder = {"fp32", "randk(ratio=0.01,seed=round)"};
  refused("every round");
}

TEST(Modes, TheUploadOrderIsOneTheClientsKnow) {
  auto o = CoordinatorDefaults(FreshDir("upload_order"), "");
  o.insecure = true;
  for (const char* order : {"index", "layer", "magnitude"}) {
    o.plan.upload_order = order;
    EXPECT_TRUE(modes::ValidateJob(o).ok()) << order;
  }
  o.plan.upload_order = "random";
  const absl::Status st = modes::ValidateJob(o);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(std::string(st.message()).find("--upload-order"), std::string::npos) << st;
}

TEST(Lsgd, TwoConfiguredGroupsElectTheArgminAndTheRunsModelIsTheGlobalLeaders) {
  const std::string dir = FreshDir("lsgd-groups");
  const std::string certs = MakeCerts(dir, 4);
  auto o = JobOptions(dir, certs, "lsgd", 4);
  modes::ModeOptions mo = LsgdPeriods();
  mo.lsgd.groups = {{"client-0", "client-1"}, {"client-2", "client-3"}};
  const ModeRun r = RunMode(dir, certs, o, mo, 4);
  ASSERT_EQ(r.reports.size(), 4u);
  const size_t dim = r.model.size();
  for (const auto& rep : r.reports) {
    ASSERT_EQ(rep.per_client.count("lsgd_loss"), 1u) << "round " << rep.round;
    const auto& losses = rep.per_client.at("lsgd_loss");
    ASSERT_EQ(losses.size(), 4u) << "round " << rep.round;
    // The global leader is the argmin of the reported running losses.
    auto best = std::min_element(losses.begin(), losses.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    EXPECT_EQ(rep.Label("lsgd_leader"), best->first) << "round " << rep.round;
    // Only the two group leaders upload: two models' worth of fp32 coordinates.
    EXPECT_EQ(rep.raw_uplink_bytes, 2 * dim * 4) << "round " << rep.round;
    EXPECT_EQ(rep.participants, 2) << "round " << rep.round;
  }
  // The run's model is the last global leader's (its group's reference took its model).
  const std::string leader = r.reports.back().Label("lsgd_leader");
  const int li = leader.back() - '0';
  EXPECT_LT(MaxAbsDiff(r.model, r.states[li].x), 1e-5);
  // Everyone trained every round and applied the pulls it was sent.
  for (const auto& s : r.states) {
    EXPECT_EQ(s.trained_round, 4u);
    EXPECT_EQ(s.pulled_round, 4u);
  }
  // The others are different models (each keeps its own), pulled towards the leaders.
  for (int i = 0; i < 4; ++i) {
    if (i != li) {
      EXPECT_GT(MaxAbsDiff(r.model, r.states[i].x), 1e-4);
    }
  }
  EXPECT_GT(r.reports.back().accuracy, 0.8);
  EXPECT_EQ(SumMetric(r.metrics, "fedlgc_lsgd_leader"), 1.0);
}

TEST(Lsgd, GroupsFormFromMeasuredLatencyAndQsgdCarriesTheLeaders) {
  const std::string dir = FreshDir("lsgd-latency");
  const std::string certs = MakeCerts(dir, 4);
  auto o = JobOptions(dir, certs, "lsgd", 4);
  modes::ModeOptions mo = LsgdPeriods();
  mo.lsgd.group_size = 2;
  o.plan.codec = "qsgd(bits=4)";
  // Clients 2 and 3 sit behind 40 ms links; 0 and 1 are local.
  const ModeRun r = RunMode(dir, certs, o, mo, 4, {"", "", "delay=40ms", "delay=40ms"});
  ASSERT_EQ(r.reports.size(), 4u);
  ASSERT_EQ(r.groups.size(), 4u);
  EXPECT_EQ(r.groups.at("client-0"), r.groups.at("client-1"));
  EXPECT_EQ(r.groups.at("client-2"), r.groups.at("client-3"));
  EXPECT_NE(r.groups.at("client-0"), r.groups.at("client-2"));
  for (const auto& rep : r.reports) {
    EXPECT_EQ(rep.participants, 2) << "round " << rep.round;
    // 4-bit QSGD: about 7-8x fewer bytes than fp32.
    EXPECT_GT(static_cast<double>(rep.raw_uplink_bytes) / rep.uplink_bytes, 6.0);
  }
  EXPECT_GT(r.reports.back().accuracy, 0.75);
}

TEST(Lsgd, ALeaderKilledMidUploadIsReplacedByTheNextBestOfItsGroup) {
  const std::string dir = FreshDir("lsgd-kill");
  const std::string certs = MakeCerts(dir, 4);
  auto o = JobOptions(dir, certs, "lsgd", 4);
  modes::ModeOptions mo = LsgdPeriods();
  mo.lsgd.groups = {{"client-0", "client-1"}, {"client-2", "client-3"}};
  o.rounds = 1;  // all four take part (min_clients 4): the round the victim leads
  o.plan.max_chunk_bytes = 32 * 1024;
  InProcessCoordinator coord(o, mo);
  // Group 0 sits behind 4 Mbit/s links: its leader's upload (636 KB) takes over a second.
  std::vector<std::unique_ptr<sim::FaultProxy>> proxies;
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < 4; ++i) {
    int port = coord.port();
    if (i < 2) {
      auto p = sim::FaultProxy::Start("127.0.0.1", coord.port(),
                                      sim::LinkSpec::Parse("rate=4mbit").value(), i);
      ASSERT_TRUE(p.ok());
      port = (*p)->port();
      proxies.push_back(std::move(p).value());
    }
    clients.push_back(SpawnEdge(dir, certs, i, 4, port));
  }
  // Kill group 0's leader once the first chunks of its upload have arrived.
  int victim = -1;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (int i = 0; i < 2; ++i) {
          if (UplinkBytesOf(coord.get(), "client-" + std::to_string(i)) > 0) victim = i;
        }
        return victim >= 0;
      },
      seconds(60)))
      << "group 0 never uploaded";
  clients[victim]->Kill(SIGKILL);
  EXPECT_EQ(clients[victim]->Wait(seconds(10)), 128 + SIGKILL);
  ASSERT_TRUE(coord.Wait(seconds(180)));
  const auto reports = coord.get().reports();
  ASSERT_EQ(reports.size(), 1u);
  const std::string other = "client-" + std::to_string(1 - victim);
  // Round 1 closed without waiting for its deadline, with both groups' models: the other
  // member of group 0 took over.
  EXPECT_FALSE(reports[0].hit_deadline);
  EXPECT_LT(reports[0].seconds, 50);
  EXPECT_EQ(reports[0].participants, 2);
  EXPECT_GT(UplinkBytesOf(coord.get(), other), 0);
  for (int i = 0; i < 4; ++i) {
    if (i != victim) {
      EXPECT_EQ(clients[i]->Wait(seconds(60)), 0) << i;
    }
  }
}

// Push-sum conserves mass: over the clients and the coordinator's mailboxes, the sum of
// w is the number of clients and the sum of x is what the clients brought in (their
// starting models plus every local training step).
// Downlink bytes over the run and what they stand for in float32.
double DownlinkRatio(const ModeRun& r) {
  double wire = 0, raw = 0;
  for (const auto& rep : r.reports) {
    wire += static_cast<double>(rep.downlink_bytes);
    raw += static_cast<double>(rep.raw_downlink_bytes);
  }
  return wire > 0 ? raw / wire : 0;
}

TEST(Lsgd, ACompressedDownlinkCarriesTheGroupReferencesAsDeltas) {
  const std::string dir = FreshDir("lsgd-downlink");
  const std::string certs = MakeCerts(dir, 4);
  auto o = JobOptions(dir, certs, "lsgd", 4);
  o.downlink.codec = "qsgd(bits=4)";
  modes::ModeOptions mo = LsgdPeriods();
  mo.lsgd.groups = {{"client-0", "client-1"}, {"client-2", "client-3"}};
  const ModeRun r = RunMode(dir, certs, o, mo, 4);
  ASSERT_EQ(r.reports.size(), 4u);
  // The group references went down as broadcasts of their own, saved beside the
  // checkpoints, and what went down cost less than the float32 models it stands for.
  int group_states = 0;
  for (const auto& e : std::filesystem::directory_iterator(o.state_dir)) {
    group_states += e.path().filename().string().rfind("downlink-group_", 0) == 0;
  }
  EXPECT_GE(group_states, 2);
  std::printf("downlink: %.2fx fewer bytes than float32\n", DownlinkRatio(r));
  EXPECT_GT(DownlinkRatio(r), 1.3);
  for (const auto& s : r.states) EXPECT_EQ(s.pulled_round, 4u);
  EXPECT_GT(r.reports.back().accuracy, 0.75);
}

void ExpectConserved(const ModeRun& r, int n, double tolerance) {
  std::vector<double> x = r.mail.first, brought(x.size(), 0.0);
  double w = r.mail.second;
  for (const auto& s : r.states) {
    ASSERT_EQ(s.x.size(), x.size());
    ASSERT_EQ(s.contributed.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] += s.x[i];
      brought[i] += s.contributed[i];
    }
    w += s.w;
    if (!s.share.empty()) {  // a share still in flight
      for (size_t i = 0; i < x.size(); ++i) x[i] += s.share[i];
      w += s.share_pw;
    }
  }
  EXPECT_NEAR(w, n, 1e-9);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - brought[i]));
  std::printf("conservation: max |sum x - sum brought| = %.3g over %zu coordinates\n", worst,
              x.size());
  EXPECT_LT(worst, tolerance);
}

TEST(Sgp, PushSumOverTheRelayConservesMassAndLearns) {
  const std::string dir = FreshDir("sgp-fp32");
  const std::string certs = MakeCerts(dir, 4);
  auto o = JobOptions(dir, certs, "sgp", 4);
  const ModeRun r = RunMode(dir, certs, o, {}, 4);
  ASSERT_EQ(r.reports.size(), 4u);
  // The clients report their distance to the round's mean before training: in round 1
  // everyone holds the initial model; from then on their shards pull them apart.
  EXPECT_EQ(r.reports[0].Figure("sgp_consensus_distance", -1), 0);
  for (const auto& rep : r.reports) {
    EXPECT_EQ(rep.participants, 4) << "round " << rep.round;
    if (rep.round > 1) {
      EXPECT_GT(rep.Figure("sgp_consensus_distance", -1), 0) << "round " << rep.round;
    }
    // Each client pushes half of its model: one model's fp32 coordinates each.
    EXPECT_EQ(rep.raw_uplink_bytes, 4 * r.model.size() * 4);
  }
  for (const auto& s : r.states) {
    EXPECT_EQ(s.trained_round, 4u);
    EXPECT_TRUE(s.share.empty());  // every share delivered
  }
  ExpectConserved(r, 4, 1e-4);
  EXPECT_GT(r.reports.back().accuracy, 0.8);
  EXPECT_GT(SumMetric(r.metrics, "fedlgc_sgp_consensus_distance"), 0);
}

TEST(Sgp, LossyCodecAndACutLinkStillConserveMass) {
  const std::string dir = FreshDir("sgp-qsgd");
  const std::string certs = MakeCerts(dir, 4);
  auto o = JobOptions(dir, certs, "sgp", 4);
  o.plan.codec = "qsgd(bits=4)";
  o.plan.max_chunk_bytes = 16 * 1024;
  o.rounds = 5;
  // Client 1's connections are cut (30% chance per MiB): transfers resume.
  const ModeRun r = RunMode(dir, certs, o, {}, 4, {"", "cut=0.3"});
  ASSERT_EQ(r.reports.size(), 5u);
  int delivered = 0;
  for (const auto& rep : r.reports) delivered += rep.participants;
  std::printf("%d of 20 shares delivered\n", delivered);
  ExpectConserved(r, 4, 1e-4);
  EXPECT_GT(r.reports.back().accuracy, 0.75);
}

TEST(Sgp, ACompressedDownlinkStillConservesMass) {
  const std::string dir = FreshDir("sgp-downlink");
  const std::string certs = MakeCerts(dir, 4);
  auto o = JobOptions(dir, certs, "sgp", 4);
  o.downlink.codec = "qsgd(bits=4)";
  const ModeRun r = RunMode(dir, certs, o, {}, 4);
  ASSERT_EQ(r.reports.size(), 4u);
  // Shares are coded relative to the model clients hold (the deltas' rebuild), and the
  // coordinator adds that one back: push-sum's mass stays whole to float rounding.
  ExpectConserved(r, 4, 1e-4);
  // The relayed shares (inbox blobs) go down as they came; the model as 4-bit deltas.
  std::printf("downlink: %.2fx fewer bytes than float32\n", DownlinkRatio(r));
  EXPECT_GT(DownlinkRatio(r), 1.2);
  EXPECT_GT(r.reports.back().accuracy, 0.75);
}

TEST(Sgp, OverlapTrainsTheNextPeriodWhileTheShareTravels) {
  const std::string dir = FreshDir("sgp-overlap");
  const std::string certs = MakeCerts(dir, 4);
  auto o = JobOptions(dir, certs, "sgp", 4);
  modes::ModeOptions mo;
  mo.sgp.overlap = true;
  o.plan.codec = "qsgd(bits=8)";
  // Slow links: each share (about 160 KB) takes a quarter of a second to arrive.
  const ModeRun r =
      RunMode(dir, certs, o, mo, 4, {"rate=5mbit", "rate=5mbit", "rate=5mbit", "rate=5mbit"});
  ASSERT_EQ(r.reports.size(), 4u);
  for (const auto& rep : r.reports) {
    EXPECT_EQ(rep.participants, 4) << "round " << rep.round;
    EXPECT_FALSE(rep.hit_deadline);
  }
  // One local period per round, none after the last; those of rounds 2-4 trained while the
  // share of the round before was uploading (3 per client).
  for (const auto& s : r.states) EXPECT_EQ(s.trained_round, 4u);
  EXPECT_EQ(r.overlapped_periods, 4 * 3);
  ExpectConserved(r, 4, 1e-4);
  EXPECT_GT(r.reports.back().accuracy, 0.75);
}

TEST(Sgp, AClientKilledMidRunStallsNobodyAndMassIsConserved) {
  const std::string dir = FreshDir("sgp-kill");
  const std::string certs = MakeCerts(dir, 4);
  auto o = JobOptions(dir, certs, "sgp", 4);
  o.plan.codec = "qsgd(bits=4)";
  o.rounds = 6;
  o.min_clients = 3;  // the job goes on without the victim
  ModeRun r;
  r.options = o;
  InProcessCoordinator coord(o);
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(SpawnEdge(dir, certs, i, 4, coord.port()));
  ASSERT_TRUE(WaitFor([&] { return coord.get().reports().size() >= 2; }, seconds(120)))
      << "two rounds did not commit";
  clients[3]->Kill(SIGKILL);
  EXPECT_EQ(clients[3]->Wait(seconds(10)), 128 + SIGKILL);
  ASSERT_TRUE(coord.Wait(seconds(180)));
  r.reports = coord.get().reports();
  ASSERT_EQ(r.reports.size(), 6u);
  for (size_t i = 2; i < r.reports.size(); ++i) {
    // Nobody waits for the victim: no round runs into its 60 s deadline.
    EXPECT_LT(r.reports[i].seconds, 45) << "round " << r.reports[i].round;
    EXPECT_FALSE(r.reports[i].hit_deadline);
  }
  // The last rounds mix the three that are left, every share delivered.
  EXPECT_EQ(r.reports.back().participants, 3);
  // The victim comes back after the end, learns which of its shares were delivered, and
  // stops; what was relayed to it meanwhile waits in its mailbox.
  clients[3] = SpawnEdge(dir, certs, 3, 4, coord.port());
  for (auto& c : clients) EXPECT_EQ(c->Wait(seconds(60)), 0);
  r.mail = dynamic_cast<modes::SgpDriver&>(coord.get().driver()).MailTotals();
  for (int i = 0; i < 4; ++i) {
    auto m = LocalModelOf(dir, i, "sgp");
    ASSERT_TRUE(m.ok()) << m.status();
    r.states.push_back(std::move(m).value());
  }
  EXPECT_LT(r.states[3].trained_round, 6u);
  ExpectConserved(r, 4, 1e-4);
  EXPECT_GT(r.reports.back().accuracy, 0.75);
}

}  // namespace
}  // namespace fedlgc::testing
