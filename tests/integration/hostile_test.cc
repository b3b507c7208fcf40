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

#include "codecs/crc32c.h"
#include "codecs/registry.h"
#include "core/atomic_file.h"
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
  const uint32_t crc = codecs::Crc32c(f.data(), f.size() - 4);
  std::memcpy(f.data() + f.size() - 4, &crc, 4);
  return f;
}

// A certified client driven by the test over the raw protocol.
class RawClient {
 public:
  RawClient(const std::string& certs, const std::string& id, int port) : id_(id) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = **core::ReadFileIfExists(certs + "/ca.pem");
    ssl.pem_cert_chain = **core::ReadFileIfExists(certs + "/" + id + ".pem");
    ssl.pem_private_key = **core::ReadFileIfExists(certs + "/" + id + ".key");
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    stub_ = protos::Coordinator::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(port), grpc::SslCredentials(ssl), args));
  }
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
  EXPECT_TRUE(coord.get().engine().IsQuarantined("client-3"));
  EXPECT_EQ(coord.get().engine().Quarantined().size(), 1u);
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

}  // namespace
}  // namespace fedlgc::testing
