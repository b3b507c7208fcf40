// Round engine and checkpoints, with FedAvg's weighted-sum collection: aggregation by
// ranges, idempotent chunks, every kind of malformed chunk refused (with its status code
// and reason) without touching the aggregate, server optimizer, restart.
#include "coordinator/round_engine.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <set>

#include "base/crc32c.h"
#include "base/file.h"
#include "codecs/frame.h"
#include "codecs/registry.h"
#include "coordinator/checkpoint.h"
#include "coordinator/collectors.h"
#include "core/state_file.h"
#include "gtest/gtest.h"
#include "tests/core/fake_clock.h"

namespace fedlgc::coordinator {
namespace {

constexpr size_t kDim = 1000;

std::vector<std::string> Encode(const std::string& spec, const std::vector<float>& x,
                                uint64_t max_bytes) {
  auto codec = codecs::MakeCodec(spec).value();
  std::vector<codecs::Frame> frames;
  codecs::EncodeOptions o;
  o.max_frame_bytes = max_bytes;
  EXPECT_TRUE(codec->Encode(x, o, &frames).ok());
  std::vector<std::string> out;
  for (auto& f : frames) out.push_back(std::move(f.bytes));
  return out;
}

// An engine whose rounds collect a weighted sum, as FedAvg's do.
struct Summed {
  std::unique_ptr<RoundEngine> engine;
  std::shared_ptr<WeightedSumCollector> sum;
  ServerOptimizer optimizer;

