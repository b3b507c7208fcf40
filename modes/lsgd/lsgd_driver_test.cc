// LSGD at the coordinator without gRPC: leader election and groups, pulls in RoundStart,
// the leaders' blobs, and the driver's state across a restart.
#include "modes/lsgd/lsgd_driver.h"

#include <cmath>
#include <filesystem>

#include "codecs/input_error.h"
#include "gtest/gtest.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {
namespace {

using coordinator::PerClientCollector;

constexpr size_t kDim = 64;

std::string TempDir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/modes-" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

protos::ProgressReport Report(uint64_t round, double loss, double rtt = 0) {
  protos::ProgressReport r;
  r.set_round(round);
  r.mutable_lsgd()->set_loss(loss);
  r.set_rtt_ms(rtt);
  return r;
}

TEST(Lsgd, RefusesReportsThatAreNotFiniteNotThisRoundsOrNotLsgd) {
  LsgdOptions o;
  o.groups = {{"a", "b"}, {"c", "d"}};
  auto d = LsgdDriver::Create(o, std::vector<float>(kDim, 0.0f), TempDir("refuse"), 0).value();
  d->BeginRound(1, {"a", "b", "c", "d"});
  // A non-finite loss is refused as such; another round's or a stranger's report is not
  // this round's.
  absl::Status refused = d->AcceptReport("a", Report(1, std::nan("")));
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_EQ(codecs::InputErrorOf(refused), codecs::InputError::kNonFinite);
  EXPECT_TRUE(absl::IsFailedPrecondition(d->AcceptReport("a", Report(2, 1.0))));
  EXPECT_TRUE(absl::IsFailedPrecondition(d->AcceptReport("x", Report(1, 1.0))));
  protos::ProgressReport sgp_shaped = Report(1, 1.0);
  sgp_shaped.mutable_sgp();
  EXPECT_TRUE(absl::IsInvalidArgument(d->AcceptReport("a", sgp_shaped)));
  // The refusals left room for a's real report.
  ASSERT_TRUE(d->AcceptReport("a", Report(1, 0.9)).ok());
}

TEST(Lsgd, ElectsTheArgminPerGroupAndGloballyAndPullsTheOthers) {
  LsgdOptions o;
  o.groups = {{"a", "b"}, {"c", "d"}};
  auto d = LsgdDriver::Create(o, std::vector<float>(kDim, 0.0f), TempDir("elect"), 0).value();
  d->BeginRound(1, {"a", "b", "c", "d"});
  for (auto [c, loss] : {std::pair{"a", 0.9}, {"b", 0.4}, {"c", 0.7}, {"d", 0.3}})
    ASSERT_TRUE(d->AcceptReport(c, Report(1, loss)).ok());
  EXPECT_TRUE(d->AllReported());
  // Round 1 is a local round (global every 128/64 = 2 rounds).
  auto e = d->Elect(1, {"a", "b", "c", "d"}, {});
  EXPECT_FALSE(e.global);
  EXPECT_EQ(e.leaders.at(0), "b");
  EXPECT_EQ(e.leaders.at(1), "d");
  EXPECT_EQ(e.best, "d");
  // A leader that is gone is replaced by the next best of its group.
  auto e2 = d->Elect(1, {"a", "b", "c", "d"}, {"d"});
  EXPECT_EQ(e2.leaders.at(1), "c");
  EXPECT_EQ(e2.best, "b");
  // b uploads its model (delta 1 against the initial reference); d's upload is partial.
  LsgdDriver::Updates up;
  up["b"].values.assign(kDim, 1.0f);
  up["b"].complete = true;
  up["d"].values.assign(kDim, 2.0f);
  std::set<std::string> counted;
  const std::vector<float> model = d->Commit(1, e, up, &counted);
  EXPECT_EQ(counted, std::set<std::string>{"b"});
  // The run's model is the reference of the best client's group, which did not move.
  EXPECT_EQ(model, std::vector<float>(kDim, 0.0f));
  // Committed in round 1: version 2 (formed in round r is 2r - 1, committed 2r).
  auto blob = d->Blob("a", "group:0", 2);
  ASSERT_TRUE(blob.ok()) << blob.status();
  EXPECT_EQ((*blob)->bytes.size(), kDim * 4);
  EXPECT_TRUE(absl::IsNotFound(d->Blob("a", "group:1", 2).status()));  // still version 0
  EXPECT_TRUE(absl::IsNotFound(d->Blob("a", "group:00", 2).status())) << "not canonical";
  EXPECT_TRUE(absl::IsNotFound(d->Blob("a", "group:9", 0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(d->Blob("a", "inbox", 0).status()));
  // Next round: a pulls towards its group's reference; b (the leader) does not; c and d
  // have no pull (their leader's model did not arrive); no global pull (local round).
  protos::RoundStart sa, sb, sc;
  d->DecorateRoundStart("a", &sa);
  d->DecorateRoundStart("b", &sb);
  d->DecorateRoundStart("c", &sc);
  ASSERT_EQ(sa.lsgd().pulls_size(), 1);
  EXPECT_EQ(sa.lsgd().pulls(0).blob(), "group:0");
  EXPECT_EQ(sa.lsgd().pulls(0).version(), 2u);
  EXPECT_FLOAT_EQ(sa.lsgd().pulls(0).strength(), 0.1f);
  EXPECT_EQ(sb.lsgd().pulls_size(), 0);
  EXPECT_EQ(sc.lsgd().pulls_size(), 0);

  // Round 2 is global: everyone but the global leader also pulls towards its group.
  d->BeginRound(2, {"a", "b", "c", "d"});
  for (auto [c, loss] : {std::pair{"a", 0.2}, {"b", 0.4}, {"c", 0.7}, {"d", 0.3}})
    ASSERT_TRUE(d->AcceptReport(c, Report(2, loss)).ok());
  e = d->Elect(2, {"a", "b", "c", "d"}, {});
  EXPECT_TRUE(e.global);
  EXPECT_EQ(e.best, "a");
  up.clear();
  for (const char* c : {"a", "d"}) {
    up[c].values.assign(kDim, 0.5f);
    up[c].complete = true;
  }
  counted.clear();
  EXPECT_EQ(d->Commit(2, e, up, &counted), std::vector<float>(kDim, 1.5f));
  protos::RoundStart sd, sa2;
  d->DecorateRoundStart("d", &sd);
  d->DecorateRoundStart("a", &sa2);
  ASSERT_EQ(sd.lsgd().pulls_size(), 1);  // d led its group: only the global pull
  EXPECT_EQ(sd.lsgd().pulls(0).blob(), "group:0");
  EXPECT_EQ(sa2.lsgd().pulls_size(), 0);  // the global leader pulls towards nobody
  sb.Clear();
  d->DecorateRoundStart("b", &sb);
  ASSERT_EQ(sb.lsgd().pulls_size(), 2);  // its group's leader, then the global leader
}

TEST(Lsgd, GroupsByLatencyAndStateSurviveARestart) {
  const auto groups = GroupsByLatency({{"a", 1}, {"b", 50}, {"c", 2}, {"d", 55}, {"e", 3}}, 2);
  ASSERT_EQ(groups.size(), 2u);  // a lone last client joins the group before it
  EXPECT_EQ(groups[0], (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(groups[1], (std::vector<std::string>{"e", "b", "d"}));
  EXPECT_FALSE(ParseLsgdGroups("a,b;b,c").ok());
  EXPECT_FALSE(ParseLsgdGroups("a,,b").ok());
  EXPECT_EQ(ParseLsgdGroups("a,b;c").value().size(), 2u);

  const std::string dir = TempDir("restart");
  LsgdOptions o;
  o.group_size = 2;
  auto d = LsgdDriver::Create(o, std::vector<float>(kDim, 0.0f), dir, 0).value();
  d->BeginRound(1, {"a", "b", "c", "d"});
  for (auto [c, rtt] : {std::pair{"a", 1.0}, {"b", 40.0}, {"c", 2.0}, {"d", 45.0}})
    ASSERT_TRUE(d->AcceptReport(c, Report(1, rtt / 100, rtt)).ok());
  auto e = d->Elect(1, {"a", "b", "c", "d"}, {});
  EXPECT_EQ(d->group_count(), 2u);
  LsgdDriver::Updates up;
  up[e.leaders.at(0)].values.assign(kDim, 1.0f);
  up[e.leaders.at(0)].complete = true;
  std::set<std::string> counted;
  d->Commit(1, e, up, &counted);
  ASSERT_TRUE(d->Save(1).ok());
  auto back = LsgdDriver::Create(o, std::vector<float>(kDim, 0.0f), dir, 1).value();
  EXPECT_EQ(back->Groups(), d->Groups());
  ASSERT_TRUE(back->Blob("c", "group:0", 2).ok());  // committed in round 1: version 2
  EXPECT_EQ((*back->Blob("c", "group:0", 2))->bytes, (*d->Blob("c", "group:0", 2))->bytes);
  protos::RoundStart s1, s2;
  d->DecorateRoundStart("c", &s1);
  back->DecorateRoundStart("c", &s2);
  EXPECT_EQ(s1.SerializeAsString(), s2.SerializeAsString());
  // A newcomer joins the group whose latency is nearest its own.
  back->BeginRound(2, {"a", "b", "c", "d", "z"});
  ASSERT_TRUE(back->AcceptReport("z", Report(2, 0.5, 42.0)).ok());
  back->Elect(2, {"z"}, {});
  EXPECT_EQ(back->Groups().at("z"), back->Groups().at("b"));
}

}  // namespace
}  // namespace fedlgc::modes
