// The edge client's framework against gMock's MockCoordinatorStub, with a recording
// ClientMode: it refuses a coordinator of another protocol version and a job of a mode it
// does not know, makes the job's mode once, hands it every event in order, stops at the
// end of the job, and comes back after a broken event stream.
#include "edge_client/edge_client.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

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
  // Its slot "recording": a "+" per Persist that saved it; "bad" does not load; a slot
  // that loads is logged.
  absl::Status LoadState(const ClientState& state) override {
    const auto it = state.modes.find("recording");
    if (it == state.modes.end()) return absl::OkStatus();
    if (it->second == "bad") return absl::DataLossError("the recording slot is malformed");
    log_->push_back("loaded");
    return absl::OkStatus();
  }
  absl::Status SaveState(std::map<std::string, std::string>* slots) const override {
    (*slots)["recording"] += "+";
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

  // The samples each Join said (the client's weight).
  std::vector<uint64_t> joined_with;

  void ExpectJoin(uint32_t protocol, const std::string& mode, const std::string& job = "",
                  uint64_t instance = 0) {
    const uint64_t dim = core::Model::Create("mlp", 0).value()->dim();
    EXPECT_CALL(*stub, Join(_, _, _))
        .WillRepeatedly(Invoke([=, this](grpc::ClientContext*, const protos::JoinRequest& req,
                                         protos::JoinReply* reply) {
          EXPECT_EQ(req.protocol_version(), kProtocolVersion);
          EXPECT_EQ(req.client_id(), "client-0");
          joined_with.push_back(req.num_samples());
          reply->set_job_id(job);
          reply->set_job_instance(instance);
          reply->set_model("mlp");
          reply->set_dim(dim);
          reply->set_current_round(1);
          reply->set_total_rounds(3);
          reply->set_mode(mode);
          reply->set_protocol_version(protocol);
          return grpc::Status::OK;
        }));
  }

  // `state`: what the client's state file holds when it starts.
  std::unique_ptr<EdgeClient> Client(const std::string& name, LocalTrainer* trainer = nullptr,
                                     const ClientState* state = nullptr) {
    EdgeClientOptions o;
    o.server = "127.0.0.1:1";  // never dialled: every call goes to the mock
    o.insecure = true;
    o.state_dir = ::testing::TempDir() + "/edge-client-" + name;
    std::filesystem::remove_all(o.state_dir);
    if (state != nullptr) {
      std::filesystem::create_directories(o.state_dir);
      EXPECT_TRUE(SaveClientState(o.state_dir + "/client-0.state", *state).ok());
    }
    // A trainer stands in for the data: a data set that cannot load proves none is read.
    o.data = trainer != nullptr ? "no-such-dataset" : "synthetic:100";
    o.device = "cpu";
    o.backoff_initial_s = 0.001;
    o.backoff_max_s = 0.002;
    auto c = EdgeClient::Create(
        o,
        [this](Mode mode, ClientEnv&) -> absl::StatusOr<std::unique_ptr<ClientMode>> {
          made.push_back(mode);
          return std::make_unique<RecordingMode>(&log);
        },
        [stub = stub](const std::shared_ptr<grpc::Channel>&) { return stub; }, trainer);
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

// A client whose state holds an update made for one job, joining a coordinator of
// another (it failed over from an aggregator to the root, say), gives the update up: the
// coordinator it was made for may have counted it. Joining the same job keeps it.
TEST(EdgeClient, AnUpdateMadeForAnotherJobIsGivenUpAtJoin) {
  ClientState state;
  state.pending.emplace();
  state.pending->round = 2;
  state.pending->update_id = 77;
  state.pending->frames = {"a", "b"};
  state.pending->job = "fedlgc-mlp@agg-0";
  protos::ServerEvent done;
  done.mutable_done()->set_rounds(3);
  for (const std::string job : {"fedlgc-mlp@agg-0", "fedlgc-mlp"}) {
    Fixture f;
    f.ExpectJoin(kProtocolVersion, "fedavg", job);
    EXPECT_CALL(*f.stub, EventsRaw(_)).WillOnce(Invoke([&](grpc::ClientContext*) {
      return Playing({done});
    }));
    auto client = f.Client("other-job", nullptr, &state);
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->Run().ok());
    const bool same = job == state.pending->job;
    EXPECT_EQ(client->client_state().pending.has_value(), same) << job;
    auto saved = LoadClientState(::testing::TempDir() + "/edge-client-other-job/client-0.state");
    ASSERT_TRUE(saved.ok()) << saved.status();
    EXPECT_EQ(saved->pending.has_value(), same) << "the state file, joining " << job;
  }
}

// A coordinator whose state folder was emptied starts the same job afresh, under another
// instance: a client whose state was made in the earlier instance gives all of it up (its
// update in flight, which the new job's round of the same number would otherwise take,
// its residual, its mode's slot). The same instance, a coordinator of before (instance 0)
// and another job (a failover) keep it; each records the job's instance. The files of the
// earlier run (held downlink models, local buffers) go with it.
TEST(EdgeClient, AJobStartedAfreshUnderAnotherInstanceGetsNothingOfTheEarlierOne) {
  ClientState state;
  state.residual = {0.5f, -0.25f};
  state.codec = "topk(ratio=0.01)";
  state.modes["recording"] = "";
  state.pending.emplace();
  state.pending->round = 5;
  state.pending->model_version = 4;
  state.pending->frames = {"a", "b"};
  state.pending->job = "fedlgc-mlp";
  state.job = "fedlgc-mlp";
  state.job_instance = 7;
  protos::ServerEvent done;
  done.mutable_done()->set_rounds(3);
  struct Case {
    std::string job;
    uint64_t instance;
    bool kept;
    uint64_t recorded;  // the instance the state file holds after
  };
  for (const Case& c : {Case{"fedlgc-mlp", 9, false, 9}, Case{"fedlgc-mlp", 7, true, 7},
                        Case{"fedlgc-mlp", 0, true, 7}, Case{"fedlgc-mlp@agg-0", 3, true, 3}}) {
    SCOPED_TRACE(c.job + " instance " + std::to_string(c.instance));
    Fixture f;
    f.ExpectJoin(kProtocolVersion, "fedavg", c.job, c.instance);
    EXPECT_CALL(*f.stub, EventsRaw(_)).WillOnce(Invoke([&](grpc::ClientContext*) {
      return Playing({done});
    }));
    auto client = f.Client("instance", nullptr, &state);
    ASSERT_NE(client, nullptr);
    // The earlier run's held models and local buffers, and another client's held model.
    const std::string dir = ::testing::TempDir() + "/edge-client-instance/";
    const std::vector<std::string> mine = {"client-0.downlink", "client-0.downlink-torchscript",
                                           "client-0.buffers"};
    for (const std::string& name : mine) std::ofstream(dir + name) << "earlier";
    std::ofstream(dir + "client-01.downlink") << "another client's";
    ASSERT_TRUE(client->Run().ok());
    for (const std::string& name : mine) {
      EXPECT_EQ(std::filesystem::exists(dir + name), c.kept) << name;
    }
    EXPECT_TRUE(std::filesystem::exists(dir + "client-01.downlink"));
    auto saved = LoadClientState(::testing::TempDir() + "/edge-client-instance/client-0.state");
    ASSERT_TRUE(saved.ok()) << saved.status();
    // Another job's update in flight is given up either way (it may have counted there).
    EXPECT_EQ(saved->pending.has_value(), c.kept && c.job == state.job);
    EXPECT_EQ(saved->residual, c.kept ? state.residual : std::vector<float>{});
    EXPECT_EQ(saved->codec, c.kept ? state.codec : "");
    EXPECT_EQ(f.log, c.kept ? std::vector<std::string>{"loaded"} : std::vector<std::string>{})
        << "the mode loads its slot only from the same instance's state";
    EXPECT_EQ(saved->job, c.job == state.job || c.instance != 0 ? c.job : state.job);
    EXPECT_EQ(saved->job_instance, c.recorded);
  }
}

// A mode's slot that does not load stops the client with the file named (no retry mends
// it); a good one is loaded once, before any event, and saved with every Persist.
TEST(EdgeClient, AModeSlotThatDoesNotLoadStopsTheClientNamingTheFile) {
  ClientState state;
  state.modes["recording"] = "bad";
  Fixture f;
  f.ExpectJoin(kProtocolVersion, "fedavg");
  EXPECT_CALL(*f.stub, EventsRaw(_)).Times(0);
  auto client = f.Client("bad-slot", nullptr, &state);
  ASSERT_NE(client, nullptr);
  const absl::Status st = client->Run();
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_NE(std::string(st.message()).find("edge-client-bad-slot/client-0.state"),
            std::string::npos)
      << st;
  EXPECT_NE(std::string(st.message()).find("recording slot is malformed"), std::string::npos);
  EXPECT_EQ(f.joined_with.size(), 1u);  // not retried

  // A pending update of another job is given up at Join: a Persist, which saves the slot.
  ClientState good;
  good.modes["recording"] = "";
  good.pending.emplace();
  good.pending->frames = {"a"};
  good.pending->job = "another-job";
  protos::ServerEvent done;
  done.mutable_done()->set_rounds(3);
  Fixture g;
  g.ExpectJoin(kProtocolVersion, "fedavg", "this-job");
  EXPECT_CALL(*g.stub, EventsRaw(_)).WillOnce(Invoke([&](grpc::ClientContext*) {
    return Playing({done});
  }));
  auto ok = g.Client("good-slot", nullptr, &good);
  ASSERT_NE(ok, nullptr);
  ASSERT_TRUE(ok->Run().ok());
  ASSERT_FALSE(g.log.empty());
  EXPECT_EQ(g.log.front(), "loaded");
  auto saved = LoadClientState(::testing::TempDir() + "/edge-client-good-slot/client-0.state");
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_FALSE(saved->pending.has_value());
  EXPECT_EQ(saved->modes.at("recording"), "+");
}

// A trainer that says its samples and trains nothing, without evaluation or statistics
// (an aggregator's, whose clients send nothing).
class IdleTrainer final : public LocalTrainer {
 public:
  explicit IdleTrainer(uint64_t samples) : samples_(samples) {}
  uint64_t NumSamples() override { return samples_; }
  absl::StatusOr<double> Train(const protos::RoundStart&, std::vector<float>*) override {
    return absl::NotFoundError("nothing this round");
  }

 private:
  const uint64_t samples_;
};

// A client with a LocalTrainer (an aggregator's upstream client) loads no data and joins
// with the trainer's samples as its weight.
TEST(EdgeClient, ALocalTrainerStandsInForTheShard) {
  IdleTrainer trainer(1234);
  Fixture f;
  f.ExpectJoin(kProtocolVersion, "fedavg");
  protos::ServerEvent done;
  done.mutable_done()->set_rounds(3);
  EXPECT_CALL(*f.stub, EventsRaw(_)).WillOnce(Invoke([&](grpc::ClientContext*) {
    return Playing({done});
  }));
  auto client = f.Client("trainer", &trainer);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Run().ok());
  EXPECT_EQ(f.joined_with, std::vector<uint64_t>{1234});
}

