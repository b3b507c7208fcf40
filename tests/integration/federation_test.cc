// Whole federations on 127.0.0.1 with real mTLS: learning, a cut upload that resumes and
// counts exactly once, a coordinator killed with SIGKILL and restarted, identity
// enforcement, malformed chunks, /metrics byte counters, many clients in one process, and a
// bare coordinator and a bare client that meet on the default address.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "base/file.h"
#include "base/str.h"
#include "codecs/frame.h"
#include "codecs/powersgd_two_phase.h"
#include "codecs/registry.h"
#include "codecs/sparse_codec.h"
#include "core/float_bytes.h"
#include "core/model.h"
#include "core/protocol.h"
#include "core/round_report.h"
#include "edge_client/client_host.h"
#include "edge_client/client_state.h"
#include "gtest/gtest.h"
#include "modes/clients.h"
#include "monitoring/metrics.h"
#include "privacy/rdp_accountant.h"
#include "privacy/skellam.h"
#include "protos/fedlgc.grpc.pb.h"
#include "tests/integration/harness.h"

namespace fedlgc::testing {
namespace {

using std::chrono::seconds;

// Runs a federation of `n` clients to the end; `proxy_link[i]` non-empty puts client i
// behind a fault proxy. Returns the final model.
struct RunResult {
  std::vector<float> model;
  std::vector<RoundReport> reports;
  double coordinator_uplink = 0, clients_uplink = 0, rejected_duplicates = 0;
  double coordinator_raw = 0, clients_raw = 0;
  double upload_resumes = 0;
  uint64_t proxy_cuts = 0;
};

// The job settings a test varies; everything else comes from CoordinatorDefaults.
struct Job {
  std::string model = "mlp";
  uint32_t rounds = 3;
  coordinator::RoundPlan plan;
  std::string aggregator = "mean";
  modes::ModeOptions modes;
};

// A job of `rounds` rounds of 20 local steps with `codec` in chunks of `chunk_bytes`.
Job ShortJob(uint32_t rounds, std::string codec, uint64_t chunk_bytes) {
  Job o;
  o.rounds = rounds;
  o.plan.codec = std::move(codec);
  o.plan.local_steps = 20;
  o.plan.max_chunk_bytes = chunk_bytes;
  return o;
}

// The coordinator options of `job` for n clients in `dir`.
coordinator::CoordinatorOptions JobOptions(const std::string& dir, const std::string& certs, int n,
                                           const Job& job) {
  auto o = CoordinatorDefaults(dir, certs);
  o.model = job.model;
  o.rounds = job.rounds;
  o.min_clients = static_cast<uint32_t>(n);
  o.plan = job.plan;
  o.aggregator = job.aggregator;
  return o;
}

RunResult RunFederation(const std::string& name, int n, const Job& job,
                        const std::vector<std::string>& proxy_link = {}) {
  const std::string dir = FreshDir(name);
  const std::string certs = MakeCerts(dir, n);
  const auto o = JobOptions(dir, certs, n, job);
  InProcessCoordinator coord(o, job.modes);
  std::vector<std::unique_ptr<sim::FaultProxy>> proxies;
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < n; ++i) {
    int port = coord.port();
    if (i < static_cast<int>(proxy_link.size()) && !proxy_link[i].empty()) {
      auto p = sim::FaultProxy::Start("127.0.0.1", coord.port(),
                                      sim::LinkSpec::Parse(proxy_link[i]).value(), i);
      EXPECT_TRUE(p.ok());
      port = (*p)->port();
      proxies.push_back(std::move(p).value());
    }
    clients.push_back(std::make_unique<ClientThread>(ClientDefaults(dir, certs, i, n, port)));
  }
  EXPECT_TRUE(coord.Wait(seconds(120))) << "federation did not finish";
  EXPECT_TRUE(coord.result().ok()) << coord.result();
  RunResult r;
  for (auto& c : clients) {
    EXPECT_TRUE(c->Wait(seconds(30)));
    EXPECT_TRUE(c->result().ok()) << c->result();
  }
  // Client-side counters through the registry (clients run no exposer here).
  for (auto& c : clients) {
    for (const auto& fam : c->get().metrics().registry()->Collect()) {
      for (const auto& m : fam.metric) {
        if (fam.name == "fedlgc_uplink_wire_bytes_total") r.clients_uplink += m.counter.value;
        if (fam.name == "fedlgc_uplink_raw_bytes_total") r.clients_raw += m.counter.value;
        if (fam.name == "fedlgc_stream_resumes_total") {
          for (const auto& l : m.label) {
            if (l.name == "stream" && l.value == "upload") r.upload_resumes += m.counter.value;
          }
        }
      }
    }
  }
  const std::string text = ScrapeMetrics(coord.get().metrics_port());
  r.coordinator_uplink = SumMetric(text, "fedlgc_uplink_wire_bytes_total");
  r.coordinator_raw = SumMetric(text, "fedlgc_uplink_raw_bytes_total");
  for (const auto& fam : coord.get().metrics().registry()->Collect()) {
    if (fam.name != "fedlgc_rejected_total") continue;
    for (const auto& m : fam.metric) {
      for (const auto& l : m.label) {
        if (l.value == "duplicate") r.rejected_duplicates += m.counter.value;
      }
    }
  }
  for (auto& p : proxies) r.proxy_cuts += p->cuts();
  r.model = coord.get().engine().ModelVector();
  r.reports = coord.get().reports();
  return r;
}

// Runs n in-process clients of `coord`'s job until it ends, checks that the coordinator
// and every client finished cleanly, and reads back its round log.
absl::StatusOr<std::vector<RoundReport>> RunClientsToTheEnd(InProcessCoordinator& coord,
                                                            const std::string& dir,
                                                            const std::string& certs, int n,
                                                            const std::string& state_dir) {
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < n; ++i) {
    clients.push_back(
        std::make_unique<ClientThread>(ClientDefaults(dir, certs, i, n, coord.port())));
  }
  EXPECT_TRUE(coord.Wait(seconds(180))) << "federation did not finish";
  EXPECT_TRUE(coord.result().ok()) << coord.result();
  for (auto& c : clients) {
    EXPECT_TRUE(c->Wait(seconds(30)));
    EXPECT_TRUE(c->result().ok()) << c->result();
  }
  return ReadRoundLog(state_dir + "/rounds.jsonl");
}

// Waits up to a minute for the coordinator with `state_dir` to log its first committed round.
bool WaitForFirstCommit(const std::string& state_dir) {
  const std::string rounds_file = state_dir + "/rounds.jsonl";
  return WaitFor(
      [&] {
        auto rounds = ReadRoundLog(rounds_file);
        return rounds.ok() && !rounds->empty();
      },
      seconds(60));
}

// Largest |a - b| and the share of coordinates that differ at all.
std::pair<double, double> Compare(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
    differ += a[i] != b[i];
  }
  return {worst, static_cast<double>(differ) / std::max<size_t>(1, a.size())};
}

TEST(Federation, ThreeClientsLearnOverMtlsAndMetricsAddUp) {
  Job o;
  o.plan.codec = "qsgd(bits=8)";
  o.plan.local_steps = 20;
  o.plan.max_chunk_bytes = 64 * 1024;
  const RunResult r = RunFederation("learn", 3, o);
  ASSERT_EQ(r.reports.size(), 3u);
  for (const auto& rep : r.reports) {
    EXPECT_EQ(rep.participants, 3);
    EXPECT_GT(rep.uplink_bytes, 0u);
    // 8-bit QSGD: about 4x fewer bytes than the fp32 coordinates it carries.
    EXPECT_NEAR(static_cast<double>(rep.raw_uplink_bytes) / rep.uplink_bytes, 3.97, 0.05);
  }
  EXPECT_GT(r.reports.back().accuracy, 0.9);
  EXPECT_LT(r.reports.back().loss, r.reports.front().loss + 1e-9);
  // What /metrics shows equals what the clients sent.
  EXPECT_GT(r.coordinator_uplink, 0);
  EXPECT_EQ(r.coordinator_uplink, r.clients_uplink);
}

TEST(Federation, WarmupCodecsThenTheJobCodec) {
  Job o;
  o.rounds = 3;
  o.plan.codec = "topk(ratio=0.05)";
  o.plan.warmup_codecs = {"fp32"};
  o.plan.local_steps = 20;
  const RunResult r = RunFederation("warmup", 2, o);
  ASSERT_EQ(r.reports.size(), 3u);
  // Round 1 in fp32 (frame headers only on top), then top-5% with its indices.
  EXPECT_NEAR(static_cast<double>(r.reports[0].raw_uplink_bytes) / r.reports[0].uplink_bytes, 1.0,
              0.01);
  for (size_t i = 1; i < r.reports.size(); ++i) {
    EXPECT_EQ(r.reports[i].participants, 2);
    EXPECT_GT(static_cast<double>(r.reports[i].raw_uplink_bytes) / r.reports[i].uplink_bytes, 8.0);
  }
  EXPECT_GT(r.reports.back().accuracy, 0.8);
  // Both sides count the same wire and fp32-equivalent bytes.
  EXPECT_EQ(r.coordinator_uplink, r.clients_uplink);
  EXPECT_EQ(r.coordinator_raw, r.clients_raw);
}

