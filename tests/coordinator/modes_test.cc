// The coordinator's side of LSGD and SGP without gRPC: the engine's separate mode and
// uploader set, leader election and groups, pulls in RoundStart, the push-sum relay's
// delivery rules, and both drivers' state across a restart.
#include <filesystem>

#include "codecs/registry.h"
#include "coordinator/lsgd_driver.h"
#include "coordinator/round_engine.h"
#include "coordinator/sgp_driver.h"
#include "core/mixing.h"
#include "gtest/gtest.h"

namespace fedlgc::coordinator {
namespace {

constexpr size_t kDim = 64;

std::string TempDir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/modes-" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

std::vector<std::string> Frames(const std::vector<float>& x, const std::string& spec = "fp32") {
  auto codec = codecs::MakeCodec(spec).value();
  std::vector<codecs::Frame> frames;
  codecs::EncodeOptions o;
  o.max_frame_bytes = 128;  // several chunks
  EXPECT_TRUE(codec->Encode(x, o, &frames).ok());
  std::vector<std::string> out;
  for (auto& f : frames) out.push_back(std::move(f.bytes));
  return out;
}

ChunkIn Chunk(const std::string& client, const std::vector<std::string>& frames, uint32_t i) {
  ChunkIn c;
  c.client_id = client;
  c.round = 1;
  c.update_id = 9;
  c.chunk_index = i;
  c.chunk_count = static_cast<uint32_t>(frames.size());
  c.num_samples = 10;
  c.frame = frames[i];
  return c;
}

std::unique_ptr<RoundEngine> Engine(const std::vector<std::string>& clients) {
  EngineState s;
  s.model.assign(kDim, 0.5f);
  auto e = std::make_unique<RoundEngine>(EngineOptions{}, s);
  for (const auto& c : clients) e->Register(c, 10);
  return e;
}

TEST(SeparateMode, KeepsEachClientsUpdateApartAndWaitsOnlyForUploaders) {
  auto e = Engine({"a", "b", "c"});
  ASSERT_TRUE(
      e->OpenRound({"a", "b", "c"}, Clock::now() + std::chrono::seconds(9), {.separate = true})
          .ok());
  e->SetUploaders({"a", "b"});
  std::vector<float> xa(kDim, 1.0f), xb(kDim, -2.0f);
  const auto fa = Frames(xa), fb = Frames(xb);
  ASSERT_GT(fa.size(), 1u);
  // c is a participant but not an uploader: refused.
  EXPECT_EQ(e->AcceptChunk(Chunk("c", fa, 0)).reason, "not_participant");
  for (uint32_t i = 0; i < fa.size(); ++i)
    ASSERT_TRUE(e->AcceptChunk(Chunk("a", fa, i)).status.ok());
  EXPECT_FALSE(e->AllComplete());
  ASSERT_TRUE(e->AcceptChunk(Chunk("b", fb, 0)).status.ok());
  auto sep = e->Separate();
  EXPECT_TRUE(sep.at("a").complete);
  EXPECT_EQ(sep.at("a").values, xa);
  EXPECT_FALSE(sep.at("b").complete);
  EXPECT_EQ(sep.at("b").values[0], -2.0f);
  EXPECT_EQ(sep.at("b").values[kDim - 1], 0.0f);  // not arrived yet
  e->SetUploaders({"a"});                         // b's leadership went elsewhere
  EXPECT_TRUE(e->AllComplete());
  std::vector<float> next(kDim, 3.0f);
  const CommitResult r = e->CommitModel(next, {"a"});
  EXPECT_EQ(r.participants, 1);
  EXPECT_EQ(r.stragglers, 1);  // b held a partial update that did not count
  EXPECT_EQ(r.receipts.at("a").counted.size(), fa.size());
  EXPECT_TRUE(r.receipts.at("b").counted.empty());
  EXPECT_EQ(e->ModelVector(), next);
}

TEST(SeparateMode, GossipChunksCarryAValidWeightAndTheRoundsReference) {
  auto e = Engine({"a", "b"});
  ASSERT_TRUE(
      e->OpenRound({"a", "b"}, Clock::now() + std::chrono::seconds(9), {.gossip = true}).ok());
  const auto f = Frames(std::vector<float>(kDim, 1.0f));
  ChunkIn c = Chunk("a", f, 0);
  EXPECT_EQ(e->AcceptChunk(c).reason, "malformed");  // through UploadUpdate: refused
  c.gossip = true;
  for (double bad : {0.0, -0.5, std::nan(""), 1e9}) {
    c.weight_share = bad;
    EXPECT_EQ(e->AcceptChunk(c).reason, "nonfinite") << bad;
  }
  c.weight_share = 0.5;
  c.reference_version = 3;  // the engine serves version 0
  EXPECT_EQ(e->AcceptChunk(c).reason, "malformed");
  c.reference_version = 0;
  ASSERT_TRUE(e->AcceptChunk(c).status.ok());
  ChunkIn d = Chunk("a", f, 1);
  d.gossip = true;
  d.weight_share = 0.25;  // differs from the first chunk
  EXPECT_FALSE(e->AcceptChunk(d).status.ok());
  EXPECT_EQ(e->Separate().at("a").weight_share, 0.5);
}

protos::ProgressReport Report(uint64_t round, double loss, double rtt = 0) {
  protos::ProgressReport r;
  r.set_round(round);
  r.set_loss(loss);
  r.set_rtt_ms(rtt);
  return r;
}

TEST(Lsgd, ElectsTheArgminPerGroupAndGloballyAndPullsTheOthers) {
  LsgdOptions o;
  o.groups = {{"a", "b"}, {"c", "d"}};
  auto d = LsgdDriver::Create(o, std::vector<float>(kDim, 0.0f), TempDir("elect"), 0).value();
  d->BeginRound(1, {"a", "b", "c", "d"});
  EXPECT_FALSE(d->AcceptReport("a", Report(1, std::nan(""))).ok());
  EXPECT_FALSE(d->AcceptReport("a", Report(2, 1.0)).ok());
  EXPECT_FALSE(d->AcceptReport("x", Report(1, 1.0)).ok());
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
  std::map<std::string, RoundEngine::SeparateUpdate> up;
  up["b"].values.assign(kDim, 1.0f);
  up["b"].complete = true;
  up["d"].values.assign(kDim, 2.0f);
  std::set<std::string> counted;
  const std::vector<float> model = d->Commit(1, e, up, &counted);
  EXPECT_EQ(counted, std::set<std::string>{"b"});
  // The run's model is the reference of the best client's group, which did not move.
  EXPECT_EQ(model, std::vector<float>(kDim, 0.0f));
  auto blob = d->Blob("group:0", 1);
  ASSERT_NE(blob, nullptr);
  EXPECT_EQ(blob->bytes.size(), kDim * 4);
  EXPECT_EQ(d->Blob("group:1", 1), nullptr);  // still version 0
  EXPECT_EQ(d->Blob("group:9", 0), nullptr);
  // Next round: a pulls towards its group's reference; b (the leader) does not; c and d
  // have no pull (their leader's model did not arrive); no global pull (local round).
  protos::RoundStart sa, sb, sc;
  d->Decorate("a", &sa);
  d->Decorate("b", &sb);
  d->Decorate("c", &sc);
  ASSERT_EQ(sa.pulls_size(), 1);
  EXPECT_EQ(sa.pulls(0).blob(), "group:0");
  EXPECT_EQ(sa.pulls(0).version(), 1u);
  EXPECT_FLOAT_EQ(sa.pulls(0).strength(), 0.1f);
  EXPECT_EQ(sb.pulls_size(), 0);
  EXPECT_EQ(sc.pulls_size(), 0);

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
  d->Decorate("d", &sd);
  d->Decorate("a", &sa2);
  ASSERT_EQ(sd.pulls_size(), 1);  // d led its group: only the global pull
  EXPECT_EQ(sd.pulls(0).blob(), "group:0");
  EXPECT_EQ(sa2.pulls_size(), 0);  // the global leader pulls towards nobody
  sb.Clear();
  d->Decorate("b", &sb);
  ASSERT_EQ(sb.pulls_size(), 2);  // its group's leader, then the global leader
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
  std::map<std::string, RoundEngine::SeparateUpdate> up;
  up[e.leaders.at(0)].values.assign(kDim, 1.0f);
  up[e.leaders.at(0)].complete = true;
  std::set<std::string> counted;
  d->Commit(1, e, up, &counted);
  ASSERT_TRUE(d->Save(1).ok());
  auto back = LsgdDriver::Create(o, std::vector<float>(kDim, 0.0f), dir, 1).value();
  EXPECT_EQ(back->Groups(), d->Groups());
  ASSERT_NE(back->Blob("group:0", 1), nullptr);
  EXPECT_EQ(back->Blob("group:0", 1)->bytes, d->Blob("group:0", 1)->bytes);
  protos::RoundStart s1, s2;
  d->Decorate("c", &s1);
  back->Decorate("c", &s2);
  EXPECT_EQ(s1.SerializeAsString(), s2.SerializeAsString());
  // A newcomer joins the group whose latency is nearest its own.
  back->BeginRound(2, {"a", "b", "c", "d", "z"});
  ASSERT_TRUE(back->AcceptReport("z", Report(2, 0.5, 42.0)).ok());
  back->Elect(2, {"z"}, {});
  EXPECT_EQ(back->Groups().at("z"), back->Groups().at("b"));
}

TEST(Sgp, DeliversCompleteSharesToLiveReceiversAndTheMeanIsTheRunsModel) {
  const std::string dir = TempDir("sgp");
  auto d = SgpDriver::Create(true, 0, kDim, dir, 0).value();
  d->BeginRound(1, {"c", "a", "b", "d"});
  EXPECT_EQ(d->PeerOf("a"), "b");  // round 1: +1 in id order
  EXPECT_EQ(d->PeerOf("d"), "a");
  const std::vector<float> ref(kDim, 1.0f);
  std::map<std::string, RoundEngine::SeparateUpdate> shares;
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
  auto inbox = d->Inbox("c", 1);
  ASSERT_NE(inbox, nullptr);
  double w;
  std::memcpy(&w, inbox->bytes.data(), 8);
  float x0;
  std::memcpy(&x0, inbox->bytes.data() + 8, 4);
  EXPECT_EQ(w, 0.5);
  EXPECT_EQ(x0, 1.5f);
  EXPECT_EQ(d->Inbox("b", 1), nullptr);
  protos::RoundStart s;
  d->Decorate("c", &s);
  EXPECT_EQ(s.sgp_share(), 0.5);
  ASSERT_EQ(s.sgp_inbox_rounds_size(), 1);
  // Mail survives a restart, and goes once it is applied.
  ASSERT_TRUE(d->Save(1).ok());
  auto back = SgpDriver::Create(true, 0, kDim, dir, 1).value();
  EXPECT_EQ(back->MailTotals(), d->MailTotals());
  EXPECT_DOUBLE_EQ(back->MailTotals().second, 1.0);
  back->InboxApplied("c", 1);
  EXPECT_EQ(back->Inbox("c", 1), nullptr);
  EXPECT_DOUBLE_EQ(back->MailTotals().second, 0.5);
  // Alone, a client keeps everything.
  back->BeginRound(2, {"a"});
  EXPECT_TRUE(back->Senders().empty());
  protos::RoundStart alone;
  back->Decorate("a", &alone);
  EXPECT_EQ(alone.sgp_share(), 1.0);
}

}  // namespace
}  // namespace fedlgc::coordinator