// A trainer without evaluation or statistics (an aggregator's upstream client) declines
// the coordinator's evaluation and statistics requests at once, saying why, and never
// downloads the model for them.
TEST(EdgeClient, ATrainerWithoutHooksDeclinesEvaluationAndStatisticsWithoutDownloading) {
  IdleTrainer trainer(10);
  Fixture f;
  f.ExpectJoin(kProtocolVersion, "fedavg");
  // Answers are due in ten minutes (a passed deadline would send none).
  const int64_t due =
      std::chrono::duration_cast<std::chrono::milliseconds>(
          (std::chrono::system_clock::now() + std::chrono::minutes(10)).time_since_epoch())
          .count();
  protos::ServerEvent eval;
  eval.mutable_eval()->set_round(1);
  eval.mutable_eval()->set_model_version(1);
  eval.mutable_eval()->set_deadline_unix_ms(due);
  protos::ServerEvent stats;
  stats.mutable_statistics()->set_round(1);
  stats.mutable_statistics()->set_model_version(1);
  stats.mutable_statistics()->set_deadline_unix_ms(due);
  protos::ServerEvent done;
  done.mutable_done()->set_rounds(3);
  EXPECT_CALL(*f.stub, EventsRaw(_)).WillOnce(Invoke([&](grpc::ClientContext*) {
    return Playing({eval, stats, done});
  }));
  EXPECT_CALL(*f.stub, DownloadModelRaw(_, _)).Times(0);
  std::vector<std::string> declined;
  EXPECT_CALL(*f.stub, Report(_, _, _))
      .Times(2)
      .WillRepeatedly(
          Invoke([&](grpc::ClientContext*, const protos::ProgressReport& r, protos::ReportAck*) {
            declined.push_back(r.has_eval() ? "eval: " + r.eval().declined()
                                            : "statistics: " + r.statistics().declined());
            return grpc::Status::OK;
          }));
  auto client = f.Client("trainer-declines", &trainer);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Run().ok());
  EXPECT_EQ(declined,
            (std::vector<std::string>{"eval: the trainer does not evaluate",
                                      "statistics: the trainer does not re-estimate statistics"}));
}

}  // namespace
}  // namespace fedlgc::edge_client