TEST(Federation, AClientCutMidUploadResumesAndCountsExactlyOnce) {
  Job o;
  o.rounds = 2;
  o.plan.codec = "fp32";
  o.plan.local_steps = 20;
  o.plan.max_chunk_bytes = 32 * 1024;  // 20 chunks per update
  const RunResult clean = RunFederation("cut_clean", 2, o);
  // Client 0's link is cut once, after the model download (636 KB) and ~300 KB of upload.
  const RunResult cut = RunFederation("cut_faulty", 2, o, {"cut_after=950k"});
  EXPECT_EQ(cut.proxy_cuts, 1u);
  EXPECT_GE(cut.upload_resumes, 1);
  ASSERT_EQ(cut.model.size(), clean.model.size());
  for (size_t i = 0; i < cut.reports.size(); ++i) {
    EXPECT_EQ(cut.reports[i].participants, 2);
    EXPECT_EQ(cut.reports[i].stragglers, 0);
    // Every coordinate of both updates counted once: raw bytes = 2 x 4 x dim.
    EXPECT_EQ(cut.reports[i].raw_uplink_bytes, 2u * 4 * cut.model.size());
  }
  // Same seeds, same data: the faulty run ends where the clean one does. Only the order
  // of additions may differ between runs (chunks arrive in another order), which moves a
  // float by at most an ulp; counting a chunk twice would move whole ranges.
  const auto [worst, share] = Compare(cut.model, clean.model);
  EXPECT_LT(worst, 1e-6);
  EXPECT_LT(share, 1e-3);
}

// P3 by layer: clients cut their updates at tensor boundaries, so each chunk lies in one
// tensor. The wire carries exactly the frames an fp32 encoding with those cuts makes (one
// frame header more per extra cut), and the run ends where the coordinate-order run does.
TEST(Federation, ByLayerEachChunkLiesInOneTensorAndTheRunMatchesCoordinateOrder) {
  Job o = ShortJob(2, "fp32", 32 * 1024);
  const RunResult by_index = RunFederation("p3_index", 2, o);
  o.plan.upload_order = "layer";
  const RunResult by_layer = RunFederation("p3_layer", 2, o);
  const codecs::ModelLayout layout = core::ModelLayoutOf(o.model).value();
  ASSERT_EQ(layout.dim(), by_layer.model.size());
  ASSERT_GT(layout.tensors().size(), 2u);
  auto codec = codecs::MakeCodec("fp32").value();
  auto wire_bytes = [&](std::span<const uint64_t> cuts) {
    std::vector<float> zero(layout.dim(), 0.0f);
    std::vector<codecs::Frame> frames;
    codecs::EncodeOptions eo;
    eo.max_frame_bytes = o.plan.max_chunk_bytes;
    eo.cuts = cuts;
    EXPECT_TRUE(codec->Encode(zero, eo, &frames).ok());
    uint64_t bytes = 0;
    for (const auto& f : frames) bytes += f.bytes.size();
    return std::make_pair(bytes, frames.size());
  };
  const std::vector<uint64_t> cuts = layout.TensorCuts();
  const auto [index_bytes, index_frames] = wire_bytes({});
  const auto [layer_bytes, layer_frames] = wire_bytes(cuts);
  EXPECT_GT(layer_frames, index_frames);
  ASSERT_EQ(by_layer.reports.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(by_index.reports[i].uplink_bytes, 2 * index_bytes) << "round " << i + 1;
    EXPECT_EQ(by_layer.reports[i].uplink_bytes, 2 * layer_bytes) << "round " << i + 1;
    EXPECT_EQ(by_layer.reports[i].raw_uplink_bytes, by_index.reports[i].raw_uplink_bytes);
  }
  EXPECT_EQ(by_layer.coordinator_uplink, by_layer.clients_uplink);
  const auto [worst, share] = Compare(by_layer.model, by_index.model);
  EXPECT_LT(worst, 1e-6);
  EXPECT_LT(share, 1e-3);
}

// rand-k from the round's seed: every client keeps the same set, frames carry only values,
// and the streaming aggregator sums the codes and decodes once. Its model equals, to float
// rounding, the one of decoding each update and averaging (--aggregator mean).
TEST(Federation, SharedSeedRandkSumsCodesLikeDecodingEachUpdate) {
  Job o = ShortJob(3, "randk(ratio=0.05,scale=0,seed=round)", 16 * 1024);
  o.aggregator = "streaming";
  const RunResult summed = RunFederation("randk_summed", 2, o);
  o.aggregator = "mean";
  const RunResult decoded = RunFederation("randk_decoded", 2, o);
  const codecs::ModelLayout layout = core::ModelLayoutOf(o.model).value();
  // Every round's frames: k fp32 values and a header each, no indices. The frame count
  // does not depend on the round's seed; the spec's length does, by the seed's digits.
  auto codec = codecs::MakeCodec(codecs::WithRoundSeed(o.plan.codec, 1), &layout).value();
  std::vector<codecs::Frame> frames;
  codecs::EncodeOptions eo;
  eo.max_frame_bytes = o.plan.max_chunk_bytes;
  ASSERT_TRUE(codec->Encode(std::vector<float>(layout.dim(), 1.0f), eo, &frames).ok());
  ASSERT_GT(frames.size(), 1u);
  const uint64_t k = codecs::KeptForRatio(0.05, layout.dim());
  const uint64_t one_digit_header = codecs::FrameOverhead(codec->spec().size());
  for (const RunResult* r : {&summed, &decoded}) {
    ASSERT_EQ(r->reports.size(), 3u);
    for (const auto& rep : r->reports) {
      EXPECT_EQ(rep.participants, 2);
      ASSERT_EQ(rep.uplink_bytes % 2, 0u);
      const uint64_t headers = rep.uplink_bytes / 2 - 4 * k;
      EXPECT_EQ(headers % frames.size(), 0u) << "round " << rep.round;
      const uint64_t digits = headers / frames.size() - one_digit_header + 1;
      EXPECT_GE(digits, 1u) << "round " << rep.round;
      EXPECT_LE(digits, 16u) << "round " << rep.round;
      // Only the streaming aggregator sums codes: k floats per update, not the dimension.
      if (r == &summed) {
        EXPECT_EQ(
            rep.figures.count("summed_code_floats") ? rep.figures.at("summed_code_floats") : -1.0,
            static_cast<double>(k));
      } else {
        EXPECT_EQ(rep.figures.count("summed_code_floats"), 0u);
      }
    }
    EXPECT_EQ(r->coordinator_uplink, r->clients_uplink);
  }
  const auto [worst, share] = Compare(summed.model, decoded.model);
  EXPECT_LT(worst, 1e-5);
  EXPECT_GT(summed.reports.back().accuracy, summed.reports.front().accuracy - 0.05);
}

TEST(Federation, AClientKilledMidUploadRestartsAndItsUpdateCountsOnce) {
  const int n = 2;
  Job job;
  job.rounds = 2;
  job.plan.codec = "fp32";
  job.plan.local_steps = 20;
  job.plan.max_chunk_bytes = 32 * 1024;  // 20 chunks per update
  const RunResult clean = RunFederation("client_kill_clean", n, job);

  const std::string dir = FreshDir("client_kill");
  const std::string certs = MakeCerts(dir, n);
  InProcessCoordinator coord(JobOptions(dir, certs, n, job));
  // Client 0 sits behind a 4 Mbit/s link, so its upload takes more than a second.
  auto proxy = sim::FaultProxy::Start("127.0.0.1", coord.port(),
                                      sim::LinkSpec::Parse("rate=4mbit").value(), 0);
  ASSERT_TRUE(proxy.ok());
  auto victim = SpawnEdge(dir, certs, 0, n, (*proxy)->port());
  auto other = SpawnEdge(dir, certs, 1, n, coord.port());
  // SIGKILL client 0 once the first chunks of its round-1 update have arrived.
  ASSERT_TRUE(WaitFor([&] { return UplinkBytesOf(coord.get(), "client-0") > 0; }, seconds(60)))
      << "client 0 never uploaded";
  victim->Kill(SIGKILL);
  EXPECT_EQ(victim->Wait(seconds(10)), 128 + SIGKILL);
  const double before = UplinkBytesOf(coord.get(), "client-0");
  EXPECT_LT(before, 4.0 * 160000) << "the whole update arrived before the kill";
  // The same client restarts from its state file and resends only what is missing.
  auto restarted = SpawnEdge(dir, certs, 0, n, (*proxy)->port());
  ASSERT_TRUE(coord.Wait(seconds(120)));
  EXPECT_EQ(restarted->Wait(seconds(30)), 0);
  EXPECT_EQ(other->Wait(seconds(30)), 0);
  const auto reports = coord.get().reports();
  ASSERT_EQ(reports.size(), 2u);
  const size_t dim = clean.model.size();
  for (const auto& rep : reports) {
    EXPECT_EQ(rep.participants, n);
    EXPECT_EQ(rep.stragglers, 0);
    EXPECT_EQ(rep.raw_uplink_bytes, uint64_t{4} * dim * n);  // every coordinate once
  }
  // Same seeds and data: the run ends on the clean run's model (up to the order in which
  // chunks were added).
  const auto [worst, share] = Compare(coord.get().engine().ModelVector(), clean.model);
  EXPECT_LT(worst, 1e-6);
  EXPECT_LT(share, 1e-3);
}

