// The edge client's state file: everything round-trips, and older versions load with
// their meaning kept (a version 3 share in flight was still inside x and w).
#include "edge_client/client_state.h"

#include <filesystem>

#include "base/file.h"
#include "core/state_file.h"
#include "gtest/gtest.h"

namespace fedlgc::edge_client {
namespace {

std::string Path(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/client-state";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

// The fields every mode shares, and two modes' slots (opaque to the file).
ClientState Sample() {
  ClientState s;
  s.codec = "qsgd(bits=4)";
  s.residual = {0.5f, -1.0f, 2.0f};
  PendingUpdate p;
  p.round = 7;
  p.model_version = 6;
  p.update_id = 99;
  p.num_samples = 10;
  p.frames = {"abc", "de"};
  s.pending = p;
  s.codec_state = std::string("DGCS\0\x01 sender state", 20);
  s.modes["fedavg"] = std::string("\x08\x09\x10\x08", 4);
  s.modes["sgp"] = std::string("slot\0bytes", 10);
  return s;
}

// The local model and the modes' fields a file older than slots held (OldFile below).
LegacyModeFields SampleLegacy() {
  LegacyModeFields l;
  l.x = {1.0f, 2.0f, 3.0f};
  l.w = 0.5;
  l.trained_round = 7;
  l.pulled_round = 6;
  l.loss = 0.25;
  l.inbox_applied = 5;
  l.contributed = {3.0f, 3.0f, 3.0f};
  l.share_pw = 0.5;
  l.share = {1.0f, 2.0f, 3.0f};
  return l;
}

TEST(ClientState, RoundTripsEveryField) {
  const std::string path = Path("v12.state");
  ClientState s = Sample();
  s.pending->scales = {0.5f, 2.0f};
  s.pending->parts = {0, 1};
  s.pending->job = "fedlgc-cnn@agg-1";
  s.codec_basis = "GVBQ";
  s.job = "fedlgc-cnn@agg-1";
  s.job_instance = 0xFEDC0000000000A5ull;
  ASSERT_TRUE(SaveClientState(path, s).ok());
  auto back = LoadClientState(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, s);
  EXPECT_EQ(back->modes.at("sgp"), std::string("slot\0bytes", 10));
  EXPECT_FALSE(back->legacy.has_value());
  // Parts for some chunks only contradict the frames: refused.
  s.pending->parts = {1};
  ASSERT_TRUE(SaveClientState(path, s).ok());
  EXPECT_FALSE(LoadClientState(path).ok());
}

TEST(ClientState, NoFileIsAnEmptyState) {
  auto back = LoadClientState(Path("none.state"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, ClientState());
}

// An older state file of Sample() by hand: version 3 (x and w still hold the gossip share
// in flight), version 4 (an LGC update in flight, chunk scales; no echo), version 5 (with
// the echo, without codec state) or versions 6-8 (codec state, basis, PowerSGD phase; no
// job).
std::string OldFile(uint32_t version) {
  const ClientState s = Sample();
  const LegacyModeFields l = SampleLegacy();
  core::StateWriter w;
  w.U32(0x53434C46);
  w.U32(version);
  w.Str(s.codec);
  w.Floats(s.residual);
  w.U32(1);
  w.U64(s.pending->round);
  w.U64(s.pending->model_version);
  w.U64(s.pending->update_id);
  w.U64(s.pending->num_samples);
  w.U32(2);
  w.Str("abc");
  w.Str("de");
  if (version == 3) {
    w.U32(0);
    w.Str("");
    w.Floats(std::vector<float>{});
    w.U32(1);  // gossip
  } else {
    w.U32(3);  // LGC stage 3 on the support {5}
    w.Str(std::string("\x05\0\0\0", 4));
    w.Floats(std::vector<float>{0.5f});
    w.U32(0);
    w.Floats(std::vector<float>{});  // scales
  }
  w.Floats(l.x);
  w.F64(version == 3 ? 1.0 : 0.5);  // version 3: w before giving up the share
  w.U64(7);
  w.U64(6);
  w.F64(0.25);
  w.U64(5);
  w.Floats(l.contributed);
  w.F64(0.5);
  w.Floats(l.share);
  if (version >= 5 && version <= 10) {  // an LGC echo
    w.U64(6);
    w.Floats(std::vector<float>{-0.25f, 4.0f});
    w.U32(1);
  }
  if (version >= 6) w.Str(s.codec_state);
  if (version >= 7) w.Str("");  // no basis
  if (version >= 8) {
    w.U32(0);  // no PowerSGD phase
    w.Floats(std::vector<float>{});
  }
  if (version >= 9) w.Str("job-a");
  if (version >= 10) {
    w.U64(9);  // a shared-scale round
    w.U64(8);
  }
  return w.Finish();
}

TEST(ClientState, AVersion3ShareInFlightLeavesXAndWOnLoad) {
  const std::string path = Path("v3.state");
  ASSERT_TRUE(fedlgc::AtomicWriteFile(path, OldFile(3)).ok());
  auto back = LoadClientState(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->legacy.has_value());
  EXPECT_EQ(back->legacy->x, (std::vector<float>{0.0f, 0.0f, 0.0f}));
  EXPECT_EQ(back->legacy->w, 0.5);
}

TEST(ClientState, AVersion4FileLoadsWithoutAnEcho) {
  const std::string path = Path("v4.state");
  ASSERT_TRUE(fedlgc::AtomicWriteFile(path, OldFile(4)).ok());
  auto back = LoadClientState(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->legacy.has_value());
  EXPECT_EQ(back->legacy->lgc_stage, 3u);
  EXPECT_EQ(back->legacy->lgc_support, (std::vector<uint32_t>{5}));
  EXPECT_EQ(back->legacy->lgc_values, (std::vector<float>{0.5f}));
  EXPECT_EQ(back->legacy->x, SampleLegacy().x);  // no share conversion after version 3
  EXPECT_EQ(back->legacy->w, 0.5);
}

TEST(ClientState, AVersion8FileLoadsWithoutAJob) {
  const std::string path = Path("v8.state");
  ASSERT_TRUE(fedlgc::AtomicWriteFile(path, OldFile(8)).ok());
  auto back = LoadClientState(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->pending.has_value());
  EXPECT_EQ(back->pending->frames, (std::vector<std::string>{"abc", "de"}));
  EXPECT_EQ(back->codec_state, Sample().codec_state);
  EXPECT_TRUE(back->pending->job.empty());  // kept whatever job the client joins
  EXPECT_EQ(back->legacy->scale_round, 0u);
}

TEST(ClientState, AVersion10FileLoadsWithoutItsLgcEcho) {
  const std::string path = Path("v10.state");
  ASSERT_TRUE(fedlgc::AtomicWriteFile(path, OldFile(10)).ok());
  auto back = LoadClientState(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->legacy->share, SampleLegacy().share);
  EXPECT_EQ(back->codec_state, Sample().codec_state);
  EXPECT_EQ(back->pending->job, "job-a");
  EXPECT_EQ(back->legacy->scale_round, 9u);
  EXPECT_EQ(back->legacy->scale_version, 8u);
}

TEST(ClientState, AVersion5FileLoadsWithoutCodecState) {
  // Versions 5 to 10 hold an LGC echo between the share and the codec state: skipped.
  const std::string path = Path("v5-old.state");
  ASSERT_TRUE(fedlgc::AtomicWriteFile(path, OldFile(5)).ok());
  auto back = LoadClientState(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->legacy->share, SampleLegacy().share);
  EXPECT_TRUE(back->codec_state.empty());
}

TEST(ClientState, ACorruptedFileIsRefused) {
  const std::string path = Path("bad.state");
  ASSERT_TRUE(SaveClientState(path, Sample()).ok());
  auto bytes = fedlgc::ReadFile(path).value();
  bytes[bytes.size() / 2] ^= 0x40;
  ASSERT_TRUE(fedlgc::AtomicWriteFile(path, bytes).ok());
  EXPECT_FALSE(LoadClientState(path).ok());
}

}  // namespace
}  // namespace fedlgc::edge_client
