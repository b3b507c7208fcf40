// A population's links (sim/link_profile.h): values drawn per client with the distribution
// they name (checked by Monte Carlo over thousands of clients), the same for the same seed;
// traces read row by row; the availability schedule down for the share of the time it
// says; and refusals that name what is wrong.
#include "sim/link_profile.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <vector>

#include "gtest/gtest.h"

namespace fedlgc::sim {
namespace {

TEST(LinkProfile, ConstantsAreEveryClientsAndTheRestIsALinkSpec) {
  auto p = LinkProfile::Parse("rate=10mbit,delay=50ms,cut=0.05,cut_after=950k,offline=0.2");
  ASSERT_TRUE(p.ok()) << p.status();
  for (uint32_t i : {0u, 7u}) {
    const LinkSpec s = p->Draw(i, "client", 1);
    EXPECT_DOUBLE_EQ(s.rate_bytes_per_s, 10e6 / 8);
    EXPECT_DOUBLE_EQ(s.delay_s, 0.05);
    EXPECT_DOUBLE_EQ(s.cut_per_mib, 0.05);
    EXPECT_EQ(s.cut_after_bytes, 950u * 1024);
    EXPECT_DOUBLE_EQ(s.offline_share, 0.2);
  }
  EXPECT_FALSE(p->trivial());
  EXPECT_TRUE(LinkProfile::Parse("").value().trivial());
  EXPECT_TRUE(LinkProfile::Parse("none").value().trivial());
}

TEST(LinkProfile, LognormalRatesHaveTheirMedianAndSpread) {
  auto p = LinkProfile::Parse("rate=lognormal(median=5mbit,sigma=1),delay=uniform(20ms,200ms)");
  ASSERT_TRUE(p.ok()) << p.status();
  const int n = 4000;
  std::vector<double> logs, delays;
  for (int i = 0; i < n; ++i) {
    const LinkSpec s = p->Draw(static_cast<uint32_t>(i), "c", 3);
    logs.push_back(std::log(s.rate_bytes_per_s * 8 / 5e6));
    delays.push_back(s.delay_s);
    EXPECT_GE(s.delay_s, 0.02);
    EXPECT_LE(s.delay_s, 0.2);
  }
  double mean = 0, var = 0;
  for (double x : logs) mean += x / n;
  for (double x : logs) var += (x - mean) * (x - mean) / (n - 1);
  // log(rate / median) is standard normal times sigma: its mean is 0 within 4 standard
  // errors (sigma / sqrt(n) = 0.016), its sd 1 within 4 of its standard errors (~0.011).
  EXPECT_NEAR(mean, 0, 4 / std::sqrt(n));
  EXPECT_NEAR(std::sqrt(var), 1, 4 / std::sqrt(2.0 * n));
  // A uniform's mean (0.11 s), within 4 standard errors (0.052 / sqrt(n)).
  double dmean = 0;
  for (double d : delays) dmean += d / n;
  EXPECT_NEAR(dmean, 0.11, 4 * 0.052 / std::sqrt(n));
  // The same seed, the same links; another seed, others.
  EXPECT_EQ(p->Draw(5, "c", 3).rate_bytes_per_s, p->Draw(5, "c", 3).rate_bytes_per_s);
  EXPECT_NE(p->Draw(5, "c", 3).rate_bytes_per_s, p->Draw(5, "c", 4).rate_bytes_per_s);
  EXPECT_NE(p->Draw(5, "c", 3).rate_bytes_per_s, p->Draw(6, "c", 3).rate_bytes_per_s);
}

TEST(LinkProfile, BadProfilesSayWhatIsWrong) {
  for (const char* bad :
       {"rate=lognormal(median=5mbit)", "rate=lognormal(5mbit,1)", "rate=uniform(2mbit,1mbit)",
        "rate=normal(1mbit,2mbit)", "delay=uniform(20ms)", "rate=5", "offline=0.99", "cut=2",
        "rate", "speed=1mbit", "rate=lognormal(median=5mbit,sigma=1"}) {
    auto p = LinkProfile::Parse(bad);
    EXPECT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(p.status().message().find("link"), std::string_view::npos) << p.status();
  }
}

std::string WriteTrace(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(LinkProfile, ATraceGivesEachClientItsRowAndTheRestTheStarRow) {
  const std::string path =
      WriteTrace("trace.csv",
                 "# rates of a measured fleet\nclient,rate,delay,offline,down\n"
                 "client-0,1mbit,100ms,,30-90;200-260\nclient-1,40mbit,20ms,0.1,\n*,5mbit,,,\n");
  auto p = LinkProfile::Parse("trace:" + path);
  ASSERT_TRUE(p.ok()) << p.status();
  const LinkSpec a = p->Draw(0, "client-0", 1);
  EXPECT_DOUBLE_EQ(a.rate_bytes_per_s, 1e6 / 8);
  EXPECT_DOUBLE_EQ(a.delay_s, 0.1);
  ASSERT_EQ(a.down.size(), 2u);
  EXPECT_EQ(a.down[1], std::make_pair(200.0, 260.0));
  EXPECT_DOUBLE_EQ(p->Draw(1, "client-1", 1).offline_share, 0.1);
  EXPECT_DOUBLE_EQ(p->Draw(9, "client-9", 1).rate_bytes_per_s, 5e6 / 8);

  for (const std::string& bad :
       {std::string("rate\n1mbit\n"), std::string("client,speed\nc,1\n"),
        std::string("client,rate\nc,1mbit,2\n"), std::string("client,down\nc,90-30\n"),
        std::string("client,rate\nc,1mbit\nc,2mbit\n"), std::string("client,rate\n")}) {
    auto q = LinkProfile::Parse("trace:" + WriteTrace("bad.csv", bad));
    EXPECT_FALSE(q.ok()) << bad;
    EXPECT_NE(q.status().message().find("bad.csv"), std::string_view::npos) << q.status();
  }
  EXPECT_EQ(LinkProfile::Parse("trace:/nonexistent.csv").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(LinkSchedule, DownForItsShareInStretchesOfItsMeanAfterJoining) {
  LinkSpec s;
  s.join_s = 30;
  s.offline_share = 0.2;
  s.offline_mean_s = 60;
  // Over a population of 200 links, each watched for 2 hours in 1 s steps.
  double down = 0, samples = 0;
  int stretches = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    LinkSchedule schedule(s, seed);
    EXPECT_TRUE(schedule.ever_down());
    EXPECT_FALSE(schedule.Up(0));
    EXPECT_FALSE(schedule.Up(29.9));
    bool was_up = true;
    for (double t = 30; t < 30 + 7200; t += 1) {
      const bool up = schedule.Up(t);
      down += !up;
      samples += 1;
      stretches += was_up && !up;
      was_up = up;
    }
  }
  // 200 x 7200 s: the share within 0.02 (each link's share over 2 h has an sd of about
  // 0.06 at these stretch lengths; over 200 links about 0.004).
  EXPECT_NEAR(down / samples, 0.2, 0.02);
  // Mean stretch length within 15% of 60 s (about 5,000 stretches).
  EXPECT_NEAR(down / stretches, 60, 9);
  // Answers do not depend on the order of the questions.
  LinkSchedule a(s, 9), b(s, 9);
  std::vector<bool> forward, backward(100);
  for (int t = 0; t < 100; ++t) forward.push_back(a.Up(100.0 * t));
  for (int t = 99; t >= 0; --t) backward[t] = b.Up(100.0 * t);
  EXPECT_EQ(forward, backward);
  // Explicit windows, and a link that never goes down.
  LinkSpec w;
  w.down = {{10, 20}};
  LinkSchedule windows(w, 1);
  EXPECT_TRUE(windows.Up(9.9));
  EXPECT_FALSE(windows.Up(10));
  EXPECT_FALSE(windows.Up(19.9));
  EXPECT_TRUE(windows.Up(20));
  EXPECT_FALSE(LinkSchedule(LinkSpec{}, 1).ever_down());
}

}  // namespace
}  // namespace fedlgc::sim