// Many clients in one process (edge_client/client_host.h) train as clients of their own
// would: the same shards, seeds and codec, so the run ends on the run of one client per
// thread (up to the order in which the coordinator adds the updates). One copy of the
// data, two models for six clients, and each client uploads as itself.
TEST(Federation, HostedClientsTrainAsClientsOfTheirOwnWould) {
  const int n = 6;
  const Job job = ShortJob(3, "qsgd(bits=8)", 64 * 1024);
  const RunResult alone = RunFederation("host_alone", n, job);

  const std::string dir = FreshDir("host_shared");
  const std::string certs = MakeCerts(dir, n);
  InProcessCoordinator coord(JobOptions(dir, certs, n, job));
  std::vector<edge_client::EdgeClientOptions> options;
  for (int i = 0; i < n; ++i) options.push_back(ClientDefaults(dir, certs, i, n, coord.port()));
  edge_client::ClientHostOptions ho;
  ho.train_slots = 2;
  auto host = edge_client::ClientHost::Create(options, ho, &modes::MakeClientMode);
  ASSERT_TRUE(host.ok()) << host.status();
  absl::Status hosted;
  std::thread runner([&] { hosted = (*host)->Run(); });
  EXPECT_TRUE(coord.Wait(seconds(120))) << "federation did not finish";
  runner.join();
  EXPECT_TRUE(hosted.ok()) << hosted;

  const auto reports = coord.get().reports();
  ASSERT_EQ(reports.size(), 3u);
  const std::vector<float> model = coord.get().engine().ModelVector();
  for (const auto& rep : reports) {
    EXPECT_EQ(rep.participants, n);
    EXPECT_EQ(rep.stragglers, 0);
    EXPECT_EQ(rep.raw_uplink_bytes, uint64_t{4} * model.size() * n);  // every coordinate once
  }
  const auto [worst, share] = Compare(model, alone.model);
  EXPECT_LT(worst, 1e-6);
  EXPECT_EQ((*host)->shared().data->size(), 1u);
  EXPECT_LE((*host)->shared().models->models_made(), 2u);
  // Each client uploaded as itself, and the host's one registry counts what they sent.
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const double bytes = UplinkBytesOf(coord.get(), StrCat("client-", i));
    EXPECT_GT(bytes, 0) << i;
    sum += bytes;
  }
  double counted = 0;
  for (const auto& fam : (*host)->shared().metrics->registry()->Collect()) {
    if (fam.name != "fedlgc_uplink_wire_bytes_total") continue;
    for (const auto& m : fam.metric) counted += m.counter.value;
  }
  EXPECT_EQ(counted, sum);
  EXPECT_EQ(sum,
            SumMetric(ScrapeMetrics(coord.get().metrics_port()), "fedlgc_uplink_wire_bytes_total"));
}

// fedlgc-edge --clients 0-3 as a process, killed with SIGKILL while its clients upload
// round 1 through a slow link, and started again with the same command line: every client
// resumes from its own state file, each round counts every coordinate of every update
// exactly once, and the run ends where the clients-of-their-own run does.
TEST(Federation, AHostKilledMidUploadRestartsAndEveryUpdateCountsOnce) {
  const int n = 4;
  Job job = ShortJob(2, "fp32", 32 * 1024);
  const RunResult alone = RunFederation("host_kill_alone", n, job);

  const std::string dir = FreshDir("host_kill");
  const std::string certs = MakeCerts(dir, n);
  InProcessCoordinator coord(JobOptions(dir, certs, n, job));
  // Four clients behind one 8 Mbit/s link: their uploads take more than a second.
  auto proxy = sim::FaultProxy::Start("127.0.0.1", coord.port(),
                                      sim::LinkSpec::Parse("rate=8mbit").value(), 0);
  ASSERT_TRUE(proxy.ok());
  const auto c = ClientDefaults(dir, certs, 0, n, (*proxy)->port());
  const std::vector<std::string> argv = {BinPath("fedlgc-edge"),
                                         "--client-ids=0-" + std::to_string(n - 1),
                                         "--server=" + c.server,
                                         "--id=client-{i}",
                                         "--state-dir=" + c.state_dir,
                                         "--tls-ca=" + c.tls_ca,
                                         "--tls-cert=" + certs + "/client-{i}.pem",
                                         "--tls-key=" + certs + "/client-{i}.key",
                                         "--data=" + c.data,
                                         "--num-shards=" + std::to_string(n),
                                         "--train-slots=2",
                                         "--backoff-max=0.5"};
  auto host = std::make_unique<ChildProcess>(argv, dir + "/host.log");
  ASSERT_TRUE(WaitFor(
      [&] {
        double bytes = 0;
        for (int i = 0; i < n; ++i) bytes += UplinkBytesOf(coord.get(), StrCat("client-", i));
        return bytes > 0;
      },
      seconds(60)))
      << "no hosted client uploaded; the host's log:\n"
      << ReadText(dir + "/host.log");
  host->Kill(SIGKILL);
  EXPECT_EQ(host->Wait(seconds(10)), 128 + SIGKILL);
  EXPECT_TRUE(coord.get().reports().empty()) << "round 1 was over before the kill";
  host = std::make_unique<ChildProcess>(argv, dir + "/host-2.log");
  ASSERT_TRUE(coord.Wait(seconds(120))) << ReadText(dir + "/host-2.log");
  EXPECT_EQ(host->Wait(seconds(30)), 0) << ReadText(dir + "/host-2.log");
  const auto reports = coord.get().reports();
  ASSERT_EQ(reports.size(), 2u);
  const std::vector<float> model = coord.get().engine().ModelVector();
  for (const auto& rep : reports) {
    EXPECT_EQ(rep.participants, n);
    EXPECT_EQ(rep.stragglers, 0);
    EXPECT_EQ(rep.raw_uplink_bytes, uint64_t{4} * model.size() * n);
  }
  const auto [worst, share] = Compare(model, alone.model);
  EXPECT_LT(worst, 1e-6);
}

// Runs `job` with two client processes; with `kill`, client 0 is SIGKILLed once round 1
// is committed and restarted from its state file. Returns the final model.
std::vector<float> RunWithClientKilledAfterRound1(const Job& job, const std::string& name,
                                                  bool kill) {
  const int n = 2;
  const std::string dir = FreshDir(name);
  const std::string certs = MakeCerts(dir, n);
  const auto o = JobOptions(dir, certs, n, job);
  InProcessCoordinator coord(o, job.modes);
  auto victim = SpawnEdge(dir, certs, 0, n, coord.port());
  auto other = SpawnEdge(dir, certs, 1, n, coord.port());
  if (kill) {
    EXPECT_TRUE(WaitForFirstCommit(o.state_dir)) << "round 1 never committed";
    victim->Kill(SIGKILL);
    EXPECT_EQ(victim->Wait(seconds(10)), 128 + SIGKILL);
    victim = SpawnEdge(dir, certs, 0, n, coord.port());
  }
  EXPECT_TRUE(coord.Wait(seconds(120)));
  EXPECT_EQ(victim->Wait(seconds(30)), 0);
  EXPECT_EQ(other->Wait(seconds(30)), 0);
  const auto reports = coord.get().reports();
  EXPECT_EQ(reports.size(), job.rounds);
  for (const auto& rep : reports) {
    EXPECT_EQ(rep.participants, n);
    EXPECT_EQ(rep.stragglers, 0);
  }
  return coord.get().engine().ModelVector();
}

