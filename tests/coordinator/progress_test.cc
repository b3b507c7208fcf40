// The progress file: what each participant has done, counted; the per-client map capped;
// writes throttled and skipped when nothing changed.
#include "coordinator/progress.h"

#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/core/fake_clock.h"

namespace fedlgc::coordinator {
namespace {

nlohmann::json Parse(const Progress& p) { return nlohmann::json::parse(p.ToJson()); }

TEST(Progress, CountsWhatEachParticipantHasDone) {
  core::FakeClock clock;
  Progress p(10, &clock);
  EXPECT_EQ(Parse(p)["state"], "starting");
  p.Waiting(1, 3);
  clock.Advance(std::chrono::milliseconds(2500));
  auto j = Parse(p);
  EXPECT_EQ(j["state"], "waiting");
  EXPECT_DOUBLE_EQ(j["waiting_seconds"], 2.5);
  EXPECT_EQ(j["connected"], 1);
  EXPECT_EQ(j["needed"], 3);
  p.StartRound(4, {"a", "b", "c"});
  p.Downloaded("a", 100, false);
  j = Parse(p);
  EXPECT_EQ(j["state"], "round");
  EXPECT_EQ(j["round"], 4);
  EXPECT_EQ(j["rounds"], 10);
  EXPECT_EQ(j["participants"], 3);
  EXPECT_EQ(j["downloaded"], 0);
  EXPECT_EQ(j["down_bytes"], 100);
  p.Downloaded("a", 0, true);
  p.Downloaded("b", 50, true);
  p.Uploaded("a", 30, false);
  p.Uploaded("zz", 1000, true);  // not a participant: not in the round's view
  j = Parse(p);
  EXPECT_EQ(j["downloaded"], 2);
  EXPECT_EQ(j["uploading"], 1);
  EXPECT_EQ(j["uploaded"], 0);
  EXPECT_EQ(j["up_bytes"], 30);
  p.Uploaded("a", 20, true);
  j = Parse(p);
  EXPECT_EQ(j["uploading"], 0);
  EXPECT_EQ(j["uploaded"], 1);
  EXPECT_EQ(j["clients"]["a"]["up"], 50);
  EXPECT_EQ(j["clients"]["a"]["uploaded"], true);
  EXPECT_EQ(j["clients"]["c"]["downloaded"], false);
  const auto traffic = p.TakeTraffic();
  ASSERT_EQ(traffic.size(), 4u);  // zz's bytes too: they count in the round's totals
  EXPECT_EQ(traffic.at("a"), std::make_pair(uint64_t{50}, uint64_t{100}));
  EXPECT_EQ(traffic.at("b"), std::make_pair(uint64_t{0}, uint64_t{50}));
  EXPECT_EQ(traffic.at("zz"), std::make_pair(uint64_t{1000}, uint64_t{0}));
  // After the report took them, a transfer (an evaluation's download after the commit)
  // counts in the next round's.
  p.Downloaded("a", 70, true);
  p.Committed(4);
  p.StartRound(5, {"a"});  // a new round starts from zero
  j = Parse(p);
  EXPECT_EQ(j["committed"], 4);
  EXPECT_EQ(j["downloaded"], 0);
  EXPECT_EQ(j["up_bytes"], 0);
  p.Downloaded("a", 5, true);
  const auto next = p.TakeTraffic();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next.at("a"), std::make_pair(uint64_t{0}, uint64_t{75}));
  EXPECT_TRUE(p.TakeTraffic().empty());
  p.Done();
  EXPECT_EQ(Parse(p)["state"], "done");
}

TEST(Progress, ListsClientsOnlyForSmallRounds) {
  Progress p(1, core::Clock::Real());
  std::vector<std::string> many;
  for (size_t i = 0; i <= Progress::kMaxListedClients; ++i) {
    std::string id = "c";
    id += std::to_string(i);
    many.push_back(id);
  }
  p.StartRound(1, many);
  for (const auto& c : many) p.Downloaded(c, 1, true);
  const auto j = Parse(p);
  EXPECT_FALSE(j.contains("clients"));
  EXPECT_EQ(j["downloaded"], many.size());
  many.pop_back();
  p.StartRound(2, many);
  EXPECT_EQ(Parse(p)["clients"].size(), Progress::kMaxListedClients);
}

TEST(Progress, WritesOnlyWhenSomethingChangedAndNotTooOften) {
  std::string dir = ::testing::TempDir();
  dir += "/progress_test";
  std::filesystem::remove_all(dir);
  const std::string path = dir + "/state/progress.json";  // folders made as needed
  std::filesystem::remove(path);
  core::FakeClock clock;
  Progress p(3, &clock);
  p.StartRound(1, {"a"});
  ASSERT_TRUE(p.WriteIfDue(path, std::chrono::milliseconds(0)).ok());
  ASSERT_TRUE(std::filesystem::exists(path));
  std::filesystem::remove(path);
  ASSERT_TRUE(p.WriteIfDue(path, std::chrono::milliseconds(0)).ok());
  EXPECT_FALSE(std::filesystem::exists(path));  // nothing changed
  p.Downloaded("a", 5, true);
  ASSERT_TRUE(p.WriteIfDue(path, std::chrono::hours(1)).ok());
  EXPECT_FALSE(std::filesystem::exists(path));  // changed, but written too recently
  ASSERT_TRUE(p.WriteIfDue(path, std::chrono::milliseconds(0)).ok());
  ASSERT_TRUE(std::filesystem::exists(path));
  std::filesystem::remove(path);
  ASSERT_TRUE(p.WriteIfDue(path, std::chrono::hours(1), /*force=*/true).ok());
  EXPECT_TRUE(std::filesystem::exists(path));
  // While waiting for clients the file ticks once a second, changed or not.
  p.Waiting(0, 1);
  ASSERT_TRUE(p.WriteIfDue(path, std::chrono::milliseconds(0)).ok());
  std::filesystem::remove(path);
  clock.Advance(std::chrono::milliseconds(900));
  ASSERT_TRUE(p.WriteIfDue(path, std::chrono::milliseconds(0)).ok());
  EXPECT_FALSE(std::filesystem::exists(path));
  clock.Advance(std::chrono::milliseconds(100));
  ASSERT_TRUE(p.WriteIfDue(path, std::chrono::milliseconds(0)).ok());
  EXPECT_TRUE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace fedlgc::coordinator
