// The per-client call limits, without gRPC: a ticket without a context stands for a call.
#include "coordinator/stream_registry.h"

#include <gtest/gtest.h>

#include "tests/core/fake_clock.h"

namespace fedlgc::coordinator {
namespace {

TEST(StreamRegistry, CapsCallsPerClientAndInAll) {
  StreamLimits limits;
  limits.per_client = 2;
  limits.total = 3;
  size_t observed = 0;
  StreamRegistry registry(limits, core::Clock::Real(), /*watchdog=*/false,
                          [&](size_t n) { observed = n; });
  auto a1 = registry.Open("a", nullptr);
  auto a2 = registry.Open("a", nullptr);
  ASSERT_TRUE(a1.ok() && a2.ok());
  auto a3 = registry.Open("a", nullptr);
  EXPECT_EQ(a3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(a3.status().message().find("at most 2"), std::string::npos);
  auto b1 = registry.Open("b", nullptr);
  ASSERT_TRUE(b1.ok());
  EXPECT_EQ(observed, 3u);
  auto c1 = registry.Open("c", nullptr);  // the coordinator's cap
  EXPECT_EQ(c1.status().code(), absl::StatusCode::kResourceExhausted);
  (*a1)->Done();
  (*a1)->Done();  // twice: counted once
  EXPECT_EQ(registry.open_for("a"), 1u);
  EXPECT_EQ(registry.open(), 2u);
  EXPECT_TRUE(registry.Open("a", nullptr).ok());
  EXPECT_EQ(observed, 3u);
}

TEST(StreamRegistry, OnlyCallsWithoutProgressAreIdle) {
  StreamLimits limits;
  limits.idle_timeout_s = 10;
  core::FakeClock clock;
  StreamRegistry registry(limits, &clock, /*watchdog=*/false);
  auto t = registry.Open("a", nullptr);
  ASSERT_TRUE(t.ok());
  // Not idle yet; a call whose context is gone (done) is never cancelled.
  clock.Advance(std::chrono::seconds(5));
  EXPECT_EQ(registry.CancelIdle(), 0);
  (*t)->Done();
  clock.Advance(std::chrono::seconds(55));
  EXPECT_EQ(registry.CancelIdle(), 0);
  EXPECT_EQ(registry.open(), 0u);
  EXPECT_FALSE((*t)->idle_cancelled());
}

TEST(StreamRegistry, LimitsAreValidated) {
  StreamLimits l;
  EXPECT_TRUE(l.Validate().ok());
  l.per_client = 0;
  EXPECT_FALSE(l.Validate().ok());
  l.per_client = 10;
  l.total = 5;
  EXPECT_FALSE(l.Validate().ok());
  l.total = 50;
  l.idle_timeout_s = 0;
  EXPECT_FALSE(l.Validate().ok());
}

}  // namespace
}  // namespace fedlgc::coordinator
