// The edge client's framework against gMock's MockCoordinatorStub, with a recording
// ClientMode: it refuses a coordinator of another protocol version and a job of a mode it
// does not know, makes the job's mode once, hands it every event in order, stops at the
// end of the job, and comes back after a broken event stream.
#include "edge_client/edge_client.h"

#include <filesystem>

#include "core/model.h"
#include "core/protocol.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "protos/fedlgc_mock.grpc.pb.h"
#include "tests/edge_client/fake_streams.h"

namespace fedlgc::edge_client {
namespace {

using ::testing::_;
using ::testing::Invoke;

// Records what the event loop hands it.
class RecordingMode final : public ClientMode {
 public:
  explicit RecordingMode(std::vector<std::string>* log) : log_(log) {}
  absl::Status OnRoundStart(const protos::RoundStart& s) override {
    log_->push_back("start " + std::to_string(s.round()));
    return absl::OkStatus();
  }
  absl::Status OnReceipt(const protos::RoundReceipt& r) override {
    log_->push_back("receipt " + std::to_string(r.round()));
    return absl::OkStatus();
  }
  absl::Status OnModeEvent(const protos::ModeEvent& e) override {
    log_->push_back(e.has_lsgd_lead() ? "lead" : "mode event");
    return absl::OkStatus();
  }

 private:
  std::vector<std::string>* const log_;
};

struct Fixture {
  std::shared_ptr<protos::MockCoordinatorStub> stub =
      std::make_shared<protos::MockCoordinatorStub>();
  std::vector<std::string> log;
  std::vector<Mode> made;  // modes the factory was asked for

  void ExpectJoin(uint32_t protocol, const std::string& mode) {
    const uint64_t dim = core::Model::Create("mlp", 0).value()->dim();
    EXPECT_CALL(*stub, Join(_, _, _))
        .WillRepeatedly(Invoke(
            [=](grpc::ClientContext*, const protos::JoinRequest& req, protos::JoinReply* reply) {
              EXPECT_EQ(req.protocol_version(), kProtocolVersion);
              EXPECT_EQ(req.client_id(), "client-0");
              reply->set_model("mlp");
              reply->set_dim(dim);
              reply->set_current_round(1);
              reply->set_total_rounds(3);
              reply->set_mode(mode);
              reply->set_protocol_version(protocol);
              return grpc::Status::OK;
            }));
  }

  std::unique_ptr<EdgeClient> Client(const std::string& name) {
    EdgeClientOptions o;
    o.server = "127.0.0.1:1";  // never dialled: every call goes to the mock
    o.insecure = true;
    o.state_dir = ::testing::TempDir() + "/edge-client-" + name;
    std::filesystem::remove_all(o.state_dir);
    o.data = "synthetic:100";
    o.device = "cpu";
    o.backoff_initial_s = 0.001;
    o.backoff_max_s = 0.002;
    auto c = EdgeClient::Create(
        o,
        [this](Mode mode, ClientEnv&) -> absl::StatusOr<std::unique_ptr<ClientMode>> {
          made.push_back(mode);
          return std::make_unique<RecordingMode>(&log);
        },
        [stub = stub](const std::shared_ptr<grpc::Channel>&) { return stub; });
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }
};

protos::ServerEvent Start(uint64_t round) {
  protos::ServerEvent e;
  e.mutable_round_start()->set_round(round);
  return e;
}
protos::ServerEvent Receipt(uint64_t round) {
  protos::ServerEvent e;
  e.mutable_receipt()->set_round(round);
  return e;
}

// An event stream that plays `events`, then ends (as when the coordinator goes away).
testing::FakeEventStream* Playing(std::vector<protos::ServerEvent> events) {
  return new testing::FakeEventStream([events, i = size_t{0}]() mutable {
    return i < events.size() ? std::optional<protos::ServerEvent>(events[i++]) : std::nullopt;
  });
}

TEST(EdgeClient, RefusesACoordinatorOfAnotherProtocolVersion) {
  for (uint32_t theirs : {0u, kProtocolVersion + 1}) {
    Fixture f;
    f.ExpectJoin(theirs, "fedavg");
    EXPECT_CALL(*f.stub, EventsRaw(_)).Times(0);
    auto client = f.Client("protocol");
    ASSERT_NE(client, nullptr);
    const absl::Status st = client->Run();
    EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
    EXPECT_NE(std::string(st.message()).find("protocol version"), std::string::npos) << st;
    EXPECT_TRUE(f.made.empty()) << "no mode for a job it cannot talk to";
  }
}

TEST(EdgeClient, RefusesAJobOfAModeItDoesNotKnow) {
  Fixture f;
  f.ExpectJoin(kProtocolVersion, "gossip");
  EXPECT_CALL(*f.stub, EventsRaw(_)).Times(0);
  auto client = f.Client("mode");
  ASSERT_NE(client, nullptr);
  const absl::Status st = client->Run();
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_NE(std::string(st.message()).find("'gossip'"), std::string::npos) << st;
}

TEST(EdgeClient, HandsTheModeEveryEventInOrderAcrossABrokenStreamUntilTheJobEnds) {
  Fixture f;
  f.ExpectJoin(kProtocolVersion, "lsgd");
  protos::ServerEvent lead;
  lead.mutable_mode()->mutable_lsgd_lead()->set_round(1);
  protos::ServerEvent done;
  done.mutable_done()->set_rounds(3);
  EXPECT_CALL(*f.stub, EventsRaw(_))
      // The stream breaks after two events; the client joins again and reopens it.
      .WillOnce(Invoke([&](grpc::ClientContext*) {
        return Playing({Start(1), lead});
      }))
      .WillOnce(Invoke([&](grpc::ClientContext*) {
        return Playing({Receipt(1), Start(2), Receipt(2), done, Start(3)});
      }));
  auto client = f.Client("events");
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Run().ok());
  EXPECT_EQ(f.made, std::vector<Mode>{Mode::kLsgd}) << "the mode is made once";
  EXPECT_EQ(client->mode(), Mode::kLsgd);
  // Nothing after the end of the job reaches the mode.
  EXPECT_EQ(f.log,
            (std::vector<std::string>{"start 1", "lead", "receipt 1", "start 2", "receipt 2"}));
}

}  // namespace
}  // namespace fedlgc::edge_client
