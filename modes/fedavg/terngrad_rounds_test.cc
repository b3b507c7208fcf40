// The coordinator's side of TernGrad's shared scale (terngrad_rounds.h): which reports a
// round takes, when it sets its scale and to what, and what it tells the participants.
#include "modes/fedavg/terngrad_rounds.h"

#include <cmath>
#include <limits>

#include "codecs/input_error.h"
#include "gtest/gtest.h"
#include "protos/fedlgc.pb.h"
#include "tests/coordinator/fake_round_host.h"

namespace fedlgc::modes {
namespace {

// Records what a round pushes.
class PushHost final : public testing::FakeRoundHost {
 public:
  bool Push(const std::string& client, const protos::ServerEvent& event) override {
    pushed[client].push_back(event);
    return true;
  }
  std::map<std::string, std::vector<protos::ServerEvent>> pushed;
};

protos::ProgressReport Report(uint64_t round, double scale) {
  protos::ProgressReport r;
  r.set_round(round);
  r.mutable_fedavg()->set_terngrad_scale(static_cast<float>(scale));
  return r;
}

constexpr char kSpec[] = "terngrad(bucket=64,shared=1)";

TEST(TernGradRounds, ReportsAreCheckedAndTheScaleIsTheLargestWithinTheClipOfTheMedian) {
  auto rounds = TernGradRounds::Create(kSpec, 1000, /*clip=*/2).value();
  const std::vector<std::string> who = {"a", "b", "c", "d"};
  PushHost host;
  auto decoder =
      rounds->BeginRound(5, who, host.Now(), host.Now() + std::chrono::minutes(1)).value();
  EXPECT_EQ(decoder->scale(), 0.0f);
  // Refused: another round, a stranger, no scale, and scales that are not finite, > 0 and
  // at most 1e30.
  EXPECT_TRUE(absl::IsFailedPrecondition(rounds->Accept("a", Report(4, 1.0))));
  EXPECT_TRUE(absl::IsFailedPrecondition(rounds->Accept("x", Report(5, 1.0))));
  EXPECT_TRUE(absl::IsInvalidArgument(rounds->Accept("a", protos::ProgressReport())));
  for (double bad : {std::nan(""), -1.0, 0.0, 1e31, std::numeric_limits<double>::infinity()}) {
    const absl::Status st = rounds->Accept("a", Report(5, bad));
    EXPECT_EQ(codecs::InputErrorOf(st), codecs::InputError::kNonFinite) << bad << ": " << st;
  }
  ASSERT_TRUE(rounds->Accept("a", Report(5, 1.0)).ok());
  ASSERT_TRUE(rounds->Accept("b", Report(5, 1.5)).ok());
  ASSERT_TRUE(rounds->Accept("c", Report(5, 1.25)).ok());
  rounds->Tick(host);  // three of four, before half of the round's time: not yet
  EXPECT_TRUE(host.pushed.empty());
  EXPECT_EQ(decoder->scale(), 0.0f);
  // A liar's 1000 is bounded by 2 x the lower median of {1, 1.25, 1.5, 1000} = 2 x 1.25.
  ASSERT_TRUE(rounds->Accept("d", Report(5, 1000.0)).ok());
  rounds->Tick(host);
  EXPECT_EQ(decoder->scale(), 2.5f);
  ASSERT_EQ(host.pushed.size(), 4u);
  for (const auto& [client, events] : host.pushed) {
    ASSERT_EQ(events.size(), 1u) << client;
    EXPECT_EQ(events[0].mode().terngrad_scale().round(), 5u);
    EXPECT_EQ(events[0].mode().terngrad_scale().scale(), 2.5f);
  }
  // Set once: later reports are refused, ticks push nothing more, RoundStart carries it.
  EXPECT_TRUE(absl::IsFailedPrecondition(rounds->Accept("a", Report(5, 3.0))));
  rounds->Tick(host);
  EXPECT_EQ(host.pushed.at("a").size(), 1u);
  protos::RoundStart start;
  start.set_round(5);
  rounds->Decorate(&start);
  EXPECT_EQ(start.fedavg().terngrad_scale(), 2.5f);
  start.set_round(6);
  start.mutable_fedavg()->clear_terngrad_scale();
  rounds->Decorate(&start);
  EXPECT_EQ(start.fedavg().terngrad_scale(), 0.0f);
  RoundReport report;
  rounds->EndRound(&report);
  EXPECT_EQ(report.Figure("terngrad_scale"), 2.5);
  EXPECT_EQ(report.Figure("terngrad_reports"), 4.0);
  EXPECT_EQ(report.per_client.at("terngrad_local_scale").at("d"), 1000.0);
  EXPECT_TRUE(absl::IsFailedPrecondition(rounds->Accept("a", Report(5, 1.0))));  // round over
}

// Past half of the round's time one report is enough; without the clip multiplier the
// largest counts as it is.
TEST(TernGradRounds, HalfwayThroughTheRoundTheReportsInSetTheScale) {
  auto rounds = TernGradRounds::Create(kSpec, 1000, /*clip=*/0).value();
  PushHost host;
  const auto deadline = host.Now() + std::chrono::seconds(200);
  auto decoder = rounds->BeginRound(1, {"a", "b", "c"}, host.Now(), deadline).value();
  rounds->Tick(host);  // nobody reported
  ASSERT_TRUE(rounds->Accept("a", Report(1, 7.0)).ok());
  ASSERT_TRUE(rounds->Accept("b", Report(1, 70.0)).ok());
  host.clock.Advance(std::chrono::seconds(99));
  rounds->Tick(host);  // two of three, before half of the round's time: not yet
  EXPECT_EQ(decoder->scale(), 0.0f);
  host.clock.Advance(std::chrono::seconds(2));
  rounds->Tick(host);
  EXPECT_EQ(decoder->scale(), 70.0f);
  EXPECT_EQ(host.pushed.size(), 3u) << "c, which never reported, gets it too";
  EXPECT_FALSE(TernGradRounds::Create("terngrad(bucket=64)", 1000, 2).ok());
}

}  // namespace
}  // namespace fedlgc::modes
