// The coordinator's service as a unit: the real service over its real engine and a driver
// that does nothing, served in this process (an in-process channel, no network) with a
// fake clock. Join tells the job and registers the client, or says why not; an upload
// that claims another client is refused; the model downloads whole with its checksum; a
// round start carries the deadline by the service's clock; and a call that makes no
// progress is cancelled once the clock passes the idle timeout, with no test waiting for
// it. (tests/integration/service_test.cc checks the same limits on a coordinator process.)
#include "coordinator/service.h"

#include <grpcpp/grpcpp.h>

#include <thread>

#include "base/crc32c.h"
#include "coordinator/collectors.h"
#include "core/float_bytes.h"
#include "core/protocol.h"
#include "gtest/gtest.h"
#include "protos/fedlgc.grpc.pb.h"
#include "tests/core/fake_clock.h"

namespace fedlgc::coordinator {
namespace {

// A driver with no rounds of its own: the service asks it nothing a test does not.
class IdleDriver final : public RoundDriver {
 public:
  Mode mode() const override { return Mode::kFedAvg; }
  absl::Status RunRound(RoundHost&, const std::vector<std::string>&, Clock::time_point,
                        CommitResult*, RoundReport*) override {
    return absl::UnimplementedError("not in this test");
  }
  void DecorateRoundStart(const std::string&, protos::RoundStart*) override {}
  absl::Status Save(uint64_t) override { return absl::OkStatus(); }
};

constexpr uint64_t kDim = 300;

struct Served {
  core::FakeClock clock;
  monitoring::Metrics metrics;
  std::unique_ptr<RoundEngine> engine;
  IdleDriver driver;
  std::unique_ptr<CoordinatorService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<protos::Coordinator::Stub> stub;

  Served() {
    EngineOptions eo;
    eo.clock = &clock;
    EngineState state;
    state.model.resize(kDim);
    for (uint64_t i = 0; i < kDim; ++i) state.model[i] = 0.001f * static_cast<float>(i);
    engine = std::make_unique<RoundEngine>(eo, state);
    JobInfo job{"fedlgc-test", "mlp", kDim, 5};
    ServiceOptions so;
    so.insecure = true;  // identity from the request (and the streams' metadata)
    so.watchdog = false;
    so.streams.idle_timeout_s = 120;
    so.clock = &clock;
    service = std::make_unique<CoordinatorService>(engine.get(), &driver, &metrics, job, so);
    grpc::ServerBuilder builder;
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
    stub = protos::Coordinator::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
  }
  ~Served() { server->Shutdown(); }