// Both runs use client processes, so they train exactly alike, and two updates per round
// add up in either order to the same floats: the killed run must end bit for bit on the
// clean one.
void ExpectAKilledClientKeepsItsCodecState(const Job& job, const std::string& name) {
  const std::vector<float> clean = RunWithClientKilledAfterRound1(job, name + "_clean", false);
  const std::vector<float> killed = RunWithClientKilledAfterRound1(job, name + "_kill", true);
  ASSERT_EQ(killed.size(), clean.size());
  const auto [worst, share] = Compare(killed, clean);
  EXPECT_EQ(worst, 0.0);
  EXPECT_EQ(share, 0.0);
}

// DGC keeps a momentum and a warm-up position besides its residual: a client killed with
// SIGKILL after round 1 restarts from its state file with both, and the run ends on the
// clean run's model (a client that lost its momentum would send other coordinates).
TEST(Federation, ADgcClientKilledAfterARoundKeepsItsMomentum) {
  Job job;
  job.rounds = 4;
  job.plan.codec = "dgc(ratio=0.01,momentum=0.9,warmup=2)";
  job.plan.local_steps = 20;
  ExpectAKilledClientKeepsItsCodecState(job, "dgc");
}

// PowerSGD's warm-start Q is sender state too (and its codec is built from the model's
// layout at both ends): a client that lost it would draw a new Q and send other factors.
TEST(Federation, APowerSgdClientKilledAfterARoundKeepsItsWarmStart) {
  Job job;
  job.rounds = 4;
  job.plan.codec = "powersgd(rank=2)";
  job.plan.local_steps = 5;
  ExpectAKilledClientKeepsItsCodecState(job, "powersgd");
}

// Two-phase PowerSGD: each round every client sends P against the round's query, the
// coordinator pushes P^ once both are in, and every client sends Q and its dense tensors
// as an update that replaces its P: the uplink is exactly those two payloads per client
// and round, the query is last round's mean Q from round 2 on, and the federation learns.
TEST(Federation, TwoPhasePowerSgdSendsPThenQAndLearns) {
  const Job job = ShortJob(3, "powersgd(rank=2,phases=2)", 64 * 1024);
  const RunResult r = RunFederation("powersgd_two_phase", 2, job);
  const codecs::ModelLayout layout = core::ModelLayoutOf(job.model).value();
  const auto t = codecs::PowerSgdTwoPhase::Create(job.plan.codec, layout).value();
  const uint64_t per_client = t.FrameBytes(codecs::kPowerSgdProjectionSpec, t.projection_floats()) +
                              t.FrameBytes(codecs::kPowerSgdMessageSpec, t.message_floats());
  ASSERT_EQ(r.reports.size(), 3u);
  for (size_t i = 0; i < r.reports.size(); ++i) {
    const RoundReport& rep = r.reports[i];
    EXPECT_EQ(rep.participants, 2);
    EXPECT_EQ(rep.stragglers, 0);
    EXPECT_FALSE(rep.hit_deadline);
    EXPECT_EQ(rep.figures.at("powersgd_p_in"), 2.0) << "round " << i + 1;
    EXPECT_EQ(rep.figures.at("powersgd_warm"), i == 0 ? 0.0 : 1.0) << "round " << i + 1;
    EXPECT_EQ(rep.uplink_bytes, 2 * per_client) << "round " << i + 1;
    // Raw: the dense update each client's payloads stand for (4 bytes a coordinate, twice).
    EXPECT_GT(static_cast<double>(rep.raw_uplink_bytes) / rep.uplink_bytes, 40.0);
  }
  EXPECT_EQ(r.coordinator_uplink, r.clients_uplink);
  EXPECT_GT(r.reports.back().accuracy, 0.6);
}

// TernGrad's scaler sharing: in every round the participants report the scale each would
// use, the coordinator sets the round's (the largest, within the clip multiplier x their
// lower median) and sends it, every chunk carries it (the coordinator refuses others), and
// the clients' ternary codes add up: the streaming aggregator sums them and decodes once.
// The mean aggregator, which decodes each update, ends on the same model.
TEST(Federation, TernGradClientsAgreeOnEachRoundsScaleAndTheirCodesAddUp) {
  std::vector<std::vector<float>> models;
  for (const char* aggregator : {"streaming", "mean"}) {
    Job job = ShortJob(3, "terngrad(bucket=512,shared=1)", 64 * 1024);
    job.aggregator = aggregator;
    const RunResult r = RunFederation(StrCat("terngrad_shared_", aggregator), 3, job);
    ASSERT_EQ(r.reports.size(), 3u);
    for (size_t i = 0; i < r.reports.size(); ++i) {
      const RoundReport& rep = r.reports[i];
      EXPECT_EQ(rep.participants, 3) << aggregator << " round " << i + 1;
      EXPECT_FALSE(rep.hit_deadline);
      EXPECT_EQ(rep.Figure("terngrad_reports"), 3.0);
      std::vector<double> local;
      for (const auto& [client, s] : rep.per_client.at("terngrad_local_scale")) local.push_back(s);
      ASSERT_EQ(local.size(), 3u);
      std::sort(local.begin(), local.end());
      const double want = std::min(local.back(), 2 * local[1]);  // lower median of 3: the 2nd
      EXPECT_FLOAT_EQ(rep.Figure("terngrad_scale"), static_cast<float>(want));
      if (std::string(aggregator) == "streaming") {
        EXPECT_EQ(rep.Figure("summed_code_floats"), static_cast<double>(r.model.size()));
      }
      // 2 bits a coordinate and a float per 512: about 15.5x under fp32.
      EXPECT_GT(static_cast<double>(rep.raw_uplink_bytes) / rep.uplink_bytes, 14.0);
    }
    EXPECT_EQ(r.coordinator_uplink, r.clients_uplink);
    EXPECT_GT(r.reports.back().accuracy, 0.6);
    models.push_back(r.model);
  }
  double worst = 0;
  for (size_t i = 0; i < models[0].size(); ++i) {
    worst = std::max(worst, std::fabs(double(models[0][i]) - models[1][i]));
  }
  EXPECT_LT(worst, 1e-5);
}

// Two-phase PowerSGD's messages add up under the round's shared P^: the streaming
// aggregator sums them and rebuilds once (message floats, not the dimension), and ends on
// the model of the mean aggregator, which rebuilds each client's update.
TEST(Federation, TwoPhasePowerSgdSumsMessagesLikeRebuildingEachUpdate) {
  Job job = ShortJob(3, "powersgd(rank=2,phases=2)", 64 * 1024);
  job.aggregator = "streaming";
  const RunResult summed = RunFederation("powersgd_two_phase_summed", 2, job);
  job.aggregator = "mean";
  const RunResult rebuilt = RunFederation("powersgd_two_phase_rebuilt", 2, job);
  const codecs::ModelLayout layout = core::ModelLayoutOf(job.model).value();
  const auto t = codecs::PowerSgdTwoPhase::Create(job.plan.codec, layout).value();
  ASSERT_EQ(summed.reports.size(), 3u);
  ASSERT_EQ(rebuilt.reports.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(summed.reports[i].figures.at("summed_code_floats"),
              static_cast<double>(t.message_floats()));
    EXPECT_EQ(rebuilt.reports[i].figures.count("summed_code_floats"), 0u);
    EXPECT_EQ(summed.reports[i].uplink_bytes, rebuilt.reports[i].uplink_bytes);
  }
  const auto [worst, share] = Compare(summed.model, rebuilt.model);
  EXPECT_LT(worst, 1e-5);
}

// A two-phase PowerSGD client killed after round 1 restarts with its residual (and, for a
// P in flight, the M it stands for, kept in the residual until Q goes out): the run ends on
// the clean run's model.
TEST(Federation, ATwoPhasePowerSgdClientKilledAfterARoundKeepsItsResidual) {
  Job job;
  job.rounds = 4;
  job.plan.codec = "powersgd(rank=2,phases=2)";
  job.plan.local_steps = 5;
  ExpectAKilledClientKeepsItsCodecState(job, "powersgd_two_phase");
}

