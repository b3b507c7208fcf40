// The compressed downlink over the real protocol (coordinator/downlink.h,
// edge_client/downlink_receiver.h): every client's model is the coordinator's held model to
// the bit over many rounds, a late joiner takes the model whole once and chains after, a
// restarted client goes on with a chain from the model it kept, a client whose model
// drifted is refused by the CRC and recovers with a full download, a download cut by the
// link resumes, and clients of a TorchScript job start from the file's weights as version
// 0 (no full download at all).
#include <signal.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "base/file.h"
#include "codecs/registry.h"
#include "coordinator/downlink.h"
#include "core/model.h"
#include "core/round_report.h"
#include "monitoring/metrics.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace fedlgc::testing {
namespace {

using std::chrono::seconds;

// A client's counter by one label's value (clients run no exposer here).
double ClientCounter(edge_client::EdgeClient& c, const std::string& family,
                     const std::string& label, const std::string& value) {
  double sum = 0;
  for (const auto& fam : c.metrics().registry()->Collect()) {
    if (fam.name != family) continue;
    for (const auto& m : fam.metric) {
      for (const auto& l : m.label) {
        if (l.name == label && l.value == value) sum += m.counter.value;
      }
    }
  }
  return sum;
}

double Downloads(ClientThread& c, const std::string& kind) {
  return ClientCounter(c.get(), "fedlgc_model_downloads_total", "kind", kind);
}
double Fallbacks(ClientThread& c) {
  return ClientCounter(c.get(), "fedlgc_downlink_fallbacks_total", "reason", "mismatch") +
         ClientCounter(c.get(), "fedlgc_downlink_fallbacks_total", "reason", "malformed");
}

coordinator::CoordinatorOptions Job(const std::string& dir, const std::string& certs,
                                    uint32_t rounds, uint32_t min_clients) {
  auto o = CoordinatorDefaults(dir, certs);
  o.model = "mlp";
  o.rounds = rounds;
  o.min_clients = min_clients;
  o.round_timeout_s = 15;
  o.plan.codec = "topk(ratio=0.01)";
  o.plan.local_steps = 10;
  o.downlink.codec = "qsgd(bits=4)";
  o.downlink.window = 8;
  return o;
}

// The model the coordinator's deltas rebuilt at `version` (its state beside the checkpoint
// of that version).
std::vector<float> HeldAt(const coordinator::CoordinatorOptions& o, uint64_t version) {
  auto held = coordinator::Downlink::SavedHeld(o.downlink, o.state_dir, "", version);
  EXPECT_TRUE(held.ok()) << held.status();
  return held.ok() ? *held : std::vector<float>();
}

// Every client holds the model of the last round's download, equal to the coordinator's
// to the bit, and no chain failed to rebuild it.
void ExpectAllHoldTheCoordinatorsModel(const coordinator::CoordinatorOptions& o,
                                       std::vector<std::unique_ptr<ClientThread>>& clients,
                                       double expected_fallbacks = 0) {
  double fallbacks = 0;
  std::vector<float> held;
  std::optional<uint64_t> last;  // the version the last round trained on
  for (auto& c : clients) {
    ASSERT_NE(c->get().downlink(), nullptr);
    const edge_client::DownlinkReceiver& r = *c->get().downlink();
    ASSERT_TRUE(r.held_version().has_value());
    if (!last) last = r.held_version();
    EXPECT_EQ(*r.held_version(), *last) << "every client took part in the last round";
    if (held.empty()) held = HeldAt(o, *last);
    ASSERT_EQ(r.model().size(), held.size());
    EXPECT_EQ(0, std::memcmp(r.model().data(), held.data(), held.size() * sizeof(float)))
        << "client's model differs from the coordinator's";
    fallbacks += Fallbacks(*c);
  }
  EXPECT_EQ(fallbacks, expected_fallbacks);
}

// The job ends well, and so does every client.
void ExpectAllFinish(InProcessCoordinator& coord,
                     std::vector<std::unique_ptr<ClientThread>>& clients) {
  ASSERT_TRUE(coord.Wait(seconds(180)));
  ASSERT_TRUE(coord.result().ok()) << coord.result();
  for (auto& c : clients) {
    EXPECT_TRUE(c->Wait(seconds(30)));
    EXPECT_TRUE(c->result().ok()) << c->result();
  }
}

TEST(Downlink, LateJoinerAndRestartedClientHoldTheCoordinatorsModelToTheBit) {
  const int n = 4;
  const std::string dir = FreshDir("downlink_many");
  const std::string certs = MakeCerts(dir, n);
  const auto o = Job(dir, certs, 10, 3);
  InProcessCoordinator coord(o);
  auto committed = [&] { return coord.get().reports().size(); };
  std::vector<std::unique_ptr<ClientThread>> clients(n);
  auto start = [&](int i) {
    clients[i] = std::make_unique<ClientThread>(ClientDefaults(dir, certs, i, n, coord.port()));
  };
  for (int i = 0; i < 3; ++i) start(i);
  ASSERT_TRUE(WaitFor([&] { return committed() >= 2; }, std::chrono::seconds(90)));
  clients[1].reset();  // client-1 stops; its model stays in its state folder
  start(3);            // client-3 joins late
  ASSERT_TRUE(WaitFor([&] { return committed() >= 5; }, std::chrono::seconds(120)));
  start(1);  // client-1 restarts, three or more versions behind
  ASSERT_NO_FATAL_FAILURE(ExpectAllFinish(coord, clients));
  ExpectAllHoldTheCoordinatorsModel(o, clients);
  // The late joiner took the model whole once, then chains; the restarted client only
  // chains (the first from the version it kept); the others one full download in all.
  EXPECT_EQ(Downloads(*clients[3], "full"), 1);
  EXPECT_GE(Downloads(*clients[3], "chain"), 2);
  EXPECT_EQ(Downloads(*clients[1], "full"), 0);
  EXPECT_GE(Downloads(*clients[1], "chain"), 2);
  EXPECT_EQ(Downloads(*clients[0], "full"), 1);
  EXPECT_GE(Downloads(*clients[0], "chain"), 7);
  // Downlink bytes: 4-bit deltas, about 7.8x fewer than float32 over the run.
  uint64_t down = 0, raw = 0;
  for (const RoundReport& r : coord.get().reports()) {
    down += r.downlink_bytes;
    raw += r.raw_downlink_bytes;
  }
  EXPECT_GT(static_cast<double>(raw) / down, 4.0) << down << " bytes for " << raw;
}

// A TorchScript job's version 0 is the file's weights: clients that have the file (given,
// or fetched when they joined) hold it as version 0, so no client downloads the model
// whole; round 1's downloads are empty chains (their CRC32C checks the weights), and the
// one fetch of the file counts in round 1's downlink bytes.
TEST(Downlink, ClientsOfATorchScriptJobHoldVersionZeroAndNeverDownloadTheModelWhole) {
  const int n = 3;
  const std::string dir = FreshDir("downlink_v0");
  const std::string certs = MakeCerts(dir, n);
  auto o = Job(dir, certs, 4, n);
  o.model = dir + "/mlp.pt";
  auto module = core::Model::Create("mlp", 7);
  ASSERT_TRUE(module.ok()) << module.status();
  auto file = (*module)->TorchScriptBytes({});
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE(AtomicWriteFile(o.model, *file).ok());
  InProcessCoordinator coord(o);
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < n; ++i) {
    auto co = ClientDefaults(dir, certs, i, n, coord.port());
    if (i < 2) co.model = o.model;  // client-2 fetches the file
    clients.push_back(std::make_unique<ClientThread>(co));
  }
  ASSERT_NO_FATAL_FAILURE(ExpectAllFinish(coord, clients));
  ExpectAllHoldTheCoordinatorsModel(o, clients);
  for (auto& c : clients) {
    EXPECT_EQ(Downloads(*c, "full"), 0) << c->get().id();
    EXPECT_EQ(Downloads(*c, "chain"), 4) << c->get().id();
  }
  const std::vector<RoundReport>& reports = coord.get().reports();
  ASSERT_EQ(reports.size(), 4u);
  // Round 1: the file once (client-2's fetch) and three empty chains of a header each.
  EXPECT_GE(reports[0].downlink_bytes, file->size());
  EXPECT_LT(reports[0].downlink_bytes, file->size() + n * 64) << reports[0].downlink_bytes;
  // Later rounds: a delta each, far under a model.
  const uint64_t model_bytes = 4 * (*module)->dim();
  for (size_t r = 1; r < reports.size(); ++r) {
    EXPECT_LT(reports[r].downlink_bytes, n * model_bytes / 4) << "round " << r + 1;
  }
}

