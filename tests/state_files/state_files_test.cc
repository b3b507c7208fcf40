// The twelve state file formats, each from the files its writers left in every version
// since fixtures were kept (fixtures/<format>-v<version>/): each loads to exactly the
// state it was written from. Run with FEDLGC_WRITE_STATE_FIXTURES=1 after a format's
// version changes: the current version's fixture is written beside the old ones, which
// are never rewritten (their writers are gone; only the converters that read them stay).
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "base/str.h"
#include "coordinator/checkpoint.h"
#include "coordinator/downlink_state.h"
#include "coordinator/model_keeper.h"
#include "edge_client/client_state.h"
#include "edge_client/downlink_receiver.h"
#include "gtest/gtest.h"
#include "modes/fedavg/fedavg_state.h"
#include "modes/lgc/lgc_state.h"
#include "modes/lsgd/lsgd_state.h"
#include "modes/sgp/sgp_state.h"
#include "tier/tier.h"

namespace fedlgc {
namespace {

constexpr uint64_t kRound = 5;
constexpr char kJob[] = "fedlgc-cnn@example";

// Values no accident reproduces: negative, tiny, huge, a fraction that float rounds.
std::vector<float> Values(size_t n, float seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = seed * (i % 2 ? -1.0f : 1.0f) / (1.0f + i) + 1e-7f * i;
  if (n > 2) v[2] = 3.0e38f;
  return v;
}

coordinator::EngineState Checkpoint() {
  coordinator::EngineState s;
  s.next_round = 12;
  s.model_version = 11;
  s.model = Values(6, 0.25f);
  s.momentum = Values(6, -0.5f);
  s.clients = {{"client-0", 60}, {"client-1", 45}};
  s.quarantined = {{"client-9", "update norm 3.1e+09 over the guard's bound"}};
  s.receipts["client-0"] = {{10, 77, 3, {0, 2}}, {11, 78, 1, {0}}};
  s.receipts["client-1"] = {{11, 5, 4, {}}};
  return s;
}

// The fields every mode shares.
edge_client::ClientState ClientStateCommon() {
  edge_client::ClientState s;
  s.codec = "topk(ratio=0.01,values=qsgd(bits=8))";
  s.residual = Values(5, 0.75f);
  s.codec_state = std::string("DGCS\0\x01 momentum", 16);
  s.codec_basis = "GVBQ basis bytes";
  edge_client::PendingUpdate p;
  p.round = 9;
  p.model_version = 8;
  p.update_id = 1234567;
  p.num_samples = 60;
  p.frames = {std::string("frame\0one", 9), "frame two"};
  p.scales = {0.5f, 0.25f};
  p.job = kJob;
  s.pending = p;
  return s;
}

// Version 12: each mode's state in its slot, bytes the file does not read.
edge_client::ClientState ClientState() {
  edge_client::ClientState s = ClientStateCommon();
  s.modes["fedavg"] = std::string("\x08\x09\x10\x08", 4);
  s.modes["lgc"] = std::string("lgc\0slot", 8);
  s.modes["sgp"] = std::string(1000, '\x7f');
  return s;
}

// Version 11 kept the modes' fields among its own: they load as the legacy fields.
edge_client::ClientState ClientStateV11() {
  edge_client::ClientState s = ClientStateCommon();
  edge_client::LegacyModeFields l;
  l.lgc_stage = 2;
  l.lgc_support = {1, 3, 4};
  l.lgc_values = {0.5f, -0.25f, 8.0f};
  l.psgd_phase = 2;
  l.psgd_factor = {0.6f, -0.8f};
  l.scale_round = 9;
  l.scale_version = 8;
  l.x = Values(5, 1.5f);
  l.w = 0.375;
  l.trained_round = 9;
  l.pulled_round = 8;
  l.loss = 0.4375;
  l.inbox_applied = 7;
  l.contributed = Values(5, 2.5f);
  l.share_pw = 0.125;
  l.share = Values(5, 0.5f);
  s.legacy = l;
  return s;
}

coordinator::DownlinkState Downlink() {
  return {"qsgd(bits=8,norm=linf)", kJob, 0xDEADBEEF, std::string("encoder\0state", 13)};
}

tier::KeptRound Kept() { return {9, 8, true, Values(4, 0.125f), Values(4, -2.0f)}; }

modes::LsgdState Lsgd() {
  modes::LsgdState s;
  s.refs = {Values(4, 1.0f), Values(4, -1.0f)};
  s.ref_versions = {7, 9};
  s.group_of = {{"client-0", 0}, {"client-1", 1}, {"client-2", 1}};
  s.rtt_ms = {{"client-0", 12.5}, {"client-2", 180.25}};
  s.pulled_leaders = {{0, "client-0"}, {1, "client-2"}};
  s.pull_global = true;
  s.global_leader = "client-2";
  return s;
}

std::vector<modes::SgpMail> SgpMail() {
  return {{"client-0", 4, 0.5, Values(4, 0.5f)},
          {"client-0", 5, 0.25, Values(4, 1.5f)},
          {"client-3", 5, 1.75, Values(4, -0.5f)}};
}

modes::LgcState Lgc() {
  return {40, std::string("autoencoder\0bytes", 17), {{"client-0", 3}, {"client-1", 5}}, 4};
}

constexpr uint64_t kDim = 4;  // of the mode states' models

coordinator::KeptModel KeptModel() {
  coordinator::KeptModel k;
  k.round = kRound;
  k.model_version = 5;
  k.job = "sha256:ab12/159010/qsgd(bits=8)/seed1";
  k.job_id = kJob;
  k.model = "net.pt";
  k.model_sha256 = std::string(64, 'c');
  k.buffers = "local";
  k.weights = Values(kDim, 0.875f);
  k.metric = "accuracy";
  k.evaluated_on = "server";
  k.accuracy = 0.8125;
  k.loss = 0.4375;
  return k;
}

// A format: the version its writer writes now, a writer into a folder, and a check that
// a folder's file loads to the example.
struct Format {
  std::string name;
  uint32_t current;
  std::function<absl::Status(const std::string& dir)> write;
  std::function<void(const std::string& dir, uint32_t version)> check;
};

std::vector<Format> Formats() {
  std::vector<Format> f;
  f.push_back(
      {"checkpoint", 3,
       [](const std::string& dir) { return coordinator::WriteCheckpoint(dir, kJob, Checkpoint()); },
       [](const std::string& dir, uint32_t) {
         auto s = coordinator::ReadCheckpoint(dir, kJob);
         ASSERT_TRUE(s.ok()) << s.status();
         ASSERT_TRUE(s->has_value());
         EXPECT_EQ(**s, Checkpoint());
       }});
  f.push_back({"client_state", 12,
               [](const std::string& dir) {
                 return edge_client::SaveClientState(dir + "/client-0.state", ClientState());
               },
               [](const std::string& dir, uint32_t version) {
                 auto s = edge_client::LoadClientState(dir + "/client-0.state");
                 ASSERT_TRUE(s.ok()) << s.status();
                 EXPECT_EQ(*s, version == 11 ? ClientStateV11() : ClientState());
               }});
  f.push_back({"downlink", 3,
               [](const std::string& dir) {
                 return coordinator::SaveDownlinkState(dir, "downlink", 7, Downlink());
               },
               [](const std::string& dir, uint32_t) {
                 auto s = coordinator::LoadDownlinkState(dir, "downlink", 7);
                 ASSERT_TRUE(s.ok()) << s.status();
                 EXPECT_EQ(*s, Downlink());
               }});
  f.push_back({"downlink_receiver", 2,
               [](const std::string& dir) {
                 edge_client::DownlinkReceiver r(dir + "/client-0.downlink");
                 if (absl::Status st = r.Configure("qsgd(bits=8)", kDim); !st.ok()) return st;
                 return r.Hold(7, Values(kDim, 0.625f));
               },
               [](const std::string& dir, uint32_t) {
                 edge_client::DownlinkReceiver r(dir + "/client-0.downlink");
                 ASSERT_TRUE(r.Configure("qsgd(bits=8)", kDim).ok());
                 EXPECT_EQ(r.held_version(), std::optional<uint64_t>(7));
                 EXPECT_EQ(r.model(), Values(kDim, 0.625f));
               }});
  f.push_back(
      {"tier", 3,
       [](const std::string& dir) { return tier::SaveKeptRound(dir + "/kept.bin", Kept()); },
       [](const std::string& dir, uint32_t) {
         auto s = tier::LoadKeptRound(dir + "/kept.bin");
         ASSERT_TRUE(s.ok()) << s.status();
         ASSERT_TRUE(s->has_value());
         EXPECT_EQ(**s, Kept());
       }});
  f.push_back({"powersgd_query", 2,
               [](const std::string& dir) {
                 return modes::SavePowerSgdQuery(dir, kRound, Values(6, 0.3f));
               },
               [](const std::string& dir, uint32_t) {
                 auto s = modes::LoadPowerSgdQuery(dir, kRound);
                 ASSERT_TRUE(s.ok()) << s.status();
                 EXPECT_EQ(*s, Values(6, 0.3f));
               }});
  f.push_back({"gradiveq", 2,
               [](const std::string& dir) {
                 return modes::SaveGradiveqBasis(dir, kRound, std::string("GVBQ\0basis", 10));
               },
               [](const std::string& dir, uint32_t) {
                 auto s = modes::LoadGradiveqBasis(dir, kRound);
                 ASSERT_TRUE(s.ok()) << s.status();
                 EXPECT_EQ(*s, std::string("GVBQ\0basis", 10));
               }});
  f.push_back(
      {"dp", 1,
       [](const std::string& dir) {
         return modes::SaveDpAccount(dir, kRound,
                                     {{1.5, 2, 64}, {0.25, 1e-9, 3.5e3}, 1e-5, 8, 1000});
       },
       [](const std::string& dir, uint32_t) {
         auto s = modes::LoadDpAccount(dir, kRound);
         ASSERT_TRUE(s.ok()) << s.status();
         EXPECT_EQ(*s, (modes::DpAccount{{1.5, 2, 64}, {0.25, 1e-9, 3.5e3}, 1e-5, 8, 1000}));
       }});
  f.push_back({"kept_model", 1,
               [](const std::string& dir) {
                 return coordinator::WriteKeptModel(dir + "/round-5.bin", KeptModel());
               },
               [](const std::string& dir, uint32_t) {
                 auto s = coordinator::ReadKeptModel(dir + "/round-5.bin");
                 ASSERT_TRUE(s.ok()) << s.status();
                 ASSERT_TRUE(s->has_value());
                 EXPECT_EQ(**s, KeptModel());
               }});
  f.push_back({"lgc", 5,
               [](const std::string& dir) { return modes::SaveLgcState(dir, kRound, Lgc()); },
               [](const std::string& dir, uint32_t version) {
                 auto s = modes::LoadLgcState(dir, kRound);
                 ASSERT_TRUE(s.ok()) << s.status();
                 modes::LgcState expected = Lgc();
                 if (version < 5) expected.switch_round = 0;  // before the switch was kept
                 EXPECT_EQ(*s, expected);
               }});
  f.push_back({"lsgd", 2,
               [](const std::string& dir) { return modes::SaveLsgdState(dir, kRound, Lsgd()); },
               [](const std::string& dir, uint32_t) {
                 auto s = modes::LoadLsgdState(dir, kRound, kDim);
                 ASSERT_TRUE(s.ok()) << s.status();
                 EXPECT_EQ(*s, Lsgd());
               }});
  f.push_back({"sgp", 2,
               [](const std::string& dir) {
                 std::vector<modes::SgpMail> mail = SgpMail();
                 std::vector<modes::SgpMailView> views;
                 for (const auto& m : mail) views.push_back({m.client, m.round, m.w, m.x});
                 return modes::SaveSgpState(dir, kRound, views);
               },
               [](const std::string& dir, uint32_t) {
                 auto s = modes::LoadSgpState(dir, kRound, kDim);
                 ASSERT_TRUE(s.ok()) << s.status();
                 EXPECT_EQ(*s, SgpMail());
               }});
  return f;
}

std::string FixtureDir(const Format& f, uint32_t version) {
  return StrCat(FEDLGC_STATE_FIXTURES, "/", f.name, "-v", version);
}

std::string TempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/state-files/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(StateFiles, EveryFormatRoundTripsItsExample) {
  for (const Format& f : Formats()) {
    SCOPED_TRACE(f.name);
    const std::string dir = TempDir(f.name);
    ASSERT_TRUE(f.write(dir).ok());
    f.check(dir, f.current);
  }
}

// Every kept fixture of every format loads to its example; the current version has one.
TEST(StateFiles, FilesOfEveryVersionKeptLoad) {
  const bool write = std::getenv("FEDLGC_WRITE_STATE_FIXTURES") != nullptr;
  for (const Format& f : Formats()) {
    SCOPED_TRACE(f.name);
    if (write) {
      const std::string dir = FixtureDir(f, f.current);
      std::filesystem::create_directories(dir);
      ASSERT_TRUE(f.write(dir).ok());
    }
    EXPECT_TRUE(std::filesystem::is_directory(FixtureDir(f, f.current)))
        << "no fixture of the current version " << f.current
        << ": run state_files_test with FEDLGC_WRITE_STATE_FIXTURES=1";
    int kept = 0;
    for (uint32_t v = 1; v <= f.current; ++v) {
      if (!std::filesystem::is_directory(FixtureDir(f, v))) continue;
      SCOPED_TRACE(StrCat("version ", v));
      // Loaders may tidy their folder; each loads from a copy.
      const std::string dir = TempDir(StrCat(f.name, "-v", v));
      std::filesystem::copy(FixtureDir(f, v), dir,
                            std::filesystem::copy_options::recursive |
                                std::filesystem::copy_options::overwrite_existing);
      f.check(dir, v);
      ++kept;
    }
    EXPECT_GE(kept, 1);
  }
}

}  // namespace
}  // namespace fedlgc