// GradiVeQ: round 1 goes fp32 and the coordinator fits the bases to its step; rounds 2
// and 3 send PCA codes against them (the clients download the basis once), summed at
// the coordinator (the streaming aggregator) and decoded once; round 4 refits from fp32
// again (refit=3).
TEST(Federation, GradiveqFitsBasesFromAnFp32RoundThenSendsSummedCodes) {
  Job job;
  job.rounds = 4;
  job.plan.codec = "gradiveq(dims=4,slice=64,refit=3)";
  job.plan.local_steps = 20;
  job.aggregator = "streaming";
  job.plan.max_chunk_bytes = 64 * 1024;
  const RunResult r = RunFederation("gradiveq", 2, job);
  ASSERT_EQ(r.reports.size(), 4u);
  const std::vector<double> basis = {1, 1, 1, 4};  // in force after each round
  for (size_t i = 0; i < r.reports.size(); ++i) {
    const RoundReport& rep = r.reports[i];
    EXPECT_EQ(rep.participants, 2);
    EXPECT_EQ(rep.stragglers, 0);
    EXPECT_EQ(rep.figures.at("gradiveq_basis"), basis[i]) << "round " << i + 1;
    const double ratio = static_cast<double>(rep.raw_uplink_bytes) / rep.uplink_bytes;
    if (i == 0 || i == 3) {
      EXPECT_NEAR(ratio, 1.0, 0.01) << "round " << i + 1;  // fp32 fit rounds
      EXPECT_GT(rep.figures.at("gradiveq_kept"), 0.0);
    } else {
      // fc1 (784 x 200) in 2,450 slices of 64 coded to 4 values each; fc2 and biases fp32.
      EXPECT_GT(ratio, 12.0) << "round " << i + 1;
    }
  }
  EXPECT_GT(r.reports.back().accuracy, 0.7);
  EXPECT_EQ(r.coordinator_uplink, r.clients_uplink);
  EXPECT_EQ(r.coordinator_raw, r.clients_raw);
}

// A GradiVeQ client killed after round 1 restarts with its residual and, for an update in
// flight, the basis it was coded against (saved with its state): the run ends on the clean
// run's model.
TEST(Federation, AGradiveqClientKilledAfterARoundKeepsItsBasisAndResidual) {
  Job job;
  job.rounds = 4;
  job.plan.codec = "gradiveq(dims=4,slice=64,refit=2)";
  job.plan.local_steps = 5;
  ExpectAKilledClientKeepsItsCodecState(job, "gradiveq_kill");
}

// A coordinator of `modes` (given to the process as `flags`) killed with SIGKILL once round
// 1 is committed, while round 2 runs, and restarted: it ends where the same job without the
// crash ends, with every round committed once.
void ExpectACoordinatorKilledMidRoundToLoseNothing(const std::string& name,
                                                   const std::vector<std::string>& flags,
                                                   const modes::ModeOptions& modes) {
  const int n = 3;
  const std::string dir = FreshDir(name);
  const std::string certs = MakeCerts(dir, n);
  auto o = CoordinatorDefaults(dir, certs);
  o.rounds = 4;
  o.plan.local_steps = 150;
  o.min_clients = 3;
  const int port = FreePort();
  std::vector<std::string> argv = CoordinatorArgv(o, port);
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto first = std::make_unique<ChildProcess>(argv, dir + "/coordinator.log");
  // The clients are processes too: gRPC clients in this process stall on connections to a
  // server this process forked (seen with gRPC 1.51), and real clients are processes.
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < n; ++i) clients.push_back(SpawnEdge(dir, certs, i, n, port));
  // Kill it as soon as round 1 is committed, while round 2 runs.
  ASSERT_TRUE(WaitForFirstCommit(o.state_dir)) << "round 1 never committed";
  first->Kill(SIGKILL);
  EXPECT_EQ(first->Wait(seconds(10)), 128 + SIGKILL);
  const coordinator::EngineState committed = CheckpointState(o.state_dir, o);
  ASSERT_FALSE(committed.model.empty());
  EXPECT_NE(committed.job_instance, 0u) << "a job started afresh draws its instance";
  ChildProcess second(argv, dir + "/coordinator.log");
  EXPECT_EQ(second.Wait(seconds(120)), 0) << "restarted coordinator did not finish";
  for (auto& c : clients) EXPECT_EQ(c->Wait(seconds(30)), 0) << "a client did not finish cleanly";
  const auto resumed = CheckpointModel(o.state_dir, o);
  // The restart is the same instance of the job: its clients keep their state.
  EXPECT_EQ(CheckpointState(o.state_dir, o).job_instance, committed.job_instance);
  // The same job without the crash.
  const std::string dir2 = FreshDir(name + "_clean");
  auto o2 = CoordinatorDefaults(dir2, certs);
  o2.rounds = o.rounds;
  o2.plan = o.plan;
  {
    InProcessCoordinator coord(o2, modes);
    std::vector<std::unique_ptr<ClientThread>> cs;
    for (int i = 0; i < n; ++i)
      cs.push_back(std::make_unique<ClientThread>(ClientDefaults(dir2, certs, i, n, coord.port())));
    ASSERT_TRUE(coord.Wait(seconds(120)));
  }
  const auto clean = CheckpointModel(o2.state_dir, o2);
  EXPECT_NE(CheckpointState(o2.state_dir, o2).job_instance, committed.job_instance)
      << "another run of the job is another instance";
  const auto [worst, share] = Compare(resumed, clean);
  EXPECT_LT(worst, 1e-6);
  EXPECT_LT(share, 1e-3);
  // Round numbering went on from the checkpoint: four committed rounds in all.
  auto log = ReadRoundLog(o.state_dir + "/rounds.jsonl");
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_EQ(log->size(), 4u);
  for (size_t i = 0; i < log->size(); ++i) EXPECT_EQ((*log)[i].round, i + 1);
}

TEST(Federation, CoordinatorKilledMidRoundResumesWithNothingCommittedLost) {
  ExpectACoordinatorKilledMidRoundToLoseNothing("restart", {}, modes::ModeOptions());
}

// SCAFFOLD's server control variate is saved beside each checkpoint: the restarted
// coordinator serves the c of round 1's commit, the clients resend round 2's two-part
// updates trained against it, and the run ends on the clean run's model.
TEST(Federation, AScaffoldCoordinatorKilledMidRoundResumesWithItsControlVariate) {
  modes::ModeOptions m;
  m.fedavg.algorithm = "scaffold";
  ExpectACoordinatorKilledMidRoundToLoseNothing("restart_scaffold", {"--algorithm=scaffold"}, m);
}

// A SCAFFOLD client keeps its control variate c_i and the residual of its changes in its
// state file: killed after round 1 and restarted, its next corrections and changes are the
// clean run's, and so is the final model, to the bit (top-k leaves residuals in both parts).
TEST(Federation, AScaffoldClientKilledAfterARoundKeepsItsControlVariate) {
  Job job;
  job.rounds = 4;
  job.plan.codec = "topk(ratio=0.05)";
  job.plan.local_steps = 20;
  job.modes.fedavg.algorithm = "scaffold";
  ExpectAKilledClientKeepsItsCodecState(job, "scaffold_kill");
}

// FedProx's term anchors each round at the weights it starts from: a client killed after
// round 1 and restarted trains its later rounds as the clean run's does.
TEST(Federation, AFedProxClientKilledAfterARoundTrainsAsBefore) {
  Job job;
  job.rounds = 4;
  job.plan.codec = "topk(ratio=0.05)";
  job.plan.local_steps = 20;
  job.modes.fedavg.algorithm = "fedprox(mu=0.5)";
  ExpectAKilledClientKeepsItsCodecState(job, "fedprox_kill");
}