TEST(Downlink, AModelThatDriftedIsRefusedByItsCrcAndRecoveredWhole) {
  const int n = 2;
  const std::string dir = FreshDir("downlink_drift");
  const std::string certs = MakeCerts(dir, n);
  const auto o = Job(dir, certs, 4, 2);
  InProcessCoordinator coord(o);
  std::vector<std::unique_ptr<ClientThread>> clients(n);
  for (int i = 0; i < n; ++i) {
    clients[i] = std::make_unique<ClientThread>(ClientDefaults(dir, certs, i, n, coord.port()));
  }
  ASSERT_TRUE(WaitFor([&] { return coord.get().reports().size() >= 1; }, seconds(60)));
  clients[0].reset();
  // What client-0 kept is one ulp off in one coordinate (a rebuild that went wrong), with
  // a valid state file.
  {
    edge_client::DownlinkReceiver r(dir + "/clients/client-0.downlink");
    ASSERT_TRUE(r.Configure(coord.get().downlinks()->codec(), coord.get().engine().dim()).ok());
    ASSERT_TRUE(r.held_version().has_value());
    std::vector<float> m = r.model();
    m[1234] = std::nextafter(m[1234], 10.0f);
    ASSERT_TRUE(r.Hold(*r.held_version(), m).ok());
  }
  clients[0] = std::make_unique<ClientThread>(ClientDefaults(dir, certs, 0, n, coord.port()));
  ASSERT_TRUE(coord.Wait(seconds(120)));
  for (auto& c : clients) {
    EXPECT_TRUE(c->Wait(seconds(30)));
    EXPECT_TRUE(c->result().ok()) << c->result();
  }
  EXPECT_EQ(ClientCounter(clients[0]->get(), "fedlgc_downlink_fallbacks_total", "reason",
                          "mismatch"),
            1);
  EXPECT_EQ(Downloads(*clients[0], "full"), 1) << "the recovery";
  ExpectAllHoldTheCoordinatorsModel(o, clients, /*expected_fallbacks=*/1);
  // Each round had both clients.
  for (const RoundReport& r : coord.get().reports()) EXPECT_EQ(r.participants, n);
}