  RoundEngine* operator->() { return engine.get(); }
  void Open(const std::vector<std::string>& participants) {
    sum = std::make_shared<WeightedSumCollector>(engine->dim());
    const auto deadline = Clock::Real()->Now() + std::chrono::seconds(60);
    ASSERT_TRUE(engine->OpenRound(participants, deadline, sum).ok());
  }
  CommitResult Commit() {
    engine->Freeze();
    return engine->CommitDelta(sum->Mean().value(), optimizer).value();
  }
};

Summed MakeEngine(const std::string& codec = "fp32", float momentum = 0,
                  Clock* clock = Clock::Real()) {
  EngineOptions o;
  o.plan.codec = codec;
  o.clock = clock;
  o.max_client_weight = 1;  // the sample counts as they are
  EngineState s;
  s.model.assign(kDim, 1.0f);
  Summed e{std::make_unique<RoundEngine>(o, s), nullptr, ServerOptimizer{1.0f, momentum}};
  e->roster().Register("a", 100);
  e->roster().Register("b", 300);
  e.Open({"a", "b"});
  return e;
}

ChunkIn Chunk(const std::string& client, const std::vector<std::string>& frames, uint32_t i,
              uint64_t samples, uint64_t round = 1, uint64_t update = 7) {
  ChunkIn c;
  c.client_id = client;
  c.round = round;
  c.update_id = update;
  c.chunk_index = i;
  c.chunk_count = static_cast<uint32_t>(frames.size());
  c.num_samples = samples;
  c.frame = frames[i];
  return c;
}

TEST(RoundEngine, ARoundLastsAsLongAsItsClockSays) {
  core::FakeClock clock;
  Summed e = MakeEngine("fp32", 0, &clock);
  clock.Advance(std::chrono::milliseconds(12'345));
  EXPECT_DOUBLE_EQ(e.Commit().seconds, 12.345);
}

TEST(RoundEngine, WeightedMeanPerCoordinateWithPartialUpdates) {
  auto e = MakeEngine();
  const auto fa =
      Encode("fp32", std::vector<float>(kDim, 2.0f), 1500);  // ~350 coordinates per chunk
  const auto fb = Encode("fp32", std::vector<float>(kDim, 6.0f), 1500);
  ASSERT_GE(fa.size(), 3u);
  for (uint32_t i = 0; i < fa.size(); ++i)
    ASSERT_TRUE(e->AcceptChunk(Chunk("a", fa, i, 100)).status.ok());
  // b's first chunk is lost: its range gets a's update alone.
  for (uint32_t i = 1; i < fb.size(); ++i)
    ASSERT_TRUE(e->AcceptChunk(Chunk("b", fb, i, 300, 1, 9)).status.ok());
  EXPECT_FALSE(e->AllComplete());
  const CommitResult r = e.Commit();
  EXPECT_EQ(r.participants, 2);
  EXPECT_EQ(r.stragglers, 1);
  EXPECT_EQ(r.receipts.at("a").counted.size(), fa.size());
  EXPECT_EQ(r.receipts.at("b").counted.front(), 1u);
  auto view = codecs::ParseFrame(fb[0], codecs::FrameLimits{}).value();
  const auto m = e->ModelVector();
  for (size_t i = 0; i < kDim; ++i) {
    const float expect = i < view.length ? 1.0f + 2.0f : 1.0f + (100 * 2.0f + 300 * 6.0f) / 400;
    ASSERT_FLOAT_EQ(m[i], expect) << i;
  }
  EXPECT_EQ(e->model()->version, 1u);
  EXPECT_EQ(e->current_round(), 2u);
}

TEST(RoundEngine, DuplicatesAreIdempotentAndQueriesReportHeld) {
  auto e = MakeEngine();
  const auto f = Encode("fp32", std::vector<float>(kDim, 4.0f), 1500);
  ASSERT_TRUE(e->AcceptChunk(Chunk("a", f, 0, 100)).status.ok());
  const ChunkResult dup = e->AcceptChunk(Chunk("a", f, 0, 100));
  EXPECT_TRUE(dup.status.ok());
  EXPECT_TRUE(dup.duplicate);
  ChunkIn q = Chunk("a", f, 0, 100);
  q.frame = {};
  EXPECT_EQ(e->AcceptChunk(q).held, std::vector<uint32_t>{0});
  e.Commit();
  auto view = codecs::ParseFrame(f[0], codecs::FrameLimits{}).value();
  EXPECT_FLOAT_EQ(e->ModelVector()[0], 5.0f);  // once, not twice
  EXPECT_FLOAT_EQ(e->ModelVector()[view.length], 1.0f);
}

TEST(RoundEngine, MalformedChunksAreRefusedAndLeaveTheAggregateAlone) {
  auto e = MakeEngine("qsgd(bits=8,bucket=64)");
  const std::vector<float> x(kDim, 0.5f);
  const auto good = Encode("qsgd(bits=8,bucket=64)", x, 0);
  auto with = [&](std::string frame) { return std::vector<std::string>{std::move(frame)}; };
  auto fix_crc = [](std::string f) {
    const uint32_t crc = Crc32c(f.data(), f.size() - 4);
    std::memcpy(f.data() + f.size() - 4, &crc, 4);
    return f;
  };
  std::string bad_crc = good[0];
  bad_crc[60] ^= 1;
  std::string nan_norm = good[0];
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan_norm.data() + nan_norm.size() - 4 - (kDim + 16 * 4), &nan,
              4);  // first bucket norm
  nan_norm = fix_crc(nan_norm);
  const auto other_codec = Encode("qsgd(bits=4,bucket=64)", x, 0);
  const auto other_dim = Encode("qsgd(bits=8,bucket=64)", std::vector<float>(kDim + 1, 0.5f), 0);
  struct Case {
    ChunkIn chunk;
    RejectReason reason;
    absl::StatusCode code;
  };
  std::vector<std::vector<std::string>> keep;  // frames must outlive the chunks
  using R = RejectReason;
  using C = absl::StatusCode;
  auto add = [&](std::vector<std::string> frames, R reason, C code, uint64_t round = 1,
                 const std::string& client = "a") {
    keep.push_back(std::move(frames));
    return Case{Chunk(client, keep.back(), 0, 100, round), reason, code};
  };
  std::vector<Case> cases;
  cases.push_back(add(with(bad_crc), R::kCrc, C::kDataLoss));
  cases.push_back(add(with(nan_norm), R::kNonFinite, C::kInvalidArgument));
  cases.push_back(add(other_codec, R::kCodec, C::kInvalidArgument));
  cases.push_back(add(other_dim, R::kRange, C::kOutOfRange));
  cases.push_back(add(good, R::kWrongRound, C::kFailedPrecondition, 2));
  cases.push_back(add(good, R::kNotParticipant, C::kFailedPrecondition, 1, "mallory"));
  cases.push_back(add(with(good[0].substr(0, 100)), R::kMalformed, C::kInvalidArgument));
  Case bad_index = add(good, R::kBadChunkIndex, C::kInvalidArgument);
  bad_index.chunk.chunk_index = 5;
  cases.push_back(bad_index);
  // A finite bucket norm that only the chunk's scale makes infinite.
  std::string max_norm = good[0];
  const float big = std::numeric_limits<float>::max();
  std::memcpy(max_norm.data() + max_norm.size() - 4 - (kDim + 16 * 4), &big, 4);
  Case overflow = add(with(fix_crc(max_norm)), R::kNonFinite, C::kInvalidArgument);
  overflow.chunk.scale = 16;
  cases.push_back(overflow);
  Case huge_scale = add(good, R::kNonFinite, C::kInvalidArgument);
  huge_scale.chunk.scale = 17;
  cases.push_back(huge_scale);
  Case a_share = add(good, R::kMalformed, C::kInvalidArgument);  // a FedAvg round takes none
  a_share.chunk.share = PushSumShare{0.5, 0, 0};
  cases.push_back(a_share);
  Case a_part = add(good, R::kPart, C::kInvalidArgument);  // a plain round takes part 0 only
  a_part.chunk.part = 1;
  cases.push_back(a_part);
  for (const Case& c : cases) {
    const ChunkResult r = e->AcceptChunk(c.chunk);
    EXPECT_EQ(r.status.code(), c.code) << monitoring::ReasonLabel(c.reason) << ": " << r.status;
    EXPECT_EQ(r.reason, c.reason) << r.status;
  }
  e.Commit();
  for (float v : e->ModelVector()) ASSERT_EQ(v, 1.0f);  // nothing leaked into the aggregate
}

TEST(RoundEngine, OverlappingChunksOfOneUpdateAreRefused) {
  auto e = MakeEngine();
  // Every chunk of b's update is the same frame, covering [0, n).
  const auto f = Encode("fp32", std::vector<float>(kDim, 8.0f), 1500);
  const uint64_t n = codecs::ParseFrame(f[0], codecs::FrameLimits{}).value().length;
  std::vector<std::string> same(3, f[0]);
  ASSERT_TRUE(e->AcceptChunk(Chunk("b", same, 0, 300)).status.ok());
  for (uint32_t i : {1u, 2u}) {
    const ChunkResult r = e->AcceptChunk(Chunk("b", same, i, 300));
    EXPECT_EQ(r.reason, RejectReason::kOverlap) << r.status;
    EXPECT_TRUE(absl::IsInvalidArgument(r.status)) << r.status;
  }
  // A range straddling the one held, [n/2, n/2 + n), as chunk 2 of a 3-chunk update.
  std::string straddle;
  const size_t body =
      codecs::BeginFrame(codecs::MakeCodec("fp32").value()->wire_spec(), kDim, n / 2, n, &straddle);
  ASSERT_GT(body, 0u);
  for (uint64_t i = 0; i < n; ++i) {
    const float v = 8.0f;
    straddle.append(reinterpret_cast<const char*>(&v), 4);
  }
  codecs::FinishFrame(body, &straddle);
  same[2] = straddle;
  const ChunkResult r2 = e->AcceptChunk(Chunk("b", same, 2, 300));
  EXPECT_EQ(r2.reason, RejectReason::kOverlap) << r2.status;
  const CommitResult r = e.Commit();
  const auto m = e->ModelVector();
  for (size_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(m[i], 1.0f + 8.0f) << "counted once: " << i;
  EXPECT_EQ(r.receipts.at("b").counted, std::vector<uint32_t>{0});
}

TEST(RoundEngine, TheWeightIsTheJoinsNotTheChunks) {
  auto e = MakeEngine();
  const auto fa = Encode("fp32", std::vector<float>(kDim, 2.0f), 0);
  const auto fb = Encode("fp32", std::vector<float>(kDim, 6.0f), 0);
  // a claims 10^15 samples in its chunk after a Join of 100; b claims 1.
  ASSERT_TRUE(e->AcceptChunk(Chunk("a", fa, 0, 1'000'000'000'000'000)).status.ok());
  ASSERT_TRUE(e->AcceptChunk(Chunk("b", fb, 0, 1)).status.ok());
  e.Commit();
  EXPECT_FLOAT_EQ(e->ModelVector()[0], 1.0f + (100 * 2.0f + 300 * 6.0f) / 400);
}

TEST(RoundEngine, AParticipantThatHasNotJoinedIsRefused) {
  EngineOptions o;
  EngineState s;
  s.model.assign(kDim, 0.0f);
  RoundEngine e(o, s);
  e.roster().Register("a", 10);
  auto sum = std::make_shared<WeightedSumCollector>(kDim);
  ASSERT_TRUE(
      e.OpenRound({"a", "ghost"}, Clock::Real()->Now() + std::chrono::seconds(60), sum).ok());
  const auto f = Encode("fp32", std::vector<float>(kDim, 1.0f), 0);
  const ChunkResult r = e.AcceptChunk(Chunk("ghost", f, 0, 10));
  EXPECT_EQ(r.reason, RejectReason::kNotParticipant);
  EXPECT_TRUE(absl::IsFailedPrecondition(r.status)) << r.status;
  EXPECT_TRUE(e.AcceptChunk(Chunk("a", f, 0, 10)).status.ok());
}

TEST(CappedWeights, NoClientHoldsMoreThanTheCapAndTheSmallKeepTheirCounts) {
  // 4 clients of 1 and one of 100, cap 1/2: the big one is lowered to t = (4 + t) / 2 = 4.
  auto w = CappedWeights({{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}, {"big", 100}}, 0.5);
  EXPECT_DOUBLE_EQ(w.at("big"), 4.0);
  EXPECT_DOUBLE_EQ(w.at("a"), 1.0);
  // Two clients, cap 1/2: only equal weights meet it.
  auto two = CappedWeights({{"a", 1}, {"b", 9}}, 0.5);
  EXPECT_DOUBLE_EQ(two.at("a"), two.at("b"));
  // Three clients, cap 1/4: none meets it; equal weights come nearest.
  auto three = CappedWeights({{"a", 1}, {"b", 9}, {"c", 1000000}}, 0.25);
  EXPECT_DOUBLE_EQ(three.at("c"), three.at("a"));
  // Unknown (0) stays 0; cap 1: no cap.
  auto unknown = CappedWeights({{"a", 0}, {"b", 5}, {"c", 5}, {"d", 50}}, 1.0);
  EXPECT_DOUBLE_EQ(unknown.at("a"), 0.0);
  EXPECT_DOUBLE_EQ(unknown.at("d"), 50.0);
  // Random counts and caps: the cap holds whenever n * cap > 1, the order is kept, and
  // every weight below the level is its count.
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 30);
    std::map<std::string, uint64_t> samples;
    for (int i = 0; i < n; ++i) {
      const int magnitude = static_cast<int>(rng() % 7);
      uint64_t v = 1 + rng() % 10;
      for (int k = 0; k < magnitude; ++k) v *= 10;
      samples[std::to_string(i)] = v;
    }
    const double cap = 0.02 + 0.98 * static_cast<double>(rng() % 1000) / 1000.0;
    const auto got = CappedWeights(samples, cap);
    double total = 0, top = 0;
    for (const auto& [c, x] : got) {
      total += x;
      top = std::max(top, x);
      if (n * cap > 1) {
        ASSERT_LE(x, static_cast<double>(samples.at(c)) * (1 + 1e-12));
      }
    }
    if (n * cap > 1) {
      ASSERT_LE(top / total, cap * (1 + 1e-9)) << "n " << n << " cap " << cap;
    } else {
      for (const auto& [c, x] : got) ASSERT_EQ(x, top) << "equal weights";
    }
    for (const auto& [c, x] : got) {
      if (x < top * (1 - 1e-12)) {
        ASSERT_EQ(x, static_cast<double>(samples.at(c))) << c;
      }
    }
  }
}

TEST(RoundEngine, ConflictingUpdatesAndClosedRounds) {
  auto e = MakeEngine();
  const auto f = Encode("fp32", std::vector<float>(kDim, 1.0f), 1500);
  ASSERT_TRUE(e->AcceptChunk(Chunk("a", f, 0, 100, 1, 7)).status.ok());
  const ChunkResult other = e->AcceptChunk(Chunk("a", f, 1, 100, 1, 8));
  EXPECT_EQ(other.reason, RejectReason::kUpdateConflict);
  EXPECT_EQ(other.status.code(), absl::StatusCode::kFailedPrecondition);
  // A round being aggregated takes nothing more, and neither does a committed one.
  e->Freeze();
  const ChunkResult closing = e->AcceptChunk(Chunk("a", f, 1, 100, 1, 7));
  EXPECT_EQ(closing.reason, RejectReason::kWrongRound);
  EXPECT_EQ(closing.status.code(), absl::StatusCode::kFailedPrecondition);
  e.Commit();
  EXPECT_TRUE(absl::IsFailedPrecondition(
      e->CommitDelta(std::vector<float>(kDim), ServerOptimizer{}).status()))
      << "no round is open to commit";
  const ChunkResult late = e->AcceptChunk(Chunk("a", f, 1, 100, 1, 7));
  EXPECT_EQ(late.reason, RejectReason::kWrongRound);
  EXPECT_EQ(late.status.code(), absl::StatusCode::kFailedPrecondition);
}

TEST(RoundEngine, ServerMomentum) {
  auto e = MakeEngine("fp32", 0.5f);
  const auto f = Encode("fp32", std::vector<float>(kDim, 1.0f), 0);
  ASSERT_TRUE(e->AcceptChunk(Chunk("a", f, 0, 100)).status.ok());
  e.Commit();  // m = 1, x = 2
  e.Open({"a"});
  ASSERT_TRUE(e->AcceptChunk(Chunk("a", f, 0, 100, 2)).status.ok());
  e.Commit();  // m = 0.5 + 1, x = 3.5
  EXPECT_FLOAT_EQ(e->ModelVector()[3], 3.5f);
}

// A version between rounds (re-estimated statistics): with keep_momentum the next commit
// goes on as if it had not come (the server momentum carried), it commits only on the
// version it was made from, never while a round is open; without keep_momentum the
// momentum starts afresh, as an aggregator's rebase wants.
TEST(RoundEngine, ARebaseBetweenRoundsKeepsTheMomentumWhenAskedAndChecksTheVersion) {
  auto e = MakeEngine("fp32", 0.5f);
  const auto f = Encode("fp32", std::vector<float>(kDim, 1.0f), 0);
  ASSERT_TRUE(e->AcceptChunk(Chunk("a", f, 0, 100)).status.ok());
  e.Commit();  // m = 1, x = 2, version 1
  std::vector<float> patched = e->ModelVector();
  patched[0] = 10.0f;
  RebaseOptions keep{.keep_momentum = true, .from_version = 1, .statistics_round = 1};
  ASSERT_TRUE(e->Rebase(2, patched, keep).ok());
  EXPECT_EQ(e->model()->version, 2u);
  EXPECT_EQ(e->Snapshot().statistics_round, 1u);
  EXPECT_EQ(e->ModelVector(), patched);
  // Made from version 1, the model is at 2: refused, nothing changes.
  EXPECT_TRUE(absl::IsFailedPrecondition(e->Rebase(2, std::vector<float>(kDim, 0.0f), keep)));
  EXPECT_EQ(e->ModelVector(), patched);
  e.Open({"a"});
  EXPECT_TRUE(absl::IsFailedPrecondition(e->Rebase(2, patched)));  // a round is open
  ASSERT_TRUE(e->AcceptChunk(Chunk("a", f, 0, 100, 2)).status.ok());
  e.Commit();  // m = 0.5 + 1, x = 2 + 1.5 (and 10 + 1.5 where the rebase moved it)
  EXPECT_FLOAT_EQ(e->ModelVector()[3], 3.5f);
  EXPECT_FLOAT_EQ(e->ModelVector()[0], 11.5f);
  EXPECT_EQ(e->Snapshot().statistics_round, 1u);
  // Without keep_momentum the momentum starts afresh: the next step is the update alone.
  ASSERT_TRUE(e->Rebase(3, e->ModelVector()).ok());
  e.Open({"a"});
  ASSERT_TRUE(e->AcceptChunk(Chunk("a", f, 0, 100, 3)).status.ok());
  e.Commit();
  EXPECT_FLOAT_EQ(e->ModelVector()[3], 4.5f);
}

TEST(RoundEngine, WarmupCodecsThenTheJobCodec) {
  EngineOptions o;
  o.plan.codec = "topk(ratio=0.1)";
  o.plan.warmup_codecs = {"fp32", "topk(ratio=0.5)"};
  EngineState s;
  s.model.assign(kDim, 0.0f);
  Summed e{std::make_unique<RoundEngine>(o, s), nullptr, {}};
  e->roster().Register("a", 100);
  const std::vector<float> x(kDim, 1.0f);
  const std::vector<std::string> specs = {"fp32", "topk(ratio=0.5)", "topk(ratio=0.1)",
                                          "topk(ratio=0.1)"};
  for (uint64_t round = 1; round <= specs.size(); ++round) {
    e.Open({"a"});
    EXPECT_EQ(e->OpenRoundFor("a")->codec, specs[round - 1]);
    // The other plan codecs are refused with a clear status; the round's own counts.
    for (const std::string other : {"fp32", "topk(ratio=0.5)", "topk(ratio=0.1)"}) {
      if (other == specs[round - 1]) continue;
      const ChunkResult r = e->AcceptChunk(Chunk("a", Encode(other, x, 0), 0, 100, round));
      EXPECT_EQ(r.reason, RejectReason::kCodec) << round << " " << other;
      EXPECT_TRUE(absl::IsInvalidArgument(r.status)) << r.status;
    }
    const ChunkResult ok =
        e->AcceptChunk(Chunk("a", Encode(specs[round - 1], x, 0), 0, 100, round));
    ASSERT_TRUE(ok.status.ok()) << ok.status;
    EXPECT_EQ(ok.codec, specs[round - 1]);
    e.Commit();
  }
  // Every coordinate of x is 1: fp32 adds 1 everywhere, top-k adds 1 at k coordinates.
  const auto m = e->ModelVector();
  double total = 0;
  for (float v : m) total += v;
  EXPECT_DOUBLE_EQ(total, kDim * 1.0 + kDim * 0.5 + 2 * kDim * 0.1);
}

// A codec per participant, as a fake ladder sets it; remembers the windows it was given.
class FixedChooser final : public CodecChooser {
 public:
  explicit FixedChooser(std::map<std::string, std::string> codecs) : codecs_(std::move(codecs)) {}
  std::string Choose(const std::string& client, Clock::duration window) const override {
    absl::MutexLock lock(&mu_);
    windows_[client] = std::chrono::duration<double>(window).count();
    return codecs_.at(client);
  }
  std::vector<std::string> Specs() const override {
    absl::MutexLock lock(&mu_);
    std::set<std::string> specs;
    for (const auto& [client, spec] : codecs_) specs.insert(spec);
    specs.insert("topk(ratio=0.5)");
    return {specs.begin(), specs.end()};
  }
  void Set(const std::string& client, std::string spec) {
    absl::MutexLock lock(&mu_);
    codecs_[client] = std::move(spec);
  }
  double Window(const std::string& client) const {
    absl::MutexLock lock(&mu_);
    return windows_.at(client);
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> codecs_;
  mutable std::map<std::string, double> windows_;
};

TEST(RoundEngine, ACodecPerParticipantDecodesEachUpdateWithItsOwn) {
  core::FakeClock clock;
  auto chooser = std::make_shared<FixedChooser>(
      std::map<std::string, std::string>{{"a", "fp32"}, {"b", "topk(ratio=0.1)"}});
  EngineOptions o;
  o.plan.codec = "fp32";
  o.clock = &clock;
  o.max_client_weight = 1;
  o.codec_chooser = chooser;
  EngineState s;
  s.model.assign(kDim, 0.0f);
  Summed e{std::make_unique<RoundEngine>(o, s), nullptr, {}};
  e->roster().Register("a", 100);
  e->roster().Register("b", 300);
  e.sum = std::make_shared<WeightedSumCollector>(kDim);
  ASSERT_TRUE(e->OpenRound({"a", "b"}, clock.Now() + std::chrono::seconds(60), e.sum).ok());
  EXPECT_EQ(e->OpenRoundFor("a")->codec, "fp32");
  EXPECT_EQ(e->OpenRoundFor("b")->codec, "topk(ratio=0.1)");
  EXPECT_DOUBLE_EQ(chooser->Window("a"), 60.0);
  std::vector<float> xa(kDim), xb(kDim);
  for (size_t i = 0; i < kDim; ++i) {
    xa[i] = 0.001f * static_cast<float>(i);
    xb[i] = std::sin(0.1f * static_cast<float>(i));
  }
  // Each client's frames decode only with its own codec: the other's is refused.
  EXPECT_EQ(e->AcceptChunk(Chunk("a", Encode("topk(ratio=0.1)", xa, 0), 0, 100)).reason,
            RejectReason::kCodec);
  EXPECT_EQ(e->AcceptChunk(Chunk("b", Encode("fp32", xb, 0), 0, 300)).reason, RejectReason::kCodec);
  const ChunkResult ra = e->AcceptChunk(Chunk("a", Encode("fp32", xa, 0), 0, 100));
  const ChunkResult rb = e->AcceptChunk(Chunk("b", Encode("topk(ratio=0.1)", xb, 0), 0, 300));
  ASSERT_TRUE(ra.status.ok()) << ra.status;
  ASSERT_TRUE(rb.status.ok()) << rb.status;
  EXPECT_EQ(ra.codec, "fp32");
  EXPECT_EQ(rb.codec, "topk(ratio=0.1)");
  const CommitResult c = e.Commit();
  EXPECT_EQ(c.codecs,
            (std::map<std::string, std::string>{{"a", "fp32"}, {"b", "topk(ratio=0.1)"}}));
  // The mean of what each codec decodes, weighted 100 : 300.
  auto topk = codecs::MakeCodec("topk(ratio=0.1)").value();
  std::vector<codecs::Frame> frames;
  ASSERT_TRUE(topk->Encode(xb, {}, &frames).ok());
  std::vector<float> db(kDim);
  ASSERT_TRUE(codecs::DecodeAll(*topk, frames, db).ok());
  const auto m = e->ModelVector();
  for (size_t i = 0; i < kDim; ++i) {
    ASSERT_NEAR(m[i], (100 * xa[i] + 300 * db[i]) / 400, 1e-6) << i;
  }
  // A rolling round asks each client with the codec chosen when it joins.
  e.sum = std::make_shared<WeightedSumCollector>(kDim);
  ASSERT_TRUE(e->OpenRound({"a"}, clock.Now() + std::chrono::seconds(30), e.sum, true).ok());
  chooser->Set("b", "topk(ratio=0.5)");
  clock.Advance(std::chrono::seconds(5));
  ASSERT_TRUE(e->AddParticipants({"b"}, clock.Now() + std::chrono::seconds(20)).ok());
  EXPECT_EQ(e->OpenRoundFor("b")->codec, "topk(ratio=0.5)");
  EXPECT_EQ(e->Participants().at("b").codec, "topk(ratio=0.5)");
  EXPECT_DOUBLE_EQ(chooser->Window("b"), 20.0);
  EXPECT_EQ(e->AskedAt("b"), clock.Now());
  EXPECT_FALSE(e->AskedAt("c").has_value());
}

TEST(Checkpoint, RoundTripsAndRefusesCorruptionOrAnotherJob) {
  const std::string dir = ::testing::TempDir() + "/ckpt_test";
  std::filesystem::remove_all(dir);
  EXPECT_FALSE(ReadCheckpoint(dir, "job").value().has_value());
  auto e = MakeEngine();
  const auto f = Encode("fp32", std::vector<float>(kDim, 3.0f), 1500);
  ASSERT_TRUE(e->AcceptChunk(Chunk("a", f, 0, 100)).status.ok());
  e.Commit();
  e->roster().Quarantine("b", "round 1: the guard refused it");
  ASSERT_TRUE(e->Rebase(2, e->ModelVector(), {.keep_momentum = true, .statistics_round = 1}).ok());
  ASSERT_TRUE(WriteCheckpoint(dir, "job", e->Snapshot()).ok());
  auto back = ReadCheckpoint(dir, "job");
  ASSERT_TRUE(back.ok() && back->has_value()) << back.status();
  const EngineState& s = **back;
  EXPECT_EQ(s.next_round, 2u);
  EXPECT_EQ(s.model_version, 2u);
  EXPECT_EQ(s.statistics_round, 1u);
  EXPECT_EQ(s, e->Snapshot());
  EXPECT_EQ(s.model, e->ModelVector());
  EXPECT_EQ(s.clients.size(), 2u);
  ASSERT_EQ(s.receipts.at("a").size(), 1u);
  EXPECT_EQ(s.receipts.at("a").back().counted, std::vector<uint32_t>{0});
  EXPECT_EQ(s.receipts.count("b"), 0u) << "b sent nothing: no receipt to keep";
  EXPECT_EQ(s.quarantined,
            (std::map<std::string, std::string>{{"b", "round 1: the guard refused it"}}));
  // Quarantined is refused from now on, with its own reason.
  e.Open({"a", "b"});
  const ChunkResult barred = e->AcceptChunk(Chunk("b", f, 0, 300, 2));
  EXPECT_EQ(barred.reason, RejectReason::kQuarantined);
  EXPECT_TRUE(absl::IsPermissionDenied(barred.status)) << barred.status;
  EXPECT_EQ(ReadCheckpoint(dir, "other").status().code(), absl::StatusCode::kFailedPrecondition);
  // The job's instance (drawn when it started afresh) is kept.
  EngineState with_instance = e->Snapshot();
  with_instance.job_instance = 0xFEDC0000000000A5ull;
  ASSERT_TRUE(WriteCheckpoint(dir, "job", with_instance).ok());
  back = ReadCheckpoint(dir, "job");
  ASSERT_TRUE(back.ok() && back->has_value()) << back.status();
  EXPECT_EQ((*back)->job_instance, 0xFEDC0000000000A5ull);
  EXPECT_EQ(**back, with_instance);
  // A flipped byte is refused, not half-loaded.
  std::string bytes;
  {
    FILE* in = std::fopen(CheckpointPath(dir).c_str(), "rb");
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), in)) > 0) bytes.append(buf, n);
    std::fclose(in);
  }
  bytes[bytes.size() / 2] ^= 0x40;
  FILE* out = std::fopen(CheckpointPath(dir).c_str(), "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), out);
  std::fclose(out);
  EXPECT_EQ(ReadCheckpoint(dir, "job").status().code(), absl::StatusCode::kDataLoss);
}

TEST(Checkpoint, AVersion1CheckpointStillLoads) {
  const std::string dir = ::testing::TempDir() + "/ckpt_v1";
  std::filesystem::remove_all(dir);
  core::StateWriter w;  // version 1: no quarantine list
  w.U32(0x4B434C46);
  w.U32(1);
  w.Str("job");
  w.U64(5);  // next round
  w.U64(4);  // model version
  w.Floats(std::vector<float>{1, 2, 3});
  w.Floats(std::vector<float>{0, 0, 0});
  w.U32(1);
  w.Str("a");
  w.U64(10);
  w.U32(0);  // no receipts
  ASSERT_TRUE(fedlgc::AtomicWriteFile(CheckpointPath(dir), w.Finish()).ok());
  auto back = ReadCheckpoint(dir, "job");
  ASSERT_TRUE(back.ok() && back->has_value()) << back.status();
  EXPECT_EQ((*back)->next_round, 5u);
  EXPECT_EQ((*back)->model, (std::vector<float>{1, 2, 3}));
  EXPECT_TRUE((*back)->quarantined.empty());
}

// A rolling round (buffered rounds): a commit settles only the updates chosen for it, the
// others' chunks keep naming the round they were asked in and count in a later commit, a
// client asked after a commit trains from the new version (the old one stays
// downloadable), and each receipt says which version took the update.
TEST(RoundEngine, ARollingRoundSettlesWhatItIsToldAndGoesOn) {
  core::FakeClock clock;
  EngineOptions o;
  o.clock = &clock;
  o.max_client_weight = 1;
  o.keep_versions = 2;
  EngineState s;
  s.model.assign(kDim, 1.0f);
  RoundEngine e(o, s);
  for (const char* c : {"a", "b", "c", "d"}) e.roster().Register(c, 100);
  auto updates = std::make_shared<PerClientCollector>();
  const auto deadline = clock.Now() + std::chrono::seconds(60);
  ASSERT_TRUE(e.OpenRound({"a", "b"}, deadline, updates, /*rolling=*/true).ok());
  const auto fa = Encode("fp32", std::vector<float>(kDim, 2.0f), 1500);
  const auto fb = Encode("fp32", std::vector<float>(kDim, 4.0f), 1500);
  ASSERT_GE(fb.size(), 2u);
  for (uint32_t i = 0; i < fa.size(); ++i)
    ASSERT_TRUE(e.AcceptChunk(Chunk("a", fa, i, 100)).status.ok());
  ASSERT_TRUE(e.AcceptChunk(Chunk("b", fb, 0, 100, 1, 9)).status.ok());  // b: one chunk so far
  EXPECT_TRUE(e.Participants().at("a").complete);
  EXPECT_FALSE(e.Participants().at("b").complete);

  // Commit 1 takes a's update alone.
  e.Settle({"a"});
  EXPECT_EQ(e.AcceptChunk(Chunk("a", fa, 0, 100)).reason, RejectReason::kWrongRound);
  const CommitResult c1 = e.CommitDelta(std::vector<float>(kDim, 2.0f), ServerOptimizer{}).value();
  EXPECT_EQ(c1.round, 1u);
  EXPECT_EQ(c1.participants, 1);
  ASSERT_EQ(c1.receipts.size(), 1u);
  EXPECT_EQ(c1.receipts.at("a").round, 1u);
  EXPECT_EQ(c1.receipts.at("a").version, 1u);
  EXPECT_EQ(c1.receipts.at("a").counted.size(), fa.size());
  EXPECT_EQ(e.current_round(), 2u);  // the next commit is round 2 ...
  EXPECT_EQ(e.model()->version, 1u);
  EXPECT_FALSE(e.Participants().count("a"));

  // ... while b goes on in round 1, from version 0, which is still served.
  const std::optional<RoundInfo> b = e.OpenRoundFor("b");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->round, 1u);
  EXPECT_EQ(b->model_version, 0u);
  ASSERT_NE(e.ModelAt(0), nullptr);
  EXPECT_FLOAT_EQ(reinterpret_cast<const float*>(e.ModelAt(0)->bytes.data())[0], 1.0f);
  EXPECT_EQ(e.AcceptChunk(Chunk("b", fb, 1, 100, 2, 9)).reason, RejectReason::kWrongRound);
  for (uint32_t i = 1; i < fb.size(); ++i)
    ASSERT_TRUE(e.AcceptChunk(Chunk("b", fb, i, 100, 1, 9)).status.ok()) << i;

  // A client asked now trains from version 1, in round 2; a participant is not asked twice.
  const auto more = e.AddParticipants({"b", "c"}, clock.Now() + std::chrono::seconds(30)).value();
  EXPECT_EQ(more, std::vector<std::string>{"c"});
  EXPECT_EQ(e.OpenRoundFor("c")->round, 2u);
  EXPECT_EQ(e.OpenRoundFor("c")->model_version, 1u);
  e.Release({"c"});  // c went away: it is no participant, its chunks are refused
  EXPECT_FALSE(e.OpenRoundFor("c").has_value());
  EXPECT_EQ(e.AcceptChunk(Chunk("c", fa, 0, 100, 2, 3)).reason, RejectReason::kNotParticipant);

  // Commit 2 takes b's, asked in round 1: its receipt names round 1 and version 2.
  e.Settle({"b"});
  const CommitResult c2 = e.CommitDelta(std::vector<float>(kDim, 1.0f), ServerOptimizer{}).value();
  EXPECT_EQ(c2.round, 2u);
  EXPECT_EQ(c2.receipts.at("b").round, 1u);
  EXPECT_EQ(c2.receipts.at("b").version, 2u);
  EXPECT_EQ(c2.receipts.at("b").counted.size(), fb.size());
  EXPECT_TRUE(updates->Updates().empty());  // settled updates leave the collector
  EXPECT_FLOAT_EQ(e.ModelVector()[0], 4.0f);
  // Superseded versions stay only while someone training was asked from them: d, asked
  // from version 2, keeps 2; nobody trains from 0 or 1 any more.
  ASSERT_TRUE(e.AddParticipants({"d"}, clock.Now() + std::chrono::seconds(30)).ok());
  e.Settle({});
  ASSERT_TRUE(e.CommitDelta(std::vector<float>(kDim, 0.0f), ServerOptimizer{}).ok());
  EXPECT_EQ(e.ModelAt(0), nullptr);
  EXPECT_EQ(e.ModelAt(1), nullptr);
  EXPECT_NE(e.ModelAt(2), nullptr);
  EXPECT_NE(e.ModelAt(3), nullptr);
  EXPECT_TRUE(e.Participants().count("d"));  // not settled: still asked
  // The receipts survive a checkpoint with their versions.
  const EngineState snap = e.Snapshot();
  EXPECT_EQ(snap.receipts.at("b").back().version, 2u);
}

}  // namespace
}  // namespace fedlgc::coordinator
