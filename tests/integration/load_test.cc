// fedlgc-load as a person runs it: emulated clients over mTLS against a coordinator it
// starts, each round's aggregate checked against what the clients sent. Sampled rounds
// (fraction), links that cut connections mid-transfer (the clients resume), a server lr
// the check follows, and a coordinator already running (--server, --certs).
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/harness.h"

namespace fedlgc::testing {
namespace {

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

struct LoadRun {
  int code = -1;
  nlohmann::json report;
};

// A small job: an MLP, synthetic test data, short think times.
LoadRun RunLoad(const std::string& dir, std::vector<std::string> extra) {
  std::vector<std::string> argv = {BinPath("fedlgc-load"),
                                   "--model",
                                   "mlp",
                                   "--test-data",
                                   "synthetic:256",
                                   "--think",
                                   "0.05",
                                   "--run-dir",
                                   dir + "/run",
                                   "--report",
                                   dir + "/report.json",
                                   "--quiet"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  ChildProcess load(argv, dir + "/load.log");
  LoadRun r;
  r.code = load.Wait(std::chrono::seconds(240));
  if (r.code < 0) load.Kill(SIGKILL);
  r.report = ReadJson(dir + "/report.json");
  return r;
}

// Every round settled, checked and counted each started client's update exactly once.
void ExpectEveryRoundChecked(const nlohmann::json& report, uint32_t rounds, uint32_t per_round) {
  ASSERT_TRUE(report.is_object());
  ASSERT_EQ(report["rounds"].size(), rounds);
  for (const auto& r : report["rounds"]) {
    EXPECT_EQ(r["started"], per_round) << r.dump();
    EXPECT_EQ(r["receipts"], per_round) << r.dump();
    EXPECT_EQ(r["participants"], per_round) << r.dump();
    EXPECT_EQ(r["counted_chunks"], r["chunks"]) << r.dump();
    EXPECT_TRUE(r["check"]["made"].get<bool>() && r["check"]["ok"].get<bool>()) << r.dump();
    EXPECT_GT(r["check"]["coordinates"].get<uint64_t>(), 100000u);
  }
  EXPECT_TRUE(report["summary"]["ok"].get<bool>());
  EXPECT_EQ(report["summary"]["receipts"], rounds * per_round);
  EXPECT_GT(report["summary"]["coordinator_peak_rss_mb"].get<double>(), 10);
}

TEST(FedlgcLoad, SampledRoundsCountEveryUpdateOnce) {
  const std::string dir = FreshDir("load_sampled");
  const LoadRun r = RunLoad(dir, {"--clients", "16", "--rounds", "3", "--fraction", "0.5",
                                  "--server-lr", "0.5", "--chunk-bytes", "20000"});
  EXPECT_EQ(r.code, 0);
  ExpectEveryRoundChecked(r.report, 3, 8);
  for (const auto& round : r.report["rounds"]) {
    EXPECT_GT(round["chunks"].get<uint64_t>(), 8u * 3) << "updates travel in several chunks";
  }
}

TEST(FedlgcLoad, CutConnectionsResumeAndStillCountOnce) {
  const std::string dir = FreshDir("load_cuts");
  // About one cut per MiB a connection carries: most downloads and some uploads break.
  // A float32 downlink: the check takes the models the clients download (under the default
  // compressed one, the true models the coordinator keeps: the other tests).
  const LoadRun r = RunLoad(
      dir, {"--clients", "6", "--rounds", "3", "--link", "cut=0.7", "--downlink-codec", "fp32"});
  EXPECT_EQ(r.code, 0);
  ExpectEveryRoundChecked(r.report, 3, 6);
  EXPECT_GT(r.report["summary"]["link_cuts"].get<uint64_t>(), 0u);
}

TEST(FedlgcLoad, DrivesACoordinatorAlreadyRunning) {
  const std::string dir = FreshDir("load_server");
  const std::string certs = MakeCerts(dir, 0);
  auto o = CoordinatorDefaults(dir, certs);
  o.model = "mlp";
  o.test_data = "synthetic:256";
  o.rounds = 1;  // the only round is checked against the model fetched after the job
  o.min_clients = 5;
  const int port = FreePort();
  std::vector<std::string> argv = CoordinatorArgv(o, port);
  // The final model stays downloadable a while after the last round (the last check).
  argv.insert(argv.end(), {"--eval-every=0", "--linger=20"});
  ChildProcess coordinator(argv, dir + "/coordinator.log");
  const LoadRun r =
      RunLoad(dir, {"--clients", "5", "--server", "127.0.0.1:" + std::to_string(port), "--certs",
                    certs, "--server-pid", std::to_string(coordinator.pid()), "--downlink-codec",
                    "fp32"});  // the coordinator's, as the check needs
  EXPECT_EQ(r.code, 0);
  ExpectEveryRoundChecked(r.report, 1, 5);
  coordinator.Kill(SIGTERM);
  coordinator.Wait(std::chrono::seconds(20));
}

// The check holds for the means only: another aggregator is refused with it, and runs
// without it (exit 0 once every round ran).
TEST(FedlgcLoad, TheCheckNeedsAMeanAndRunsWithoutItReportUnchecked) {
  const std::string dir = FreshDir("load_median");
  const LoadRun refused =
      RunLoad(dir, {"--clients", "3", "--rounds", "1", "--aggregator", "median"});
  EXPECT_EQ(refused.code, 1);
  const LoadRun r = RunLoad(dir, {"--clients", "3", "--rounds", "2", "--aggregator", "median",
                                  "--no-verify-aggregate", "--run-dir", dir + "/run2"});
  EXPECT_EQ(r.code, 0);
  ASSERT_TRUE(r.report.is_object());
  ASSERT_EQ(r.report["rounds"].size(), 2u);
  for (const auto& round : r.report["rounds"]) {
    EXPECT_EQ(round["receipts"], 3);
    EXPECT_FALSE(round["check"]["made"].get<bool>());
  }
  EXPECT_TRUE(r.report["summary"]["ok"].get<bool>());
}

// On a terminal a live line follows the open round; without one, plain lines only.
TEST(FedlgcLoad, ATerminalSeesTheRoundLive) {
  if (!std::filesystem::exists("/usr/bin/script")) GTEST_SKIP() << "no script(1) for a terminal";
  const std::string dir = FreshDir("load_live");
  ASSERT_EQ(RunOnTerminal(
                {BinPath("fedlgc-load"), "--model", "mlp", "--test-data", "synthetic:256",
                 "--clients", "4", "--rounds", "2", "--think", "1.5", "--run-dir", dir + "/run"},
                dir + "/tty.log", std::chrono::seconds(120)),
            0)
      << ReadText(dir + "/tty.log");
  const std::string out = ReadText(dir + "/tty.log");
  EXPECT_NE(out.find("\r\033[Kround "), std::string::npos) << out;
  EXPECT_NE(out.find(" downloaded, "), std::string::npos) << out;
  EXPECT_NE(out.find("every update counted exactly once"), std::string::npos) << out;
  ChildProcess plain(
      {BinPath("fedlgc-load"), "--model", "mlp", "--test-data", "synthetic:256", "--clients", "2",
       "--rounds", "1", "--think", "0.1", "--run-dir", dir + "/plain"},
      dir + "/plain.log");
  ASSERT_EQ(plain.Wait(std::chrono::seconds(120)), 0) << ReadText(dir + "/plain.log");
  const std::string text = ReadText(dir + "/plain.log");
  EXPECT_NE(text.find("ok (2 receipts)"), std::string::npos) << text;
  EXPECT_EQ(text.find('\033'), std::string::npos);
}

TEST(FedlgcLoad, RefusesARunFolderWithAnEarlierJob) {
  const std::string dir = FreshDir("load_reused");
  std::filesystem::create_directories(dir + "/run/coordinator");
  std::ofstream(dir + "/run/coordinator/checkpoint.bin") << "x";
  const LoadRun r = RunLoad(dir, {"--clients", "2", "--rounds", "1"});
  EXPECT_EQ(r.code, 1);
  const std::string text = ReadText(dir + "/load.log");
  EXPECT_NE(text.find("holds the state of an earlier job"), std::string::npos) << text;
}

}  // namespace
}  // namespace fedlgc::testing