TEST(Downlink, ADownloadCutByTheLinkResumesAndTheModelIsTheCoordinators) {
  const int n = 2;
  const std::string dir = FreshDir("downlink_cut");
  const std::string certs = MakeCerts(dir, n);
  const auto o = Job(dir, certs, 3, 2);
  InProcessCoordinator coord(o);
  // Client 0's link is cut once, 600 KB into its first download (636 KB, in 64 KiB
  // chunks). The download resumes from the chunks the client had read (gRPC drops those
  // of a broken call it had not read yet, so on a loaded machine that may be none; the
  // offset itself is checked in tests/edge_client/transport_test.cc).
  auto proxy = sim::FaultProxy::Start("127.0.0.1", coord.port(),
                                      sim::LinkSpec::Parse("cut_after=600k").value(), 0);
  ASSERT_TRUE(proxy.ok());
  std::vector<std::unique_ptr<ClientThread>> clients;
  clients.push_back(
      std::make_unique<ClientThread>(ClientDefaults(dir, certs, 0, n, (*proxy)->port())));
  clients.push_back(std::make_unique<ClientThread>(ClientDefaults(dir, certs, 1, n, coord.port())));
  ASSERT_TRUE(coord.Wait(seconds(120)));
  for (auto& c : clients) {
    EXPECT_TRUE(c->Wait(seconds(30)));
    EXPECT_TRUE(c->result().ok()) << c->result();
  }
  EXPECT_EQ((*proxy)->cuts(), 1u);
  // Downloads the coordinator served from an offset past 0 (a resume, not a restart).
  double resumed = 0;
  for (const auto& fam : coord.get().metrics().registry()->Collect()) {
    if (fam.name != "fedlgc_stream_resumes_total") continue;
    for (const auto& m : fam.metric) {
      bool download = false, client0 = false;
      for (const auto& l : m.label) {
        download |= l.name == "stream" && l.value == "download";
        client0 |= l.name == "client" && l.value == "client-0";
      }
      if (download && client0) resumed += m.counter.value;
    }
  }
  std::printf("client-0: %.0f download retries, %.0f full and %.0f chain downloads; the "
              "coordinator served %.0f from an offset\n",
              ClientCounter(clients[0]->get(), "fedlgc_stream_resumes_total", "stream", "download"),
              Downloads(*clients[0], "full"), Downloads(*clients[0], "chain"), resumed);
  EXPECT_GE(ClientCounter(clients[0]->get(), "fedlgc_stream_resumes_total", "stream",
                          "download"),
            1);
  ExpectAllHoldTheCoordinatorsModel(o, clients);
  for (const RoundReport& r : coord.get().reports()) EXPECT_EQ(r.participants, n);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The coordinator killed with SIGKILL after round 2 and restarted: it serves the same
// broadcast from the state beside its checkpoint, so the clients (processes, which keep
// their models across the coordinator's restart) go on with chains, none falls back to a
// full download, and each holds the coordinator's model to the bit at the end.
TEST(Downlink, ACoordinatorKilledWithSigkillGoesOnWithTheSameBroadcast) {
  const int n = 3;
  const std::string dir = FreshDir("downlink_kill");
  const std::string certs = MakeCerts(dir, n);
  auto o = Job(dir, certs, 5, n);
  o.plan.local_steps = 100;  // rounds long enough to be killed in
  const int port = FreePort();
  const std::vector<std::string> argv = CoordinatorArgv(o, port);
  auto first = std::make_unique<ChildProcess>(argv, dir + "/coordinator.log");
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < n; ++i) clients.push_back(SpawnEdge(dir, certs, i, n, port));
  const std::string rounds_file = o.state_dir + "/rounds.jsonl";
  ASSERT_TRUE(WaitFor(
      [&] {
        auto rounds = ReadRoundLog(rounds_file);
        return rounds.ok() && rounds->size() >= 2;
      },
      seconds(90)))
      << "round 2 never committed";
  first->Kill(SIGKILL);
  EXPECT_EQ(first->Wait(seconds(10)), 128 + SIGKILL);
  ChildProcess second(argv, dir + "/coordinator.log");
  EXPECT_EQ(second.Wait(seconds(120)), 0) << "restarted coordinator did not finish";
  for (auto& c : clients) EXPECT_EQ(c->Wait(seconds(30)), 0) << "a client did not finish cleanly";
  auto log = ReadRoundLog(rounds_file);
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_EQ(log->size(), 5u);
  // From round 2 on every download was a chain, also right after the restart (a broadcast
  // started afresh would have sent the model whole): 4-bit deltas, ~7.8x fewer bytes.
  // A round whose downloads the killed coordinator had served shows none (the clients
  // trained on what they had); the last two rounds ran wholly after the restart.
  for (const RoundReport& r : *log) {
    if (r.round < 2 || (r.downlink_bytes == 0 && r.round < 4)) continue;
    ASSERT_GT(r.downlink_bytes, 0u) << "round " << r.round;
    EXPECT_GT(static_cast<double>(r.raw_downlink_bytes) / r.downlink_bytes, 5.0)
        << "round " << r.round << ": " << r.downlink_bytes << " bytes for "
        << r.raw_downlink_bytes;
  }
  // Each client's kept model (its state file) is the coordinator's at that version.
  const std::string spec =
      codecs::MakeCodec(coordinator::EffectiveDownlinkCodec(o.downlink.codec)).value()->spec();
  const size_t dim = CheckpointModel(o.state_dir, o).size();
  for (int i = 0; i < n; ++i) {
    const std::string id = "client-" + std::to_string(i);
    edge_client::DownlinkReceiver r(dir + "/clients/" + id + ".downlink");
    ASSERT_TRUE(r.Configure(spec, dim).ok());
    ASSERT_TRUE(r.held_version().has_value()) << id;
    EXPECT_EQ(*r.held_version(), 4u) << id << " trained round 5 on version 4";
    const std::vector<float> held = HeldAt(o, *r.held_version());
    ASSERT_EQ(r.model().size(), held.size());
    EXPECT_EQ(0, std::memcmp(r.model().data(), held.data(), held.size() * sizeof(float))) << id;
    EXPECT_EQ(ReadAll(dir + "/client-" + std::to_string(i) + ".log").find("downloading it whole"),
              std::string::npos)
        << id << " fell back to a full download";
  }
}

}  // namespace
}  // namespace fedlgc::testing