// Buffered rounds across a coordinator SIGKILL: with k = 1, no staleness weighting, no
// clipping and no guard, each commit adds one client's update to the model as it is. So
// what the model moved by, plus what the clients still hold uncounted at the end (their
// residuals and pending updates), must be every update they trained (--dump-updates),
// to float rounding: an update lost in the crash would be missing from the sum, one
// counted twice would be in it twice.
TEST(Federation, BufferedCommitsAcrossACoordinatorKillLoseAndDoubleCountNothing) {
  const int n = 3;
  const std::string dir = FreshDir("buffered_kill");
  const std::string certs = MakeCerts(dir, n);
  auto o = CoordinatorDefaults(dir, certs);
  o.rounds = 8;
  o.plan.local_steps = 60;
  o.min_clients = n;
  const int port = FreePort();
  std::vector<std::string> argv = CoordinatorArgv(o, port);
  for (const char* flag : {"--rounds-mode=buffered(k=1,concurrency=3,staleness=none)",
                           "--clip-multiplier=0", "--guard=false"}) {
    argv.push_back(flag);
  }
  auto first = std::make_unique<ChildProcess>(argv, dir + "/coordinator.log");
  const std::string dumps = dir + "/dumps";
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < n; ++i) {
    clients.push_back(SpawnEdge(dir, certs, i, n, port, {"--dump-updates=" + dumps}));
  }
  ASSERT_TRUE(WaitForFirstCommit(o.state_dir)) << ReadText(dir + "/coordinator.log");
  first->Kill(SIGKILL);
  EXPECT_EQ(first->Wait(seconds(10)), 128 + SIGKILL);
  ChildProcess second(argv, dir + "/coordinator.log");
  EXPECT_EQ(second.Wait(seconds(120)), 0) << ReadText(dir + "/coordinator.log");
  for (int i = 0; i < n; ++i) {
    // Its log says why (an abort's message is its last line).
    EXPECT_EQ(clients[i]->Wait(seconds(30)), 0)
        << "client " << i << " did not finish cleanly:\n"
        << ReadText(dir + "/" + ClientDefaults(dir, certs, i, n, port).client_id + ".log");
  }
  auto log = ReadRoundLog(o.state_dir + "/rounds.jsonl");
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_EQ(log->size(), 8u);
  for (size_t i = 0; i < log->size(); ++i) {
    EXPECT_EQ((*log)[i].round, i + 1);
    EXPECT_LE((*log)[i].participants, 1);
  }

  const std::vector<float> final_model = CheckpointModel(o.state_dir, o);
  const std::vector<float> initial = core::Model::Create(o.model, o.init_seed).value()->GetFlat();
  ASSERT_EQ(final_model.size(), initial.size());
  std::vector<double> trained(initial.size(), 0.0), held(initial.size(), 0.0);
  int dumped = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dumps)) {
    if (!entry.is_regular_file()) continue;
    const auto v = core::FloatsFromBytes(ReadText(entry.path().string()), "update").value();
    ASSERT_EQ(v.size(), trained.size()) << entry.path();
    for (size_t i = 0; i < v.size(); ++i) trained[i] += v[i];
    ++dumped;
  }
  auto fp32 = codecs::MakeCodec("fp32").value();
  int pending = 0;
  for (int i = 0; i < n; ++i) {
    auto state = edge_client::LoadClientState(StrCat(dir, "/clients/client-", i, ".state"));
    ASSERT_TRUE(state.ok()) << state.status();
    for (size_t j = 0; j < state->residual.size(); ++j) held[j] += state->residual[j];
    if (!state->pending) continue;
    ++pending;
    for (const std::string& frame : state->pending->frames) {
      const auto view = codecs::ParseFrame(frame, codecs::FrameLimits{}).value();
      std::vector<float> values(view.length);
      ASSERT_TRUE(fp32->Decode(view, values).ok());
      for (size_t j = 0; j < values.size(); ++j) held[view.begin + j] += values[j];
    }
  }
  // Eight commits of one update each, and the updates still in flight, all trained.
  EXPECT_GE(dumped, 8);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < trained.size(); ++i) {
    const double moved = double(final_model[i]) - initial[i];
    worst = std::max(worst, std::fabs(moved + held[i] - trained[i]));
    scale = std::max(scale, std::fabs(trained[i]));
  }
  EXPECT_LT(worst, 1e-5 + 1e-5 * scale)
      << dumped << " updates trained, " << pending << " pending at the end";
  EXPECT_GT(scale, 1e-3);  // the updates are not nothing
}

// The codec ladder on a real link: client 0's uplink drops from unlimited to 25 kB/s as
// round 3 opens. Round 1 asks both clients with the cheapest rung (nothing measured),
// round 2 with fp32 (their downloads measured fast links). Round 3 asked client 0 with fp32
// before the drop: its 637 kB go up in 25.5 s, inside the 30 s deadline (4.5 s left for
// its download and 20 steps on a loaded machine) but past the 80% of it that the ladder
// plans for, so round 4 asks it with 8-bit QSGD (159 kB, 6.4 s).
// Client 1 stays on fp32.
TEST(Federation, AClientWhoseUplinkDropsMovesDownTheLadderInItsNextRound) {
  const int n = 2;
  const std::string dir = FreshDir("ladder_drop");
  const std::string certs = MakeCerts(dir, n);
  auto o = CoordinatorDefaults(dir, certs);
  o.model = "mlp";
  o.rounds = 4;
  o.min_clients = n;
  o.round_timeout_s = 30;
  o.codec_ladder = {"fp32", "qsgd(bits=8)", "qsgd(bits=4)", "topk(ratio=0.01,values=qsgd(bits=8))"};
  o.plan.codec = o.codec_ladder.front();
  o.plan.local_steps = 20;
  o.plan.max_chunk_bytes = 32 * 1024;
  InProcessCoordinator coord(o);
  auto proxy = sim::FaultProxy::Start("127.0.0.1", coord.port(), sim::LinkSpec{}, 0);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  ClientThread slow(ClientDefaults(dir, certs, 0, n, (*proxy)->port()));
  ClientThread fast(ClientDefaults(dir, certs, 1, n, coord.port()));
  ASSERT_TRUE(WaitFor([&] { return coord.get().engine().current_round() >= 3; }, seconds(60)));
  (*proxy)->SetRates(25'000, 0);
  ASSERT_TRUE(coord.Wait(seconds(90))) << "the federation did not finish";
  ASSERT_TRUE(coord.result().ok()) << coord.result();
  EXPECT_TRUE(slow.Wait(seconds(30)));
  EXPECT_TRUE(fast.Wait(seconds(30)));
  const std::vector<RoundReport> reports = coord.get().reports();
  ASSERT_EQ(reports.size(), 4u);
  const auto rung = [&](int round, const std::string& client) {
    const auto& rungs = reports[round - 1].per_client;
    auto it = rungs.find("codec_rung");
    if (it == rungs.end() || !it->second.count(client)) return -1.0;
    return it->second.at(client);
  };
  for (const RoundReport& r : reports) {
    EXPECT_EQ(r.Label("codec_ladder"),
              "fp32;qsgd(bits=8);qsgd(bits=4);topk(ratio=0.01,values=qsgd(bits=8))");
  }
  EXPECT_EQ(rung(1, "client-0"), 3);
  EXPECT_EQ(rung(1, "client-1"), 3);
  EXPECT_EQ(rung(2, "client-0"), 0);
  EXPECT_EQ(rung(2, "client-1"), 0);
  EXPECT_EQ(rung(3, "client-0"), 0);
  EXPECT_EQ(rung(3, "client-1"), 0);
  EXPECT_EQ(reports[2].participants, 2);
  EXPECT_EQ(reports[2].stragglers, 0) << "client 0's fp32 upload at 25 kB/s missed the deadline";
  EXPECT_EQ(rung(4, "client-0"), 1);
  EXPECT_EQ(rung(4, "client-1"), 0);
  EXPECT_EQ(reports[3].participants, 2);
  // What round 3 measured of client 0's uplink: the proxy's 25 kB/s, within what HTTP/2
  // framing and the proxy's pacing add or take.
  const double up = reports[2].per_client.at("uplink_bps").at("client-0");
  EXPECT_GT(up, 22'000);
  EXPECT_LT(up, 26'000);
  // Counted updates by codec: three fp32 ones from client 1 and two from client 0 (rounds
  // 2 and 3), round 1's two of the cheapest rung, and client 0's 8-bit QSGD.
  std::map<std::string, double> updates;
  for (const auto& fam : coord.get().metrics().registry()->Collect()) {
    if (fam.name != "fedlgc_updates_total") continue;
    for (const auto& m : fam.metric) updates[m.label.at(0).value] += m.counter.value;
  }
  EXPECT_EQ(updates,
            (std::map<std::string, double>{
                {"fp32", 5}, {"qsgd(bits=8)", 1}, {"topk(ratio=0.01,values=qsgd(bits=8))", 2}}));
}

// A coordinator gone right after the checkpoint of round 2 (FEDLGC_FAILPOINT), before that
// round's line in rounds.jsonl: restarted, it writes the line from the checkpoint
// ("recovered", with the checkpoint's model evaluated), and the job's log holds every round
// once.
// A DP job (--dp, modes/fedavg/dp_rounds.h) of 4 clients asked with probability 0.5 each
// round: every round's line carries what the accountant says the rounds spent, the
// metric the same, and the job ends before the round that would pass --dp-max-epsilon
// (here after round 2 of 6), its clients told it is over.
TEST(Federation, ADpJobEndsBeforeTheRoundThatWouldPassItsPrivacyBudget) {
  const auto after = [](int rounds) {
    privacy::RdpAccountant a;
    a.Compose(0.5, 1.0, static_cast<uint64_t>(rounds));
    return a.Spent(1e-5).epsilon;
  };
  const std::string dir = FreshDir("dp_budget");
  const std::string certs = MakeCerts(dir, 4);
  Job job = ShortJob(6, "qsgd(bits=8)", 64 * 1024);
  auto o = JobOptions(dir, certs, 4, job);
  o.fraction = 0.5;
  modes::ModeOptions modes;
  modes.fedavg.dp = "gaussian(noise=1, clip=0.01)";  // noise of sd 0.005: the guard takes it
  modes.fedavg.dp_max_epsilon = (after(2) + after(3)) / 2;
  InProcessCoordinator coord(o, modes);
  auto lines = RunClientsToTheEnd(coord, dir, certs, 4, o.state_dir);
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 2u);
  for (size_t i = 0; i < lines->size(); ++i) {
    EXPECT_DOUBLE_EQ((*lines)[i].figures.at("dp_epsilon"), after(static_cast<int>(i) + 1)) << i;
    EXPECT_EQ((*lines)[i].figures.at("dp_expected"), 2);
    EXPECT_EQ((*lines)[i].participants, (*lines)[i].figures.at("dp_sampled"));
  }
  EXPECT_NEAR(SumMetric(ScrapeMetrics(coord.get().metrics_port()), "fedlgc_dp_epsilon"), after(2),
              1e-9);
}

// Secure aggregation (--secagg, modes/fedavg/secagg_rounds.h) over real mTLS with 4-bit
// QSGD codes: 3 clients, two behind links that cut their connections once each mid-upload
// (after the model's 636 KB and 55-65 KB of their 119 KB masked codes), end on exactly the
// model the same codes give unmasked (the masks cancel, and integer sums do not depend on
// the order chunks arrive in), after resumed uploads; the masked uplink is within 1.5x
// the plain qsgd(bits=4) run's (6-bit words for the sums of 3 clients' -7..7 codes).
TEST(Federation, SecureAggregationOverLinksThatCutEndsOnTheModelOfItsCodesUnmasked) {
  Job job = ShortJob(2, "qsgd(bits=4)", 16 * 1024);
  const RunResult qsgd = RunFederation("secagg_qsgd4", 3, job);
  job.modes.fedavg.secagg = "secagg(clip=5,masks=0)";
  const RunResult plain = RunFederation("secagg_plain", 3, job);
  job.modes.fedavg.secagg = "secagg(clip=5)";
  const RunResult masked =
      RunFederation("secagg_cut", 3, job, {"cut_after=700k", "", "cut_after=690k"});
  EXPECT_GT(masked.proxy_cuts, 0);
  EXPECT_GT(masked.upload_resumes, 0);
  ASSERT_EQ(masked.reports.size(), 2u);
  for (const auto& rep : masked.reports) {
    EXPECT_EQ(rep.participants, 3);
    EXPECT_EQ(rep.Figure("secagg_width_bits"), 6);
    EXPECT_EQ(rep.Label("secagg_failed"), "");
  }
  ASSERT_EQ(masked.model.size(), plain.model.size());
  EXPECT_EQ(masked.model, plain.model) << "bit for bit";
  for (size_t r = 0; r < 2; ++r) {
    const double ratio = static_cast<double>(masked.reports[r].uplink_bytes) /
                         static_cast<double>(qsgd.reports[r].uplink_bytes);
    EXPECT_LE(ratio, 1.5) << "round " << r + 1;
    EXPECT_GT(ratio, 1.4) << "round " << r + 1;
  }
}

// Secure aggregation with 30% of the clients gone after masking, for real: of 10 edge
// processes, in round 2 two exit once their code is masked and before it is sent, and one
// once it is sent and before it reveals its shares. The round commits the other 8 (the one
// that vanished after sending counts: its seed is rebuilt from the others' shares; the two
// whose input never came are dropped: their keys are rebuilt to take their masks out).
TEST(Federation, SecureAggregationCommitsWithThirtyPercentGoneAfterMasking) {
  const int n = 10;
  const std::string dir = FreshDir("secagg_dropout");
  const std::string certs = MakeCerts(dir, n);
  Job job = ShortJob(2, "qsgd(bits=4)", 64 * 1024);
  auto o = JobOptions(dir, certs, n, job);
  o.round_timeout_s = 60;
  job.modes.fedavg.secagg = "secagg(clip=5)";
  InProcessCoordinator coord(o, job.modes);
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> env;
    if (i < 2) env.push_back("FEDLGC_FAILPOINT=secagg-masked:2");
    if (i == 2) env.push_back("FEDLGC_FAILPOINT=secagg-uploaded:2");
    clients.push_back(SpawnEdge(dir, certs, i, n, coord.port(), {}, env));
  }
  ASSERT_TRUE(coord.Wait(seconds(240))) << "federation did not finish";
  EXPECT_TRUE(coord.result().ok()) << coord.result();
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(clients[i]->Wait(seconds(30)), i < 3 ? 99 : 0) << "client " << i;
  }
  const auto reports = coord.get().reports();
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].participants, n);
  EXPECT_EQ(reports[1].participants, 8);
  EXPECT_EQ(reports[1].Figure("secagg_shared"), 10);
  EXPECT_EQ(reports[1].Figure("secagg_masked"), 8);
  EXPECT_EQ(reports[1].Figure("secagg_dropped"), 2);
  EXPECT_EQ(reports[1].Label("secagg_failed"), "");
  EXPECT_GT(reports[1].accuracy, reports[0].accuracy - 0.05);
}

