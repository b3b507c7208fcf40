// fedlgc-sim as a person runs it: stopped with SIGTERM or killed outright, it leaves no
// process of its federation behind; a run no client can join fails with the reason after
// --join-timeout; a job the coordinator refuses shows the coordinator's own error; on a
// terminal it shows a live line of the open round; clients hosted several to a process
// each run behind the link of their trace row; --tensorboard writes every round's scalars.
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/round_report.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/harness.h"
#include "tests/monitoring/tensorboard_reader.h"

namespace fedlgc::testing {
namespace {

// A small, fast job: two clients training an MLP on synthetic data, in plaintext.
std::vector<std::string> SimArgv(const std::string& dir, uint32_t rounds,
                                 std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {BinPath("fedlgc-sim"),
                                   "--clients",
                                   "2",
                                   "--rounds",
                                   std::to_string(rounds),
                                   "--data",
                                   "synthetic:512",
                                   "--model",
                                   "mlp",
                                   "--local-steps",
                                   "2",
                                   "--insecure",
                                   "--run-dir",
                                   dir + "/run"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// Live processes (not zombies) whose command line mentions `needle`.
std::set<int> ProcessesMentioning(const std::string& needle) {
  std::set<int> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = ReadText(e.path().string() + "/cmdline");
    for (char& c : cmdline) {
      if (c == '\0') c = ' ';
    }
    if (cmdline.find(needle) == std::string::npos) continue;
    const std::string stat = ReadText(e.path().string() + "/stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z') continue;
    out.insert(std::stoi(name));
  }
  return out;
}

// Waits until the run has committed a round and its coordinator and both clients run.
std::set<int> WaitForFederation(const std::string& dir, ChildProcess& sim) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < until) {
    const std::set<int> pids = ProcessesMentioning(dir + "/run/");
    if (!ReadText(dir + "/run/coordinator/rounds.jsonl").empty() && pids.size() >= 3) return pids;
    if (sim.Wait(std::chrono::milliseconds(200)) >= 0) break;
  }
  return {};
}

bool AllGone(const std::set<int>& pids, std::chrono::seconds within) {
  const auto until = std::chrono::steady_clock::now() + within;
  for (;;) {
    bool alive = false;
    for (int pid : pids) {
      const std::string stat = ReadText("/proc/" + std::to_string(pid) + "/stat");
      const size_t paren = stat.rfind(')');
      alive |= paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
    }
    if (!alive) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    // sleep: polls for the process to exit
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Starts a long run, sends `signal` to the sim (and first to every process of its
// federation when `whole_group`, as Ctrl-C on a terminal does), and checks that the sim
// stops them all and says why.
void ExpectStoppedBy(const std::string& name, int signal, const char* signal_name,
                     bool whole_group) {
  const std::string dir = FreshDir(name);
  ChildProcess sim(SimArgv(dir, 100000), dir + "/sim.log");
  const std::set<int> pids = WaitForFederation(dir, sim);
  ASSERT_GE(pids.size(), 3u) << ReadText(dir + "/sim.log");
  EXPECT_EQ(pids.count(sim.pid()), 0u);  // only its children
  if (whole_group) {
    for (int pid : pids) ::kill(pid, signal);
  }
  sim.Kill(signal);
  EXPECT_EQ(sim.Wait(std::chrono::seconds(30)), 128 + signal);
  EXPECT_TRUE(AllGone(pids, std::chrono::seconds(1)));
  EXPECT_NE(ReadText(dir + "/sim.log")
                .find(std::string("stopped by ") + signal_name + "; the run folder is"),
            std::string::npos)
      << ReadText(dir + "/sim.log");
}

TEST(Sim, SigtermStopsTheWholeFederation) {
  ExpectStoppedBy("sim_sigterm", SIGTERM, "SIGTERM", /*whole_group=*/false);
}

// Ctrl-C on a terminal: SIGINT reaches the sim and its children at once, and the
// coordinator, which stops on it, exits 0 before the sim looks.
TEST(Sim, CtrlCToTheWholeGroupStopsTheRunAndSaysSo) {
  ExpectStoppedBy("sim_sigint", SIGINT, "SIGINT", /*whole_group=*/true);
}

TEST(Sim, ItsProcessesDieWithAKilledSim) {
  const std::string dir = FreshDir("sim_sigkill");
  ChildProcess sim(SimArgv(dir, 100000), dir + "/sim.log");
  const std::set<int> pids = WaitForFederation(dir, sim);
  ASSERT_GE(pids.size(), 3u) << ReadText(dir + "/sim.log");
  sim.Kill(SIGKILL);  // no handler runs: the kernel tells the children
  EXPECT_EQ(sim.Wait(std::chrono::seconds(10)), 128 + SIGKILL);
  EXPECT_TRUE(AllGone(pids, std::chrono::seconds(20)));
}

TEST(Sim, ARunNoClientCanJoinFailsWithTheReason) {
  const std::string dir = FreshDir("sim_nojoin");
  // Every connection is cut at its first byte.
  ChildProcess sim(SimArgv(dir, 3, {"--link", "cut=1", "--join-timeout", "3"}), dir + "/sim.log");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(sim.Wait(std::chrono::seconds(60)), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(40));
  const std::string log = ReadText(dir + "/sim.log");
  EXPECT_NE(log.find("only 0 of 2 clients connected for 3 s (--join-timeout)"), std::string::npos)
      << log;
  EXPECT_NE(log.find("client-0's log ends:"), std::string::npos) << log;
  EXPECT_TRUE(ProcessesMentioning(dir + "/run/").empty());
}

// A population: six clients hosted three to a process, each with its own link from a
// trace (client-0 down for its first 8 s, client-1 at 2 Mbit/s, the others at 50): every
// round has all six, client-0 was refused while down, and the report lists each link. The
// 8 s count from the proxy's start and must outlast the hosting process's start (libtorch
// loads, then the first connect), which a loaded machine stretches to several seconds.
TEST(Sim, HostedClientsEachBehindTheLinkOfItsTraceRow) {
  const std::string dir = FreshDir("sim_population");
  const std::string trace = dir + "/fleet.csv";
  std::ofstream(trace) << "client,rate,delay,down\nclient-0,10mbit,,0-8\nclient-1,2mbit,30ms,\n"
                          "*,50mbit,,\n";
  ChildProcess sim(SimArgv(dir, 2,
                           {"--clients", "6", "--clients-per-process", "3", "--link",
                            "trace:" + trace, "--report", dir + "/report.json"}),
                   dir + "/sim.log");
  ASSERT_EQ(sim.Wait(std::chrono::seconds(120)), 0) << ReadText(dir + "/sim.log");
  const auto report = nlohmann::json::parse(ReadText(dir + "/report.json"));
  ASSERT_EQ(report["rounds"].size(), 2u);
  for (const auto& row : report["rounds"]) EXPECT_EQ(row["participants"], 6);
  EXPECT_EQ(report["config"]["clients_per_process"], 3);
  const auto& links = report["summary"]["links"];
  ASSERT_EQ(links.size(), 6u);
  EXPECT_DOUBLE_EQ(links["client-1"]["rate_mbit"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(links["client-1"]["delay_ms"].get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(links["client-5"]["rate_mbit"].get<double>(), 50.0);
  EXPECT_GE(links["client-0"]["offline_refused"].get<int>(), 1);
  EXPECT_EQ(links["client-3"]["offline_refused"].get<int>(), 0);
  // Two processes, three clients each.
  EXPECT_NE(ReadText(dir + "/run/clients-0-2.log").find("hosting 3 clients"), std::string::npos);
  EXPECT_NE(ReadText(dir + "/run/clients-3-5.log").find("hosting 3 clients"), std::string::npos);
}

// Seventy clients hosted by one process without TLS: each has a connection of its own, so
// all join, where sharing one would stop the 65th event stream at the coordinator's
// --max-streams-per-connection (64) and the run at its join timeout.
TEST(Sim, SeventyHostedClientsWithoutTlsAllJoin) {
  const std::string dir = FreshDir("sim_hosted_plain");
  ChildProcess sim(SimArgv(dir, 1,
                           {"--clients", "70", "--clients-per-process", "70", "--fraction", "0.1",
                            "--join-timeout", "30", "--report", dir + "/report.json"}),
                   dir + "/sim.log");
  ASSERT_EQ(sim.Wait(std::chrono::seconds(120)), 0) << ReadText(dir + "/sim.log");
  const auto report = nlohmann::json::parse(ReadText(dir + "/report.json"));
  ASSERT_EQ(report["rounds"].size(), 1u);
  EXPECT_EQ(report["rounds"][0]["participants"], 7);
  EXPECT_NE(ReadText(dir + "/run/clients-0-69.log").find("hosting 70 clients"), std::string::npos);
}

TEST(Sim, ARefusedJobShowsTheCoordinatorsOwnError) {
  const std::string dir = FreshDir("sim_refused");
  ChildProcess sim(SimArgv(dir, 3, {"--codec", "nonsense(bits=4)"}), dir + "/sim.log");
  EXPECT_EQ(sim.Wait(std::chrono::seconds(60)), 1);
  const std::string log = ReadText(dir + "/sim.log");
  EXPECT_NE(log.find("the coordinator did not start:"), std::string::npos) << log;
  EXPECT_NE(log.find("unknown codec 'nonsense'"), std::string::npos) << log;
}

TEST(Sim, ATerminalSeesTheRoundLiveAndTheProgressFileEndsDone) {
  if (!std::filesystem::exists("/usr/bin/script")) GTEST_SKIP() << "no script(1) for a terminal";
  const std::string dir = FreshDir("sim_live");
  ASSERT_EQ(RunOnTerminal(SimArgv(dir, 4, {"--link", "rate=20mbit"}), dir + "/tty.log",
                          std::chrono::seconds(120)),
            0)
      << ReadText(dir + "/tty.log");
  const std::string out = ReadText(dir + "/tty.log");
  EXPECT_NE(out.find("\r\033[Kround "), std::string::npos) << out;
  EXPECT_NE(out.find(" downloaded, "), std::string::npos) << out;
  EXPECT_NE(out.find(" uploaded | down "), std::string::npos) << out;
  EXPECT_NE(out.find("final accuracy"), std::string::npos) << out;
  const auto p = nlohmann::json::parse(ReadText(dir + "/run/coordinator/progress.json"));
  EXPECT_EQ(p["state"], "done");
  EXPECT_EQ(p["committed"], 4);
  EXPECT_EQ(p["rounds"], 4);
  EXPECT_EQ(p["participants"], 2);
  EXPECT_EQ(p["uploaded"], 2);
  EXPECT_EQ(p["downloaded"], 2);
  EXPECT_GT(p["clients"]["client-0"]["up"].get<uint64_t>(), 0u);
  // Without a terminal: the rows alone, no escapes.
  std::filesystem::create_directories(dir + "/plain");
  ChildProcess plain(SimArgv(dir + "/plain", 2), dir + "/plain.log");
  ASSERT_EQ(plain.Wait(std::chrono::seconds(120)), 0) << ReadText(dir + "/plain.log");
  EXPECT_EQ(ReadText(dir + "/plain.log").find('\033'), std::string::npos);
}

// --algorithm fedprox(mu=M) reaches the C++ clients' training: from the same start, seeds
// and data, each client's update (--dump-updates) is held near the round's model (measured:
// norms 0.44 and 0.39 against 7.2 and 7.3 without it).
TEST(Sim, FedProxHoldsEachClientsUpdateNearTheRoundsModel) {
  const std::string dir = FreshDir("sim_fedprox");
  auto norms = [&](const std::string& name, const std::string& algorithm) {
    std::filesystem::create_directories(dir + "/" + name);
    ChildProcess sim(SimArgv(dir + "/" + name, 1,
                             {"--local-steps", "30", "--lr", "0.1", "--codec", "fp32",
                              "--downlink-codec", "fp32", "--algorithm", algorithm,
                              "--dump-updates", dir + "/" + name + "/dump"}),
                     dir + "/" + name + ".log");
    EXPECT_EQ(sim.Wait(std::chrono::seconds(180)), 0) << ReadText(dir + "/" + name + ".log");
    std::vector<double> out;
    for (const char* client : {"client-0", "client-1"}) {
      const std::string bytes = ReadText(dir + "/" + name + "/dump/" + client + "/r1.f32");
      std::vector<float> v(bytes.size() / sizeof(float));
      std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
      double sq = 0;
      for (float x : v) sq += static_cast<double>(x) * x;
      EXPECT_GT(v.size(), 1000u) << client;
      out.push_back(std::sqrt(sq));
    }
    return out;
  };
  const std::vector<double> plain = norms("fedavg", "fedavg");
  const std::vector<double> prox = norms("fedprox", "fedprox(mu=5)");
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_GT(plain[i], 1.0) << i;
    EXPECT_LT(prox[i], 0.25 * plain[i]) << i;
  }
}

// --tensorboard DIR: every committed round's scalars, equal to its rounds.jsonl line, in a
// file TensorBoard reads (every record's CRCs checked by the tests' own reader). Federated
// evaluation and --dp do not go together, so two runs hold the whole list between them.
TEST(Sim, TensorBoardHoldsEveryRoundsScalars) {
  const std::string dir = FreshDir("sim_tensorboard");
  struct Run {
    std::string name;
    std::vector<std::string> flags;
    std::vector<std::string> tags;  // beside those of every round
  };
  const std::vector<Run> runs = {
      {"eval",
       {"--eval", "both"},
       {"accuracy/server", "loss/server", "accuracy/federated", "loss/federated"}},
      {"dp",
       {"--dp", "gaussian(noise=0.5,clip=1)"},
       {"accuracy/server", "loss/server", "privacy/epsilon"}}};
  for (const Run& run : runs) {
    SCOPED_TRACE(run.name);
    const std::string sub = dir + "/" + run.name;
    std::filesystem::create_directories(sub);
    std::vector<std::string> flags = run.flags;
    flags.insert(flags.end(), {"--tensorboard", sub + "/tb"});
    ChildProcess sim(SimArgv(sub, 2, flags), sub + "/sim.log");
    ASSERT_EQ(sim.Wait(std::chrono::seconds(180)), 0) << ReadText(sub + "/sim.log");
    const auto files = EventFiles(sub + "/tb");
    ASSERT_EQ(files.size(), 1u);
    auto events = ReadEvents(ReadBytes(files[0]));
    ASSERT_TRUE(events.ok()) << events.status();
    EXPECT_EQ(events->at(0).file_version(), "brain.Event:2");
    const auto by_step = ScalarsByStep(*events);
    auto log = ReadRoundLog(sub + "/run/coordinator/rounds.jsonl");
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_EQ(log->size(), 2u);
    ASSERT_EQ(by_step.size(), 2u);
    for (const RoundReport& r : *log) {
      const auto& s = by_step.at(static_cast<int64_t>(r.round));
      std::vector<std::string> tags = {"bytes/uplink",   "bytes/downlink",     "ratio/uplink",
                                       "ratio/downlink", "round/participants", "round/seconds"};
      tags.insert(tags.end(), run.tags.begin(), run.tags.end());
      for (const std::string& tag : tags)
        EXPECT_EQ(s.count(tag), 1u) << tag << " round " << r.round;
      EXPECT_EQ(s.at("accuracy/server"), static_cast<float>(r.accuracy));
      EXPECT_EQ(s.at("bytes/uplink"), static_cast<float>(r.uplink_bytes));
      EXPECT_EQ(s.at("round/participants"), static_cast<float>(r.participants));
      EXPECT_GT(s.at("ratio/uplink"), 1.0f);
      if (run.name == "dp") {
        EXPECT_EQ(s.at("privacy/epsilon"), static_cast<float>(r.Figure("dp_epsilon")));
      }
    }
  }
}

}  // namespace
}  // namespace fedlgc::testing
