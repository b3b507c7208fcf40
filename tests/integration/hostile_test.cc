// Participants that lie, over the real service with valid certificates: a client of the
// test's own that sends input passing every check of a chunk (a finite bucket norm near
// the float limit, a huge sample count, overlapping ranges), and a real edge client that
// scales its updates by a million with clipping off. Neither stops the federation: the
// honest clients finish, every committed model is finite, the round log is valid JSON, the
// liar is refused, clipped or quarantined, and the metrics say so.
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "base/crc32c.h"
#include "base/file.h"
#include "codecs/registry.h"
#include "core/model.h"
#include "core/protocol.h"
#include "core/round_report.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "protos/fedlgc.grpc.pb.h"
#include "tests/integration/harness.h"

namespace fedlgc::testing {
namespace {

std::string FixCrc(std::string f) {
  const uint32_t crc = Crc32c(f.data(), f.size() - 4);
  std::memcpy(f.data() + f.size() - 4, &crc, 4);
  return f;
}

// A certified client driven by the test over the raw protocol.
class RawClient {
 public:
  RawClient(const std::string& certs, const std::string& id, int port)
      : id_(id), stub_(protos::Coordinator::NewStub(ClientChannel(certs, id, port))) {}
  ~RawClient() {
    if (events_) events_ctx_.TryCancel();
  }

  grpc::Status Join(uint64_t samples) {
    grpc::ClientContext ctx;
    protos::JoinRequest req;
    req.set_client_id(id_);
    req.set_num_samples(samples);
    req.set_protocol_version(kProtocolVersion);
    protos::JoinReply reply;
    return stub_->Join(&ctx, req, &reply);
  }
  void OpenEvents() { events_ = stub_->Events(&events_ctx_); }
  // The next event; false when the stream ended.
  bool Next(protos::ServerEvent* ev) { return events_->Read(ev); }