// Distributed DP (--dp skellam(...) with --secagg) over real mTLS: 4 clients add Skellam
// noise to their 8-bit codes before masking; every line of rounds.jsonl carries the
// epsilon of the rounds so far as the Skellam mechanism of the codes' rounded
// sensitivities (every client asked: sampled and unsampled agree), the words hold the
// noise's 6 standard deviations, and the job ends before the round that would pass
// --dp-max-epsilon (after round 2 of 6).
TEST(Federation, ADistributedDpJobChargesEachUnmaskedSumAndEndsAtItsBudget) {
  const uint64_t dim = core::ModelLayoutOf("mlp").value().dim();
  const double steps = std::sqrt(static_cast<double>(dim)) * 127 / 4;  // C / step
  const auto after = [&](int rounds) {
    privacy::SkellamStep step = privacy::RoundedSensitivity(steps, dim);
    step.variance = steps * steps;
    privacy::RdpAccountant a;
    a.ComposeRdp([&](double order) { return privacy::SampledSkellamRdp(step, 1.0, order); },
                 static_cast<uint64_t>(rounds));
    return a.Spent(1e-5).epsilon;
  };
  const std::string dir = FreshDir("skellam_budget");
  const std::string certs = MakeCerts(dir, 4);
  Job job = ShortJob(6, "qsgd(bits=8)", 64 * 1024);
  auto o = JobOptions(dir, certs, 4, job);
  modes::ModeOptions modes;
  modes.fedavg.secagg = "secagg(clip=0.01)";  // noise of norm about 1: the guard takes it
  modes.fedavg.dp = "skellam(noise=1, clip=0.01)";
  modes.fedavg.dp_max_epsilon = (after(2) + after(3)) / 2;
  InProcessCoordinator coord(o, modes);
  auto lines = RunClientsToTheEnd(coord, dir, certs, 4, o.state_dir);
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 2u);
  for (size_t i = 0; i < lines->size(); ++i) {
    const RoundReport& r = (*lines)[i];
    EXPECT_EQ(r.participants, 4) << i;
    EXPECT_EQ(r.Label("secagg_failed"), "") << i;
    EXPECT_NEAR(r.figures.at("dp_epsilon"), after(static_cast<int>(i) + 1), 1e-9) << i;
    EXPECT_NEAR(r.figures.at("dp_epsilon_coordinator"), after(static_cast<int>(i) + 1), 1e-9);
    // 4 x 127 for the codes, 6 x steps for the noise: 2 x (508 + 75,964) + 1 values.
    EXPECT_EQ(r.figures.at("secagg_width_bits"), 18) << i;
  }
}

TEST(Federation, ARoundCommittedJustBeforeACrashGetsItsLineOnRestart) {
  const int n = 2;
  const std::string dir = FreshDir("recovered_line");
  const std::string certs = MakeCerts(dir, n);
  auto o = CoordinatorDefaults(dir, certs);
  o.rounds = 3;
  o.min_clients = n;
  const int port = FreePort();
  std::vector<std::string> argv = CoordinatorArgv(o, port);
  std::vector<std::string> crashing = argv;
  crashing.insert(crashing.begin(), {"/usr/bin/env", "FEDLGC_FAILPOINT=after-checkpoint:2"});
  ChildProcess first(crashing, dir + "/coordinator.log");
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < n; ++i) clients.push_back(SpawnEdge(dir, certs, i, n, port));
  ASSERT_EQ(first.Wait(seconds(120)), 99) << ReadText(dir + "/coordinator.log");
  auto before = ReadRoundLog(o.state_dir + "/rounds.jsonl");
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_EQ(before->size(), 1u) << "round 2's line was written before the crash";
  ChildProcess second(argv, dir + "/coordinator2.log");
  EXPECT_EQ(second.Wait(seconds(120)), 0) << ReadText(dir + "/coordinator2.log");
  for (auto& c : clients) EXPECT_EQ(c->Wait(seconds(30)), 0);
  auto log = ReadRoundLog(o.state_dir + "/rounds.jsonl");
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_EQ(log->size(), 3u);
  for (size_t i = 0; i < log->size(); ++i) EXPECT_EQ((*log)[i].round, i + 1);
  EXPECT_EQ((*log)[1].Label("recovered"), "1");
  EXPECT_GE((*log)[1].accuracy, 0) << "the checkpoint's model is evaluated";
  EXPECT_EQ((*log)[2].Label("recovered"), "");
  EXPECT_EQ((*log)[2].participants, n);
}

