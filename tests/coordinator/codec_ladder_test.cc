// The codec ladder and the link book it reads: which rung a measured link gets for its
// deadline (at the boundaries of the rule), what the ladder refuses, and how transfers
// move a client's estimate.
#include "coordinator/codec_ladder.h"

#include <chrono>

#include "gtest/gtest.h"

namespace fedlgc::coordinator {
namespace {

constexpr uint64_t kDim = 100'000;
const std::vector<std::string> kRungs = {"fp32", "qsgd(bits=8)", "qsgd(bits=4)",
                                         "topk(ratio=0.01,values=qsgd(bits=8))"};

std::shared_ptr<CodecLadder> Ladder(const LinkBook* links) {
  auto ladder = CodecLadder::Create(kRungs, kDim, nullptr, links);
  EXPECT_TRUE(ladder.ok()) << ladder.status();
  return *ladder;
}

TEST(CodecLadder, RungsCostTheirFramesDensestFirst) {
  LinkBook links;
  auto ladder = Ladder(&links);
  ASSERT_EQ(ladder->size(), 4u);
  const auto& r = ladder->rungs();
  // fp32 is 4 bytes a coordinate plus a header; 8-bit QSGD about a quarter of that, 4-bit
  // an eighth; 1% top-k with 8-bit values far less.
  EXPECT_GE(r[0].bytes, 4 * kDim);
  EXPECT_LT(r[0].bytes, 4 * kDim + 256);
  EXPECT_NEAR(static_cast<double>(r[1].bytes) / r[0].bytes, 0.25, 0.01);
  EXPECT_NEAR(static_cast<double>(r[2].bytes) / r[0].bytes, 0.125, 0.01);
  EXPECT_LT(r[3].bytes, r[2].bytes / 5);
  EXPECT_EQ(ladder->Specs(), kRungs);
  EXPECT_EQ(ladder->RungOf("qsgd(bits=4)"), 2u);
  EXPECT_EQ(ladder->RungOf("fp16"), 4u);
}

TEST(CodecLadder, RefusesWhatItCannotClimb) {
  LinkBook links;
  auto refused = [&](const std::vector<std::string>& specs, const std::string& why) {
    auto l = CodecLadder::Create(specs, kDim, nullptr, &links);
    ASSERT_FALSE(l.ok()) << specs.front();
    EXPECT_TRUE(absl::IsInvalidArgument(l.status()));
    EXPECT_NE(std::string(l.status().message()).find(why), std::string::npos) << l.status();
  };
  refused({"fp32"}, "two codecs or more");
  refused({"qsgd(bits=4)", "qsgd(bits=8)"}, "densest first");
  refused({"qsgd(bits=8)", "qsgd(bits=8)"}, "densest first");
  refused({"fp32", "nosuchcodec(x=1)"}, "nosuchcodec");
  refused({"fp32", "randk(ratio=0.1,seed=round)"}, "every round");
  refused({"fp32", "terngrad(shared=1)"}, "every round");
}

TEST(CodecLadder, TheDensestRungThatFitsTheDeadline) {
  LinkBook links;
  auto ladder = Ladder(&links);
  const auto& r = ladder->rungs();
  const double window = 10;
  const double budget = CodecLadder::kFill * window;
  LinkEstimate link;
  // Nothing measured: the cheapest.
  EXPECT_EQ(ladder->RungFor(link, window), 3u);
  // Just fast enough for fp32, and just too slow.
  link.up_bps = r[0].bytes / budget * 1.000001;
  EXPECT_EQ(ladder->RungFor(link, window), 0u);
  link.up_bps = r[0].bytes / budget * 0.999;
  EXPECT_EQ(ladder->RungFor(link, window), 1u);
  // Time busy before the upload comes off the budget.
  link.up_bps = r[1].bytes / (budget - 2) * 1.000001;
  link.busy_seconds = 2;
  EXPECT_EQ(ladder->RungFor(link, window), 1u);
  link.busy_seconds = 2.01;
  EXPECT_EQ(ladder->RungFor(link, window), 2u);
  // Busy past the deadline: the cheapest, whatever the rate.
  link.up_bps = 1e12;
  link.busy_seconds = window;
  EXPECT_EQ(ladder->RungFor(link, window), 3u);
  // Only a download measured: its rate stands for the uplink.
  LinkEstimate down;
  down.down_bps = r[2].bytes / budget * 1.000001;
  EXPECT_EQ(ladder->RungFor(down, window), 2u);
  // A longer deadline lets the same link send more.
  EXPECT_EQ(ladder->RungFor(down, 10 * window), 0u);
}

TEST(CodecLadder, AClientWhoseLinkDropsMovesDownInItsNextRound) {
  LinkBook links;
  auto ladder = Ladder(&links);
  const auto window = std::chrono::seconds(10);
  EXPECT_EQ(ladder->Choose("c", window), kRungs[3]);  // not measured yet
  // A 4 MB/s download: fp32 (400 kB) fits 8 s easily.
  links.RecordDownload("c", 4'000'000, 1.0);
  EXPECT_EQ(ladder->Choose("c", window), kRungs[0]);
  // Its upload measures 50 kB/s after 1 s busy: 7 s leave 350 kB, which 8-bit QSGD
  // (100 kB) fits and fp32 does not.
  links.RecordBusy("c", 1.0);
  links.RecordUpload("c", 400'000, 8.0);
  EXPECT_DOUBLE_EQ(links.Estimate("c").up_bps, 50'000);
  EXPECT_EQ(ladder->Choose("c", window), kRungs[1]);
  // The link drops to 5 kB/s mid-upload: at once, 4-bit QSGD (50 kB) no longer fits.
  links.NoteUploadSoFar("c", 150'000, 30.0);
  EXPECT_DOUBLE_EQ(links.Estimate("c").up_bps, 5'000);
  EXPECT_EQ(ladder->Choose("c", window), kRungs[3]);
  // It recovers: the estimate climbs halfway each time, and the rungs with it (a faster
  // upload in progress never raises it).
  links.NoteUploadSoFar("c", 1'000'000, 1.0);
  EXPECT_DOUBLE_EQ(links.Estimate("c").up_bps, 5'000);
  links.RecordUpload("c", 60'000, 1.0);  // 60 kB/s
  EXPECT_DOUBLE_EQ(links.Estimate("c").up_bps, 32'500);
  EXPECT_EQ(ladder->Choose("c", window), kRungs[1]);
  links.RecordUpload("c", 50'000, 0.1);  // 500 kB/s
  EXPECT_DOUBLE_EQ(links.Estimate("c").up_bps, 266'250);
  EXPECT_EQ(ladder->Choose("c", window), kRungs[0]);
  // The download is slower than the upload now: the slower one is planned with.
  links.RecordDownload("c", 40'000, 1.0);
  EXPECT_DOUBLE_EQ(links.Estimate("c").PlanningUpBps(), 40'000);
  EXPECT_EQ(ladder->Choose("c", window), kRungs[1]);
}

TEST(CodecLadder, AClientNotMeasuredYetIsPlannedAsATypicalOne) {
  LinkBook links;
  auto ladder = Ladder(&links);
  const auto window = std::chrono::seconds(10);
  EXPECT_EQ(ladder->Choose("new", window), kRungs[3]);  // nobody measured: the cheapest
  // Four clients measured at 40, 60, 300 and 1000 kB/s: three in four reach 60 kB/s (the
  // 25th percentile of four is the second slowest), and they were busy 1 s at the median.
  const double rates[] = {40'000, 60'000, 300'000, 1'000'000};
  const char* names[] = {"c0", "c1", "c2", "c3"};
  for (int i = 0; i < 4; ++i) {
    const std::string c = names[i];
    links.RecordDownload(c, 1'000'000, 1'000'000 / rates[i]);
    links.RecordBusy(c, i < 2 ? 1.0 : 3.0);
  }
  const LinkEstimate typical = links.Typical();
  EXPECT_DOUBLE_EQ(typical.up_bps, 60'000);
  EXPECT_DOUBLE_EQ(typical.busy_seconds, 1.0);
  // 7 s at 60 kB/s: 420 kB, which fp32 (400 kB) fits.
  EXPECT_EQ(ladder->Choose("new", window), kRungs[0]);
  // Its own measurement, once there is one, decides.
  links.RecordDownload("new", 100'000, 20.0);  // 5 kB/s
  EXPECT_EQ(ladder->Choose("new", window), kRungs[3]);
}

TEST(LinkBook, TooFewBytesMeasureNothingAndBusyTimesBlend) {
  LinkBook links;
  links.RecordUpload("c", LinkBook::kMinMeasured - 1, 0.5);
  links.RecordDownload("c", LinkBook::kMinMeasured - 1, 0.5);
  links.NoteUploadSoFar("c", 4 * LinkBook::kMinMeasured - 4, 0.5);
  links.RecordBusy("c", 3.0);
  LinkEstimate e = links.Estimate("c");
  EXPECT_EQ(e.up_bps, 0);
  EXPECT_EQ(e.down_bps, 0);
  EXPECT_TRUE(e.busy_known);
  EXPECT_DOUBLE_EQ(e.busy_seconds, 3.0);
  links.RecordUpload("c", LinkBook::kMinMeasured, 0.5);
  links.RecordBusy("c", 1.0);
  e = links.Estimate("c");
  EXPECT_DOUBLE_EQ(e.up_bps, 2.0 * LinkBook::kMinMeasured);
  EXPECT_DOUBLE_EQ(e.busy_seconds, 2.0);  // half the last, half what was known
  // A transfer of no time, or a negative busy time, measures nothing.
  links.RecordUpload("c", 1 << 20, 0);
  links.RecordBusy("c", -1);
  EXPECT_DOUBLE_EQ(links.Estimate("c").up_bps, 2.0 * LinkBook::kMinMeasured);
  EXPECT_EQ(links.Estimate("c").busy_seconds, 2.0);
  EXPECT_EQ(links.All().size(), 1u);
  EXPECT_EQ(links.Estimate("other").PlanningUpBps(), 0);
}

}  // namespace
}  // namespace fedlgc::coordinator