  grpc::Status Upload(const protos::UpdateChunk& c) {
    protos::UploadReceipt receipt;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    auto w = stub_->UploadUpdate(&ctx, &receipt);
    w->Write(c);
    w->WritesDone();
    return w->Finish();
  }
  protos::UpdateChunk Chunk(uint64_t round, uint64_t update, uint32_t index, uint32_t count,
                            std::string frame) const {
    protos::UpdateChunk c;
    c.set_client_id(id_);
    c.set_round(round);
    c.set_update_id(update);
    c.set_chunk_index(index);
    c.set_chunk_count(count);
    c.set_num_samples(1'000'000'000'000'000);  // claimed: never a weight
    c.set_frame(std::move(frame));
    return c;
  }

 private:
  const std::string id_;
  std::unique_ptr<protos::Coordinator::Stub> stub_;
  grpc::ClientContext events_ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<protos::ClientEvent, protos::ServerEvent>> events_;
};

// Every line of the round log is JSON with finite numbers, and every model it describes
// was evaluated.
std::vector<RoundReport> CheckRoundLog(const std::string& state_dir, size_t rounds) {
  std::ifstream in(state_dir + "/rounds.jsonl");
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    EXPECT_EQ(line.find("nan"), std::string::npos) << line;
    EXPECT_EQ(line.find("inf"), std::string::npos) << line;
    EXPECT_TRUE(nlohmann::json::accept(line)) << line;
  }
  EXPECT_EQ(n, rounds);
  return ReadRoundLog(state_dir + "/rounds.jsonl").value();
}

// The value of one series in a Prometheus text exposition; -1 when absent.
double Metric(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

void ExpectFinite(const std::vector<float>& model) {
  for (size_t i = 0; i < model.size(); ++i) ASSERT_TRUE(std::isfinite(model[i])) << i;
}

TEST(Hostile, InputThatPassesEveryCheckCannotStopTheFederation) {
  const std::string dir = FreshDir("hostile-input");
  const std::string certs = MakeCerts(dir, 3);
  auto o = CoordinatorDefaults(dir, certs);
  o.plan.codec = "qsgd(bits=8,bucket=64)";
  o.plan.max_chunk_bytes = 96 * 1024;
  InProcessCoordinator coord(o);
  const size_t dim = core::Model::Create("mlp", 1).value()->dim();

  // The liar joins first, claiming 10^15 samples, and takes part in every round.
  RawClient liar(certs, "client-2", coord.port());
  ASSERT_TRUE(liar.Join(1'000'000'000'000'000).ok());
  liar.OpenEvents();
  std::vector<std::unique_ptr<ClientThread>> honest;
  for (int i = 0; i < 2; ++i) {
    honest.push_back(std::make_unique<ClientThread>(ClientDefaults(dir, certs, i, 3, coord.port())));
  }
  // An update of two chunks: [0, h) whose first bucket norm is the largest float (finite;
  // its values reach 1e36), and [h, dim).
  auto codec = codecs::MakeCodec(o.plan.codec).value();
  std::vector<codecs::Frame> frames;
  codecs::EncodeOptions eo;
  eo.max_frame_bytes = 96 * 1024;
  ASSERT_TRUE(codec->Encode(std::vector<float>(dim, 0.01f), eo, &frames).ok());
  ASSERT_EQ(frames.size(), 2u);
  std::string huge = frames[0].bytes;
  auto view = codecs::ParseFrame(huge, codecs::FrameLimits{}).value();
  const size_t norms_at = huge.size() - 4 - (view.length + (view.length + 63) / 64 * 4);
  const float big = std::numeric_limits<float>::max();
  std::memcpy(huge.data() + norms_at, &big, 4);
  huge = FixCrc(huge);

  int rounds_attacked = 0;
  protos::ServerEvent ev;
  while (liar.Next(&ev)) {
    if (ev.has_done()) break;
    if (!ev.has_round_start()) continue;
    const uint64_t round = ev.round_start().round();
    const uint64_t update = 100 + round;
    // Scaled by 16 after decoding it overflows: refused.
    auto scaled = liar.Chunk(round, update, 0, 2, huge);
    scaled.set_scale(16);
    const grpc::Status inf = liar.Upload(scaled);
    EXPECT_EQ(inf.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << inf.error_message();
    EXPECT_NE(inf.error_message().find("not finite"), std::string::npos) << inf.error_message();
    // Unscaled it is finite and accepted; clipping bounds what it does.
    const grpc::Status finite = liar.Upload(liar.Chunk(round, update, 0, 2, huge));
    EXPECT_TRUE(finite.ok()) << finite.error_message();
    // The same coordinates again as the other chunk: refused, they would count twice.
    const grpc::Status twice = liar.Upload(liar.Chunk(round, update, 1, 2, huge));
    EXPECT_EQ(twice.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << twice.error_message();
    const grpc::Status rest = liar.Upload(liar.Chunk(round, update, 1, 2, frames[1].bytes));
    EXPECT_TRUE(rest.ok()) << rest.error_message();
    ++rounds_attacked;
  }
  EXPECT_EQ(rounds_attacked, 3);
  for (auto& c : honest) {
    ASSERT_TRUE(c->Wait(std::chrono::seconds(120)));
    EXPECT_TRUE(c->result().ok()) << "an honest client never exits on a bad model: "
                                  << c->result();
  }
  ASSERT_TRUE(coord.Wait(std::chrono::seconds(30)));
  ASSERT_TRUE(coord.result().ok()) << coord.result();
  ExpectFinite(coord.get().engine().ModelVector());
  const auto log = CheckRoundLog(o.state_dir, 3);
  for (const RoundReport& r : log) {
    EXPECT_EQ(r.participants, 3) << "the liar's update counts, clipped";
    EXPECT_EQ(r.Figure("clipped"), 1) << r.round;
    EXPECT_GT(r.per_client.at("update_norm").at("client-2"), 1e30);
    EXPECT_EQ(r.Label("guard"), "passed");
  }
  // Clipped to 3 x the lower median norm with a third of the weight (not 10^15 samples'
  // worth): the model moved about as the honest clients moved it.
  EXPECT_GT(log.back().accuracy, 0.5);
  const std::string text = ScrapeMetrics(coord.get().metrics_port());
  EXPECT_EQ(Metric(text, "fedlgc_rejected_total{reason=\"nonfinite\"}"), 3);
  EXPECT_EQ(Metric(text, "fedlgc_rejected_total{reason=\"overlap\"}"), 3);
  EXPECT_EQ(Metric(text, "fedlgc_clipped_updates_total"), 3);
}

TEST(Hostile, WithoutClippingTheGuardQuarantinesAClientThatScalesItsUpdates) {
  const std::string dir = FreshDir("hostile-guard");
  const std::string certs = MakeCerts(dir, 4);
  auto o = CoordinatorDefaults(dir, certs);
  o.min_clients = 4;
  o.clip_multiplier = 0;  // the guard alone stands between the liar and the model
  InProcessCoordinator coord(o);
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < 4; ++i) {
    auto c = ClientDefaults(dir, certs, i, 4, coord.port());
    if (i == 3) c.attack = "scale(factor=1e6)";
    clients.push_back(std::make_unique<ClientThread>(c));
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(clients[i]->Wait(std::chrono::seconds(120)));
    EXPECT_TRUE(clients[i]->result().ok()) << clients[i]->result();
  }
  ASSERT_TRUE(coord.Wait(std::chrono::seconds(60)));
  ASSERT_TRUE(coord.result().ok()) << coord.result();
  clients[3]->get().Stop();
  ASSERT_TRUE(clients[3]->Wait(std::chrono::seconds(30)));
  ExpectFinite(coord.get().engine().ModelVector());
  const auto log = CheckRoundLog(o.state_dir, 3);
  // Round 1: the candidate with the liar is refused; without its update (the largest) it
  // passes, and the liar is barred for the rest of the job.
  EXPECT_EQ(log[0].Label("guard"), "refused:norm");
  EXPECT_EQ(log[0].Figure("guard_excluded"), 1);
  EXPECT_EQ(log[0].participants, 3);
  for (size_t r = 1; r < log.size(); ++r) {
    EXPECT_EQ(log[r].Label("guard"), "passed");
    EXPECT_EQ(log[r].per_client.at("update_norm").count("client-3"), 0u) << "not asked again";
  }
  EXPECT_GT(log.back().accuracy, 0.5);
  EXPECT_TRUE(coord.get().engine().roster().IsQuarantined("client-3"));
  EXPECT_EQ(coord.get().engine().roster().Quarantined().size(), 1u);
  const std::string text = ScrapeMetrics(coord.get().metrics_port());
  EXPECT_EQ(Metric(text, "fedlgc_quarantined_clients"), 1);
  EXPECT_EQ(Metric(text, "fedlgc_client_quarantined{client=\"client-3\"}"), 1);
  EXPECT_EQ(Metric(text, "fedlgc_guard_refusals_total{check=\"norm\"}"), 1);
  // It stays barred: a Join now is refused, and the checkpoint keeps it.
  RawClient again(certs, "client-3", coord.port());
  const grpc::Status join = again.Join(10);
  EXPECT_EQ(join.error_code(), grpc::StatusCode::PERMISSION_DENIED) << join.error_message();
  EXPECT_NE(join.error_message().find("quarantined"), std::string::npos);
}

// Eight clients over mTLS, client-7 running `attack` (empty: honest); `defended`: the
// default clipping and guard, else neither. Returns the round log.
std::vector<RoundReport> RunEight(const std::string& name, const std::string& attack,
                                  bool defended) {
  const std::string dir = FreshDir(name);
  const std::string certs = MakeCerts(dir, 8);
  auto o = CoordinatorDefaults(dir, certs);
  o.min_clients = 8;
  o.rounds = 3;
  // Fashion-MNIST (a slice): the synthetic task is learned even through x100.
  o.test_data = "fashion-mnist";
  o.eval_limit = 1000;
  if (!defended) {
    o.clip_multiplier = 0;
    o.guard.enabled = false;
  }
  InProcessCoordinator coord(o);
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < 8; ++i) {
    auto c = ClientDefaults(dir, certs, i, 8, coord.port());
    c.data = "fashion-mnist";
    c.train_limit = 4000;
    if (i == 7 && !attack.empty()) c.attack = attack;
    clients.push_back(std::make_unique<ClientThread>(c));
  }
  for (auto& c : clients) {
    EXPECT_TRUE(c->Wait(std::chrono::seconds(180)));
    EXPECT_TRUE(c->result().ok()) << c->result();
  }
  EXPECT_TRUE(coord.Wait(std::chrono::seconds(60)));
  EXPECT_TRUE(coord.result().ok()) << coord.result();
  return CheckRoundLog(o.state_dir, 3);
}

// One liar of eight, as in bench/robustness.sh but small (MLP, 4000 Fashion-MNIST training
// examples, 3 rounds):
// x100 is clipped in every round and costs little accuracy; a sign flip is not clipped (it
// has an honest norm) and costs little; without the defences x100 ruins the model.
TEST(Hostile, OneLiarOfEightScaledOrSignFlipped) {
  const auto honest = RunEight("eight-honest", "", true);
  const auto scaled = RunEight("eight-scaled", "scale(factor=100)", true);
  const auto flipped = RunEight("eight-flipped", "signflip(factor=1)", true);
  const auto open = RunEight("eight-scaled-undefended", "scale(factor=100)", false);
  ASSERT_EQ(honest.size(), 3u);
  ASSERT_EQ(scaled.size(), 3u);
  ASSERT_EQ(flipped.size(), 3u);
  ASSERT_EQ(open.size(), 3u);
  const double base = honest.back().accuracy;
  std::printf("final accuracy (loss): honest %.4f (%.3f), x100 %.4f (%.3f), sign flip %.4f "
              "(%.3f), x100 undefended %.4f (%.3g)\n",
              base, honest.back().loss, scaled.back().accuracy, scaled.back().loss,
              flipped.back().accuracy, flipped.back().loss, open.back().accuracy,
              open.back().loss);
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(honest[r].Figure("clipped"), 0) << "round " << r + 1;
    EXPECT_EQ(scaled[r].Figure("clipped"), 1) << "round " << r + 1;
    EXPECT_EQ(scaled[r].participants, 8);
    EXPECT_GT(scaled[r].per_client.at("update_norm").at("client-7"),
              20 * scaled[r].per_client.at("update_norm").at("client-0"));
    EXPECT_EQ(flipped[r].Figure("clipped"), 0) << "round " << r + 1;
  }
  EXPECT_GT(base, 0.5);
  EXPECT_GT(scaled.back().accuracy, base - 0.05);
  EXPECT_GT(flipped.back().accuracy, base - 0.05);
  EXPECT_LT(open.back().accuracy, base - 0.2) << "x100 undefended must hurt: else the test "
                                                 "shows nothing";
}

// A fuzz of UploadUpdate over the real service: honest frames of the round's codec,
// mutated (bits flipped, bytes set to special floats, truncated; most with the checksum
// fixed so the decoders see them) and sent with mutated chunk fields. Every call gets one
// of the statuses of the refusal table, every refusal is counted, the coordinator commits
// its round, and the model stays finite. FUZZ_CALLS sets the number of calls (1500).
TEST(Hostile, MutatedHonestChunksOverTheWireGetAStatusAndLeaveTheModelFinite) {
  const std::string dir = FreshDir("hostile-fuzz");
  const std::string certs = MakeCerts(dir, 1);
  auto o = CoordinatorDefaults(dir, certs);
  o.min_clients = 1;
  o.rounds = 1;
  o.round_timeout_s = 30;  // the update never completes: the round closes at its deadline
  o.plan.codec = "topk(ratio=0.05,values=qsgd(bits=8,bucket=16))";
  InProcessCoordinator coord(o);
  const size_t dim = core::Model::Create("mlp", 1).value()->dim();
  RawClient liar(certs, "client-0", coord.port());
  ASSERT_TRUE(liar.Join(100).ok());
  liar.OpenEvents();
  protos::ServerEvent ev;
  while (liar.Next(&ev) && !ev.has_round_start()) {
  }
  ASSERT_TRUE(ev.has_round_start());
  const uint64_t round = ev.round_start().round();

  std::mt19937_64 rng(2024);
  std::normal_distribution<float> gauss(0.0f, 0.01f);
  std::vector<float> x(dim);
  for (float& v : x) v = gauss(rng);
  auto codec = codecs::MakeCodec(o.plan.codec).value();
  std::vector<codecs::Frame> encoded;
  codecs::EncodeOptions eo;
  eo.max_frame_bytes = 4096;
  ASSERT_TRUE(codec->Encode(x, eo, &encoded).ok());
  std::vector<std::string> frames;
  for (auto& f : encoded) frames.push_back(f.bytes);
  const uint32_t count = static_cast<uint32_t>(frames.size());
  ASSERT_GE(count, 4u);

  const char* env = std::getenv("FUZZ_CALLS");
  const int calls = env ? std::atoi(env) : 1500;
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min(),
                            1e30f,
                            -0.0f};
  std::map<grpc::StatusCode, int> statuses;
  int accepted = 0;
  // One update of more chunks than calls: each call takes a chunk index of its own, so
  // every mutation that passes the chunk's fields reaches the decoder (a frame whose
  // coordinates overlap what is held is refused after decoding).
  // The first call is an honest chunk, so the update's chunk count is fixed from then on.
  const uint32_t chunks = static_cast<uint32_t>(calls) + count;
  for (int call = 0; call < calls; ++call) {
    const uint32_t index = static_cast<uint32_t>(call);
    std::string f = frames[rng() % count];
    if (call == 0) {
      const grpc::Status st = liar.Upload(liar.Chunk(round, 7, index, chunks, f));
      ASSERT_TRUE(st.ok()) << st.error_message();
      ++statuses[st.error_code()];
      ++accepted;
      continue;
    }
    switch (rng() % 5) {
      case 0:
      case 1:  // a few bits flipped
        for (int k = 1 + static_cast<int>(rng() % 3); k > 0; --k) {
          f[rng() % f.size()] ^= static_cast<char>(1u << (rng() % 8));
        }
        break;
      case 2: {  // a special float written over four bytes of the body
        const float v = specials[rng() % std::size(specials)];
        const size_t at = 16 + rng() % (f.size() - 24);
        std::memcpy(f.data() + at, &v, 4);
        break;
      }
      case 3:  // truncated
        f.resize(8 + rng() % (f.size() - 8));
        break;
      default:  // another chunk's frame
        f = frames[rng() % count];
        break;
    }
    if (rng() % 10 != 0 && f.size() > 4) f = FixCrc(f);
    auto chunk = liar.Chunk(round, 7, index, chunks, f);
    switch (rng() % 8) {
      case 0:
        chunk.set_scale(specials[rng() % std::size(specials)]);
        break;
      case 1:
        chunk.set_chunk_index(chunks + static_cast<uint32_t>(rng() % 1000));
        break;
      case 2:
        chunk.set_chunk_count(static_cast<uint32_t>(rng() % (2 * chunks)));
        break;
      case 3:
        chunk.set_round(round + 1 - rng() % 3);
        break;
      default:
        break;
    }
    const grpc::Status st = liar.Upload(chunk);
    ++statuses[st.error_code()];
    if (st.ok()) ++accepted;
  }
  ASSERT_TRUE(coord.Wait(std::chrono::seconds(60)));
  ASSERT_TRUE(coord.result().ok()) << coord.result();
  ExpectFinite(coord.get().engine().ModelVector());
  CheckRoundLog(o.state_dir, 1);
  const std::set<grpc::StatusCode> allowed = {
      grpc::StatusCode::OK,
      grpc::StatusCode::INVALID_ARGUMENT,
      grpc::StatusCode::DATA_LOSS,
      grpc::StatusCode::OUT_OF_RANGE,
      grpc::StatusCode::UNIMPLEMENTED,
      grpc::StatusCode::FAILED_PRECONDITION,
      grpc::StatusCode::RESOURCE_EXHAUSTED};
  int refused = 0;
  for (const auto& [code, n] : statuses) {
    EXPECT_TRUE(allowed.count(code)) << "status " << code << " x" << n;
    if (code != grpc::StatusCode::OK) refused += n;
    std::printf("status %d: %d calls\n", static_cast<int>(code), n);
  }
  EXPECT_GT(refused, calls / 2) << "mutations are refused far more often than not";
  // Every refusal counted: the rejections add up to the refused calls plus the duplicates
  // among the accepted ones.
  const std::string text = ScrapeMetrics(coord.get().metrics_port());
  const double counted = SumMetric(text, "fedlgc_rejected_total");
  const double duplicates = Metric(text, "fedlgc_rejected_total{reason=\"duplicate\"}");
  EXPECT_EQ(counted - duplicates, refused) << text.substr(0, 4000);
  EXPECT_EQ(duplicates, 0);
  EXPECT_GT(Metric(text, "fedlgc_rejected_total{reason=\"crc\"}"), 0);
  EXPECT_GT(Metric(text, "fedlgc_rejected_total{reason=\"nonfinite\"}"), 0);
  EXPECT_GT(Metric(text, "fedlgc_rejected_total{reason=\"overlap\"}"), 0);
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace fedlgc::testing
