// The round engine's parts on their own: what rounds ask (RoundTerms: the plan's codec by
// round, a driver's override, a codec ladder's choice, seeds), who belongs (Roster), and
// the open round's data and admission rules (live_round.h).
#include <set>
#include <string>

#include "codecs/registry.h"
#include "coordinator/collectors.h"
#include "coordinator/live_round.h"
#include "coordinator/roster.h"
#include "coordinator/round_terms.h"
#include "gtest/gtest.h"

namespace fedlgc::coordinator {
namespace {

RoundPlan WarmPlan() {
  RoundPlan plan;
  plan.codec = "qsgd(bits=4)";
  plan.warmup_codecs = {"fp32"};
  return plan;
}

// Answers by the window a client has: a denser codec for a long one.
class WindowChooser : public CodecChooser {
 public:
  std::string Choose(const std::string&, Clock::duration window) const override {
    return window > std::chrono::seconds(10) ? "fp32" : "qsgd(bits=2)";
  }
  std::vector<std::string> Specs() const override { return {"fp32", "qsgd(bits=2)"}; }
};

TEST(RoundTerms, ThePlansCodecByRoundUntilADriverOverridesIt) {
  RoundTerms terms(WarmPlan(), 0.25, 7, nullptr, nullptr);
  const RoundCodec warm = terms.ForRound(1);
  EXPECT_EQ(warm.spec, "fp32");
  ASSERT_NE(warm.decoder, nullptr);
  EXPECT_EQ(warm.decoder, terms.DecoderOf("fp32"));
  EXPECT_EQ(terms.ForRound(2).spec, "qsgd(bits=4)");
  EXPECT_EQ(terms.DecoderOf("topk(ratio=0.1)"), nullptr);  // not the plan's

  std::shared_ptr<const codecs::Codec> own = codecs::MakeCodec("qsgd(bits=8)").value();
  terms.UseCodec("qsgd(bits=8)", own);
  const RoundCodec over = terms.ForRound(2);
  EXPECT_EQ(over.spec, "qsgd(bits=8)");
  EXPECT_EQ(over.decoder, own.get());
  EXPECT_EQ(over.decoder_ref, own);  // kept alive while chunks decode
  // Metric labels keep the plan's spec.
  EXPECT_EQ(terms.MetricLabel(2, over.spec), "qsgd(bits=4)");
  terms.UseCodec("", own);
  EXPECT_EQ(terms.ForRound(2).spec, "qsgd(bits=4)");
  EXPECT_EQ(terms.ForRound(2).decoder_ref, nullptr);
}

TEST(RoundTerms, TrainingOverrideAndBack) {
  RoundTerms terms(WarmPlan(), 0.25, 7, nullptr, nullptr);
  EXPECT_EQ(terms.ForRound(1).training.local_epochs, 1u);
  terms.UseTraining(LocalTraining{3, 0, 0.1f, 16});
  EXPECT_EQ(terms.ForRound(1).training.local_epochs, 3u);
  EXPECT_EQ(terms.ForRound(1).training.batch_size, 16u);
  terms.UseTraining(std::nullopt);
  EXPECT_EQ(terms.ForRound(1).training.batch_size, 32u);
}

TEST(RoundTerms, ALadderChoosesPerClientUnlessADriverOverrides) {
  RoundPlan plan;
  plan.codec = "fp32";
  RoundTerms terms(plan, 1, 7, std::make_shared<WindowChooser>(), nullptr);
  EXPECT_EQ(terms.CodecOf("fp32", "a", std::chrono::seconds(60)), "fp32");
  EXPECT_EQ(terms.CodecOf("fp32", "a", std::chrono::seconds(5)), "qsgd(bits=2)");
  EXPECT_NE(terms.DecoderOf("qsgd(bits=2)"), nullptr);              // the ladder's codecs decode
  EXPECT_EQ(terms.MetricLabel(1, "qsgd(bits=2)"), "qsgd(bits=2)");  // the client's own
  terms.UseCodec("qsgd(bits=8)", codecs::MakeCodec("qsgd(bits=8)").value());
  EXPECT_EQ(terms.CodecOf("qsgd(bits=8)", "a", std::chrono::seconds(5)), "qsgd(bits=8)");
}

TEST(RoundTerms, SeedsDependOnJobRoundAndClientOnly) {
  RoundTerms a(WarmPlan(), 0.25, 7, nullptr, nullptr), b(RoundPlan(), 1, 7, nullptr, nullptr);
  RoundTerms other(WarmPlan(), 0.25, 8, nullptr, nullptr);
  EXPECT_EQ(a.ClientSeed("c", 3), b.ClientSeed("c", 3));  // a restart draws the same
  EXPECT_NE(a.ClientSeed("c", 3), a.ClientSeed("d", 3));
  EXPECT_NE(a.ClientSeed("c", 3), a.ClientSeed("c", 4));
  EXPECT_NE(a.ClientSeed("c", 3), other.ClientSeed("c", 3));
  std::set<uint64_t> shared;
  for (uint64_t r = 1; r <= 1000; ++r) {
    const uint64_t s = a.SharedSeed(r);
    EXPECT_EQ(s, b.SharedSeed(r));
    EXPECT_EQ(s & 1, 1u);      // never 0
    EXPECT_LT(s, 1ull << 52);  // exact as a double
    shared.insert(s);
  }
  EXPECT_EQ(shared.size(), 1000u);
}

TEST(Roster, JoinsAndQuarantineAsTheCheckpointKeepsThem) {
  Roster roster({{"a", 10}}, {{"q", "scaled its updates"}});
  roster.Register("b", 30);
  roster.Register("a", 20);  // a later Join replaces the count
  EXPECT_EQ(roster.RegisteredSamples(), 50u);
  EXPECT_EQ(roster.size(), 2u);
  const auto samples = roster.SamplesOf({"a", "never"});
  EXPECT_EQ(samples.at("a"), 20u);
  EXPECT_EQ(samples.at("never"), 0u);
  EXPECT_TRUE(roster.IsQuarantined("q"));
  EXPECT_EQ(roster.QuarantineReason("q"), "scaled its updates");
  EXPECT_FALSE(roster.QuarantineReason("a").has_value());
  roster.Quarantine("b", "round 3: the guard refused it");
  EXPECT_EQ(roster.Quarantined().size(), 2u);
  EXPECT_EQ(roster.Clients(), (std::map<std::string, uint64_t>{{"a", 20}, {"b", 30}}));
}

TEST(UpdateChunks, HeldListAndOverlappingRanges) {
  UpdateChunks u;
  u.chunk_count = 4;
  u.held = {true, false, true, false};
  u.held_count = 2;
  u.ranges = {{{0, 0}, 100}, {{0, 200}, 300}, {{1, 50}, 60}};
  EXPECT_EQ(u.HeldList(), (std::vector<uint32_t>{0, 2}));
  EXPECT_FALSE(u.complete());
  EXPECT_FALSE(u.Overlap(0, 100, 200).has_value());  // touching is not overlapping
  EXPECT_EQ(u.Overlap(0, 150, 201), (std::pair<uint64_t, uint64_t>{200, 300}));
  EXPECT_EQ(u.Overlap(0, 99, 101), (std::pair<uint64_t, uint64_t>{0, 100}));
  EXPECT_EQ(u.Overlap(0, 250, 260), (std::pair<uint64_t, uint64_t>{200, 300}));
  EXPECT_FALSE(u.Overlap(0, 300, 300).has_value());  // empty
  // Each part has its own coordinates: part 1 holds [50, 60) only.
  EXPECT_FALSE(u.Overlap(1, 0, 50).has_value());
  EXPECT_FALSE(u.Overlap(1, 200, 300).has_value());
  EXPECT_EQ(u.Overlap(1, 0, 51), (std::pair<uint64_t, uint64_t>{50, 60}));
  EXPECT_EQ(u.Overlap(0, 55, 56), (std::pair<uint64_t, uint64_t>{0, 100}));
  EXPECT_FALSE(u.Overlap(2, 0, 1000).has_value());
}

// A round of "a" and "b" (both joined), collecting a weighted sum.
LiveRound RoundOfTwo() {
  LiveRound r;
  r.number = 5;
  r.participants = r.uploaders = {"a", "b"};
  r.weights = {{"a", 1.0}, {"b", 1.0}};
  r.collector = std::make_shared<WeightedSumCollector>(8);
  return r;
}

ChunkIn ChunkOf(const std::string& client, uint64_t round, std::string_view frame) {
  ChunkIn c;
  c.client_id = client;
  c.round = round;
  c.update_id = 1;
  c.chunk_count = 1;
  c.frame = frame;
  return c;
}

TEST(AdmitChunk, RefusesByNamedReasonBeforeDecoding) {
  LiveRound r = RoundOfTwo();
  const RoundFacts facts;
  const std::string bytes = "x";  // never decoded: every case is refused first
  const auto reason = [&](const LiveRound* round, const ChunkIn& c,
                          std::optional<std::string> quarantined = std::nullopt) {
    auto res = AdmitChunk(round, c, quarantined, 16, facts);
    return res.has_value() ? res->reason : RejectReason::kNone;
  };
  EXPECT_EQ(reason(nullptr, ChunkOf("a", 5, bytes)), RejectReason::kWrongRound);
  EXPECT_EQ(reason(&r, ChunkOf("a", 4, bytes)), RejectReason::kWrongRound);
  EXPECT_EQ(reason(&r, ChunkOf("z", 5, bytes)), RejectReason::kNotParticipant);
  EXPECT_EQ(reason(&r, ChunkOf("a", 5, bytes), "scaled"), RejectReason::kQuarantined);
  ChunkIn far = ChunkOf("a", 5, bytes);
  far.chunk_index = 1;
  EXPECT_EQ(reason(&r, far), RejectReason::kBadChunkIndex);
  far.chunk_index = 0;
  far.chunk_count = 17;  // past the engine's limit of 16
  EXPECT_EQ(reason(&r, far), RejectReason::kBadChunkIndex);
  ChunkIn scaled = ChunkOf("a", 5, bytes);
  scaled.scale = 17;
  EXPECT_EQ(reason(&r, scaled), RejectReason::kNonFinite);
  ChunkIn share = ChunkOf("a", 5, bytes);
  share.share = PushSumShare{};
  EXPECT_EQ(reason(&r, share), RejectReason::kMalformed);  // no Gossip in a summed round
  r.uploaders = {"a"};
  EXPECT_EQ(reason(&r, ChunkOf("b", 5, bytes)), RejectReason::kNotParticipant);
  r.weights["a"] = 0;  // never joined
  EXPECT_EQ(reason(&r, ChunkOf("a", 5, bytes)), RejectReason::kNotParticipant);
  r.frozen = true;
  EXPECT_EQ(reason(&r, ChunkOf("b", 5, bytes)), RejectReason::kWrongRound);
}

TEST(AdmitChunk, AQueryIsAnsweredWithWhatIsHeld) {
  LiveRound r = RoundOfTwo();
  UpdateChunks& u = r.updates["a"];
  u.update_id = 1;
  u.chunk_count = 3;
  u.held = {false, true, false};
  u.held_count = 1;
  ChunkIn query = ChunkOf("a", 5, "");
  auto answer = AdmitChunk(&r, query, std::nullopt, 16, RoundFacts());
  ASSERT_TRUE(answer.has_value());
  EXPECT_TRUE(answer->status.ok());
  EXPECT_EQ(answer->held, (std::vector<uint32_t>{1}));
  query.update_id = 2;  // another update: nothing of it is held
  EXPECT_TRUE(AdmitChunk(&r, query, std::nullopt, 16, RoundFacts())->held.empty());
}

TEST(LiveRound, ARollingRoundKnowsEachClientsRoundAndDropsThemWhole) {
  LiveRound r = RoundOfTwo();
  r.rolling = true;
  r.asked["a"].round = 3;
  r.asked["b"].round = 5;
  EXPECT_EQ(r.AskedRound("a"), 3u);
  EXPECT_TRUE(TakesChunk(&r, ChunkOf("a", 3, "x")));
  EXPECT_FALSE(TakesChunk(&r, ChunkOf("a", 5, "x")));
  r.settling = {"a"};
  EXPECT_FALSE(TakesChunk(&r, ChunkOf("a", 3, "x")));  // settling: complete
  r.updates["a"].chunk_count = 1;
  r.updates["a"].held_count = 1;
  EXPECT_TRUE(r.Complete("a"));
  r.Drop("a");
  EXPECT_EQ(r.participants, (std::set<std::string>{"b"}));
  EXPECT_FALSE(r.asked.count("a") || r.updates.count("a") || r.settling.count("a") ||
               r.weights.count("a") || r.uploaders.count("a"));
  r.rolling = false;
  EXPECT_EQ(r.AskedRound("b"), 5u);  // a round that is not rolling: the round's number
}

TEST(CheckCommittable, NamesWhyNot) {
  LiveRound r = RoundOfTwo();
  EXPECT_EQ(CheckCommittable(nullptr, 8, 8).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CheckCommittable(&r, 7, 8).code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(CheckCommittable(&r, 8, 8).ok());
}

}  // namespace
}  // namespace fedlgc::coordinator
