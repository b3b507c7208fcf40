// SGP's collector through the round engine: a share comes through Gossip with a valid
// push-sum weight share, coded against the round's model, and keeps one weight share
// across the chunks of its update.
#include "modes/sgp/push_sum_collector.h"

#include <chrono>
#include <cmath>

#include "coordinator/round_engine.h"
#include "gtest/gtest.h"
#include "tests/coordinator/chunks.h"

namespace fedlgc::modes {
namespace {

using coordinator::ChunkIn;
using coordinator::ChunkResult;
using coordinator::PushSumShare;
using coordinator::RejectReason;

constexpr size_t kDim = 64;

std::vector<std::string> Frames(const std::vector<float>& x) { return testing::ChunkFrames(x); }

ChunkIn Chunk(const std::string& client, const std::vector<std::string>& frames, uint32_t i) {
  return testing::ChunkOf(client, frames, i);
}

TEST(PushSumCollector, GossipChunksCarryAValidWeightAndTheRoundsReference) {
  coordinator::EngineState s;
  s.model.assign(kDim, 0.5f);
  coordinator::RoundEngine e(coordinator::EngineOptions{}, s);
  for (const char* c : {"a", "b"}) e.roster().Register(c, 10);
  auto collector = std::make_shared<PushSumCollector>();
  ASSERT_TRUE(e.OpenRound({"a", "b"}, coordinator::Clock::Real()->Now() + std::chrono::seconds(9),
                          collector)
                  .ok());
  const auto f = Frames(std::vector<float>(kDim, 1.0f));
  ASSERT_GE(f.size(), 3u);
  ChunkIn c = Chunk("a", f, 0);
  // Through UploadUpdate (no push-sum share): refused.
  ChunkResult r = e.AcceptChunk(c);
  EXPECT_EQ(r.reason, RejectReason::kMalformed);
  EXPECT_TRUE(absl::IsInvalidArgument(r.status)) << r.status;
  c.share = PushSumShare{};
  for (double bad : {0.0, -0.5, std::nan(""), 1e9}) {
    c.share->weight = bad;
    r = e.AcceptChunk(c);
    EXPECT_EQ(r.reason, RejectReason::kNonFinite) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(r.status)) << r.status;
  }
  c.share->weight = 0.5;
  c.share->reference_version = 3;  // the engine serves version 0
  EXPECT_EQ(e.AcceptChunk(c).reason, RejectReason::kMalformed);
  c.share->reference_version = 0;
  ASSERT_TRUE(e.AcceptChunk(c).status.ok());
  ChunkIn d = Chunk("a", f, 1);
  d.share = PushSumShare{0.25, 0, 0};  // differs from the first chunk
  r = e.AcceptChunk(d);
  EXPECT_EQ(r.reason, RejectReason::kBadChunkIndex);
  EXPECT_TRUE(absl::IsInvalidArgument(r.status)) << r.status;
  // The rest of the update, with the first chunk's weight share: complete, and the share
  // is the decoded values beside that weight share.
  for (uint32_t i = 1; i < f.size(); ++i) {
    ChunkIn rest = Chunk("a", f, i);
    rest.share = PushSumShare{0.5, 0, 0};
    ASSERT_TRUE(e.AcceptChunk(rest).status.ok()) << i;
  }
  const auto shares = collector->Shares();
  ASSERT_EQ(shares.size(), 1u);
  const SgpShare& a = shares.at("a");
  EXPECT_TRUE(a.complete);
  EXPECT_EQ(a.weight_share, 0.5);
  EXPECT_EQ(a.values, std::vector<float>(kDim, 1.0f));
  // A sender the round forgets takes its weight share with it.
  collector->Forget("a");
  EXPECT_TRUE(collector->Shares().empty());
}

}  // namespace
}  // namespace fedlgc::modes