  grpc::Status Join(const std::string& id, uint64_t samples, protos::JoinReply* reply,
                    uint32_t protocol = kProtocolVersion) {
    protos::JoinRequest req;
    req.set_client_id(id);
    req.set_num_samples(samples);
    req.set_protocol_version(protocol);
    grpc::ClientContext ctx;
    return stub->Join(&ctx, req, reply);
  }
};

TEST(CoordinatorService, JoinTellsTheJobAndRegistersTheClient) {
  Served s;
  protos::JoinReply reply;
  ASSERT_TRUE(s.Join("a", 250, &reply).ok());
  EXPECT_EQ(reply.job_id(), "fedlgc-test");
  EXPECT_EQ(reply.dim(), kDim);
  EXPECT_EQ(reply.total_rounds(), 5u);
  EXPECT_EQ(reply.current_round(), 1u);
  EXPECT_EQ(reply.protocol_version(), kProtocolVersion);
  EXPECT_EQ(s.engine->roster().RegisteredSamples(), 250u);
}

TEST(CoordinatorService, AJoinIsRefusedWithItsReason) {
  Served s;
  protos::JoinReply reply;
  EXPECT_EQ(s.Join("", 10, &reply).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.Join("a", 0, &reply).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const grpc::Status old = s.Join("a", 10, &reply, kProtocolVersion + 1);
  EXPECT_EQ(old.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(old.error_message().find("protocol version"), std::string::npos);
  s.engine->roster().Quarantine("q", "scaled its updates");
  const grpc::Status q = s.Join("q", 10, &reply);
  EXPECT_EQ(q.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(q.error_message().find("scaled its updates"), std::string::npos);
  EXPECT_EQ(s.engine->roster().RegisteredSamples(), 0u);
}

TEST(CoordinatorService, AnUploadThatClaimsAnotherClientIsRefused) {
  Served s;
  protos::JoinReply reply;
  ASSERT_TRUE(s.Join("a", 10, &reply).ok());
  grpc::ClientContext ctx;
  ctx.AddMetadata("fedlgc-client-id", "a");
  protos::UploadReceipt receipt;
  auto writer = s.stub->UploadUpdate(&ctx, &receipt);
  protos::UpdateChunk chunk;
  chunk.set_client_id("b");
  chunk.set_round(1);
  chunk.set_update_id(9);
  chunk.set_chunk_count(1);
  writer->Write(chunk);
  writer->WritesDone();
  const grpc::Status st = writer->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(st.error_message().find("cannot upload as b"), std::string::npos) << st.error_message();
}

TEST(CoordinatorService, TheModelDownloadsWholeWithItsChecksum) {
  Served s;
  grpc::ClientContext ctx;
  ctx.AddMetadata("fedlgc-client-id", "a");
  protos::ModelRequest req;
  req.set_client_id("a");
  auto reader = s.stub->DownloadModel(&ctx, req);
  std::string bytes;
  protos::ModelChunk chunk;
  uint32_t crc = 0;
  while (reader->Read(&chunk)) {
    EXPECT_EQ(chunk.offset(), bytes.size());
    bytes += chunk.data();
    crc = chunk.crc32c();
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(bytes, core::FloatsToBytes(s.engine->ModelVector()));
  EXPECT_EQ(crc, Crc32c(bytes.data(), bytes.size()));
}

TEST(CoordinatorService, ARoundStartCarriesTheDeadlineByTheServicesClock) {
  Served s;
  s.engine->roster().Register("a", 10);
  auto sum = std::make_shared<WeightedSumCollector>(kDim);
  ASSERT_TRUE(s.engine->OpenRound({"a"}, s.clock.Now() + std::chrono::seconds(42), sum).ok());
  s.clock.Advance(std::chrono::seconds(2));  // 40 s left
  const auto e = RoundStartEventOf(*s.engine, s.driver, "a", s.clock);
  ASSERT_TRUE(e.has_value());
  const protos::RoundStart& start = e->round_start();
  EXPECT_EQ(start.round(), 1u);
  EXPECT_EQ(start.codec(), "fp32");
  const auto deadline = s.clock.WallNow() + std::chrono::seconds(40);
  EXPECT_EQ(
      start.deadline_unix_ms(),
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline.time_since_epoch()).count());
  EXPECT_FALSE(RoundStartEventOf(*s.engine, s.driver, "not-in-it", s.clock).has_value());
  EXPECT_FALSE(start.has_objective());
}

// An aggregator's local round trains as its parent asked (RoundTerms::UseTraining, from
// the parent's RoundStart), FedProx's term included.
TEST(CoordinatorService, ARoundStartCarriesTheParentsTraining) {
  Served s;
  s.engine->roster().Register("a", 10);
  s.engine->terms().UseTraining(LocalTraining{2, 0, 0.1f, 16, 0.25f});
  auto sum = std::make_shared<WeightedSumCollector>(kDim);
  ASSERT_TRUE(s.engine->OpenRound({"a"}, s.clock.Now() + std::chrono::seconds(42), sum).ok());
  const auto e = RoundStartEventOf(*s.engine, s.driver, "a", s.clock);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->round_start().local_epochs(), 2u);
  EXPECT_EQ(e->round_start().batch_size(), 16u);
  EXPECT_FLOAT_EQ(e->round_start().objective().prox_mu(), 0.25f);
}

TEST(CoordinatorService, ACallWithoutProgressIsCancelledOnceTheClockPassesTheIdleTimeout) {
  Served s;
  grpc::ClientContext ctx;
  ctx.AddMetadata("fedlgc-client-id", "a");
  protos::UploadReceipt receipt;
  auto writer = s.stub->UploadUpdate(&ctx, &receipt);
  // The call is open once the service has its ticket (no sleeping: it yields).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (s.service->calls().open() == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  ASSERT_EQ(s.service->calls().open(), 1u);
  s.clock.Advance(std::chrono::seconds(119));
  EXPECT_EQ(s.service->calls().CancelIdle(), 0);
  s.clock.Advance(std::chrono::seconds(2));
  EXPECT_EQ(s.service->calls().CancelIdle(), 1);
  EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(s.service->calls().idle_cancelled_total(), 1u);
}

}  // namespace
}  // namespace fedlgc::coordinator
