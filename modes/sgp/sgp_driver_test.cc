// SGP at the coordinator without gRPC: the exponential graph's peers, the relay's
// delivery rules, the mailboxes' bytes, and the driver's state across a restart.
#include "modes/sgp/sgp_driver.h"

#include <cmath>
#include <filesystem>

#include "gtest/gtest.h"
#include "modes/sgp/inbox.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {
namespace {


constexpr size_t kDim = 64;

std::string TempDir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/modes-" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

TEST(Sgp, DeliversCompleteSharesToLiveReceiversAndTheMeanIsTheRunsModel) {
  const std::string dir = TempDir("sgp");
  auto d = SgpDriver::Create(SgpOptions{}, kDim, dir, 0).value();
  d->BeginRound(1, {"c", "a", "b", "d"});
  EXPECT_EQ(d->PeerOf("a"), "b");  // round 1: +1 in id order
  EXPECT_EQ(d->PeerOf("d"), "a");
  const std::vector<float> ref(kDim, 1.0f);
  SgpDriver::Shares shares;
  for (auto [c, v] : {std::pair{"a", 0.0f}, {"b", 1.0f}, {"c", 2.0f}, {"d", 3.0f}}) {
    auto& s = shares[c];
    s.values.assign(kDim, v);  // decoded p (x - w ref)
    s.weight_share = 0.5;
    s.complete = std::string(c) != "c";
  }
  // b is gone at commit: a's share to b is not delivered; c's share is incomplete.
  const auto out = d->Commit(1, shares, {"a", "c", "d"}, ref);
  EXPECT_EQ(out.delivered, (std::set<std::string>{"b", "d"}));  // b->c, d->a
  // Full shares: value + 0.5 * 1; the mean of the complete ones (a, b, d) de-biased.
  EXPECT_FLOAT_EQ(out.model[0], ((0.5f + 1.5f + 3.5f) / 1.5f));
  EXPECT_GT(out.consensus_distance, 0);
  auto blob = d->Blob("c", "inbox", 1);
  ASSERT_TRUE(blob.ok()) << blob.status();
  auto inbox = DecodeInbox((*blob)->bytes, kDim);
  ASSERT_TRUE(inbox.ok()) << inbox.status();
  EXPECT_EQ(inbox->w, 0.5);
  EXPECT_EQ(inbox->x[0], 1.5f);
  EXPECT_TRUE(absl::IsNotFound(d->Blob("b", "inbox", 1).status()));
  protos::RoundStart s;
  d->DecorateRoundStart("c", &s);
  EXPECT_EQ(s.sgp().share(), 0.5);
  ASSERT_EQ(s.sgp().inbox_rounds_size(), 1);
  // Mail survives a restart, and goes once it is applied.
  ASSERT_TRUE(d->Save(1).ok());
  auto back = SgpDriver::Create(SgpOptions{}, kDim, dir, 1).value();
  EXPECT_EQ(back->MailTotals(), d->MailTotals());
  EXPECT_DOUBLE_EQ(back->MailTotals().second, 1.0);
  back->InboxApplied("c", 1);
  EXPECT_EQ(back->Inbox("c", 1), nullptr);
  EXPECT_DOUBLE_EQ(back->MailTotals().second, 0.5);
  // Alone, a client keeps everything.
  back->BeginRound(2, {"a"});
  EXPECT_TRUE(back->Senders().empty());
  protos::RoundStart alone;
  back->DecorateRoundStart("a", &alone);
  EXPECT_EQ(alone.sgp().share(), 1.0);
}

TEST(SgpInbox, RoundTripsAndRefusesAWrongSizeOrWeight) {
  const std::vector<float> x = {1.0f, -2.5f, 3.25f};
  auto in = DecodeInbox(EncodeInbox(0.75, x), x.size());
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->w, 0.75);
  EXPECT_EQ(in->x, x);
  EXPECT_TRUE(absl::IsDataLoss(DecodeInbox(EncodeInbox(0.75, x), x.size() + 1).status()));
  for (double bad : {0.0, -1.0, std::nan("")}) {
    EXPECT_TRUE(absl::IsDataLoss(DecodeInbox(EncodeInbox(bad, x), x.size()).status())) << bad;
  }
}

}  // namespace
}  // namespace fedlgc::modes