class RawClient {
 public:
  RawClient(int port, const std::string& certs, const std::string& cert_name, bool tls = true) {
    std::shared_ptr<grpc::ChannelCredentials> creds;
    grpc::ChannelArguments args;
    if (tls) {
      grpc::SslCredentialsOptions ssl;
      ssl.pem_root_certs = Read(certs + "/ca.pem");
      if (!cert_name.empty()) {
        ssl.pem_cert_chain = Read(certs + "/" + cert_name + ".pem");
        ssl.pem_private_key = Read(certs + "/" + cert_name + ".key");
      }
      creds = grpc::SslCredentials(ssl);
      args.SetSslTargetNameOverride("localhost");
    } else {
      creds = grpc::InsecureChannelCredentials();
    }
    stub_ = protos::Coordinator::NewStub(
        grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), creds, args));
  }
  static std::string Read(const std::string& path) { return **fedlgc::ReadFileIfExists(path); }
  grpc::Status Join(const std::string& id, uint32_t protocol = kProtocolVersion) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
    protos::JoinRequest req;
    req.set_client_id(id);
    req.set_num_samples(10);
    req.set_protocol_version(protocol);
    protos::JoinReply reply;
    return stub_->Join(&ctx, req, &reply);
  }
  grpc::Status Upload(const std::vector<protos::UpdateChunk>& chunks,
                      protos::UploadReceipt* receipt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
    auto w = stub_->UploadUpdate(&ctx, receipt);
    for (const auto& c : chunks) {
      if (!w->Write(c)) break;
    }
    w->WritesDone();
    return w->Finish();
  }
  protos::Coordinator::Stub& stub() { return *stub_; }

 private:
  std::unique_ptr<protos::Coordinator::Stub> stub_;
};

// Clients given two addresses (--server a,b) fail over: the coordinator is SIGKILLed once
// round 1 is committed and restarted from its state dir at the second address; the clients
// find it there, the job ends with every round committed once, and each client says it
// failed over.
TEST(Federation, ClientsFailOverToACoordinatorRestartedAtAnotherAddress) {
  const int n = 2;
  const std::string dir = FreshDir("failover");
  const std::string certs = MakeCerts(dir, n);
  auto o = CoordinatorDefaults(dir, certs);
  o.rounds = 3;
  o.plan.local_steps = 100;
  o.min_clients = n;
  const int first_port = FreePort();
  int second_port = FreePort();
  while (second_port == first_port) second_port = FreePort();
  const std::string servers = StrCat("--server=127.0.0.1:", first_port, ",127.0.0.1:", second_port);
  auto first =
      std::make_unique<ChildProcess>(CoordinatorArgv(o, first_port), dir + "/coordinator.log");
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < n; ++i) clients.push_back(SpawnEdge(dir, certs, i, n, first_port, {servers}));
  ASSERT_TRUE(WaitForFirstCommit(o.state_dir)) << "round 1 never committed";
  first->Kill(SIGKILL);
  EXPECT_EQ(first->Wait(seconds(10)), 128 + SIGKILL);
  ChildProcess second(CoordinatorArgv(o, second_port), dir + "/coordinator2.log");
  EXPECT_EQ(second.Wait(seconds(120)), 0) << "the restarted coordinator did not finish";
  for (auto& c : clients) EXPECT_EQ(c->Wait(seconds(30)), 0) << "a client did not finish";
  auto log = ReadRoundLog(o.state_dir + "/rounds.jsonl");
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_EQ(log->size(), 3u);
  for (size_t i = 0; i < log->size(); ++i) {
    EXPECT_EQ((*log)[i].round, i + 1);
    EXPECT_EQ((*log)[i].participants, n) << "round " << i + 1;
  }
  for (int i = 0; i < n; ++i) {
    const std::string text = fedlgc::ReadFile(StrCat(dir, "/client-", i, ".log")).value();
    EXPECT_NE(text.find(StrCat("failing over to 127.0.0.1:", second_port)), std::string::npos)
        << text;
  }
}

TEST(Federation, ClientsWithoutOrWithSomeoneElsesCertificateAreRefused) {
  const std::string dir = FreshDir("identity");
  const std::string certs = MakeCerts(dir, 2);
  auto o = CoordinatorDefaults(dir, certs);
  o.min_clients = 5;  // never opens a round
  InProcessCoordinator coord(o);
  EXPECT_TRUE(RawClient(coord.port(), certs, "client-0").Join("client-0").ok());
  // A client of another protocol version (0: a version-1 client, which sent none) is
  // told so, and counted.
  for (uint32_t theirs : {0u, kProtocolVersion + 1}) {
    const grpc::Status old = RawClient(coord.port(), certs, "client-0").Join("client-0", theirs);
    EXPECT_EQ(old.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(old.error_message().find("protocol version"), std::string::npos)
        << old.error_message();
  }
  EXPECT_EQ(SumMetric(ScrapeMetrics(coord.get().metrics_port()),
                      "fedlgc_rejected_total{reason=\"protocol\"}"),
            2);
  // No client certificate: the TLS handshake fails.
  EXPECT_EQ(RawClient(coord.port(), certs, "").Join("client-0").error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // Plaintext against the mTLS port.
  EXPECT_EQ(RawClient(coord.port(), certs, "", false).Join("client-0").error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // client-0's certificate claiming to be client-1.
  const grpc::Status as_other = RawClient(coord.port(), certs, "client-0").Join("client-1");
  EXPECT_EQ(as_other.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(as_other.error_message().find("cannot act as client-1"), std::string::npos);
  protos::UploadReceipt receipt;
  protos::UpdateChunk c;
  c.set_client_id("client-1");
  c.set_round(1);
  EXPECT_EQ(RawClient(coord.port(), certs, "client-0").Upload({c}, &receipt).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // A certificate from another CA.
  const std::string other = MakeCerts(FreshDir("identity_other_ca"), 1);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = RawClient::Read(certs + "/ca.pem");
  ssl.pem_cert_chain = RawClient::Read(other + "/client-0.pem");
  ssl.pem_private_key = RawClient::Read(other + "/client-0.key");
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  auto stub = protos::Coordinator::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(coord.port()), grpc::SslCredentials(ssl), args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
  protos::JoinRequest req;
  req.set_client_id("client-0");
  req.set_num_samples(1);
  protos::JoinReply reply;
  EXPECT_EQ(stub->Join(&ctx, req, &reply).error_code(), grpc::StatusCode::UNAVAILABLE);
}

// Neither --listen nor --server: the coordinator listens where the client dials by
// default (kDefaultAddress), and with the job's defaults (the codec both ways) they finish
// a round. Only what keeps the test small is given: plaintext, one round of few steps,
// few examples. Skips where another process holds the port.
TEST(Federation, ABareCoordinatorAndABareClientMeetAndFinishARound) {
  const std::string address = kDefaultAddress;
  const int port = std::atoi(address.substr(address.rfind(':') + 1).c_str());
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    if (!free) GTEST_SKIP() << address << " is taken by another process";
  }
  const std::string dir = FreshDir("bare");
  ChildProcess coordinator({BinPath("fedlgc-coordinator"), "--insecure", "--rounds=1",
                            "--local-steps=5", "--eval-limit=500", "--linger=0",
                            "--state-dir=" + dir + "/coordinator"},
                           dir + "/coordinator.log");
  ChildProcess edge({BinPath("fedlgc-edge"), "--insecure", "--train-limit=500",
                     "--state-dir=" + dir + "/edge"},
                    dir + "/edge.log");
  ASSERT_EQ(coordinator.Wait(std::chrono::seconds(180)), 0) << ReadText(dir + "/coordinator.log");
  EXPECT_EQ(edge.Wait(std::chrono::seconds(60)), 0) << ReadText(dir + "/edge.log");
  auto log = ReadRoundLog(dir + "/coordinator/rounds.jsonl");
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_EQ(log->size(), 1u);
  EXPECT_EQ(log->front().participants, 1);
  // Compressed both ways by default: fewer bytes than float32 each way.
  EXPECT_LT(log->front().uplink_bytes * 4, log->front().raw_uplink_bytes);
  EXPECT_NE(ReadText(dir + "/coordinator.log").find(StrCat("listening on port ", port)),
            std::string::npos);
}

}  // namespace
}  // namespace fedlgc::testing
