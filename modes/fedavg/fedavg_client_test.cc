// An edge client in a FedAvg job against gMock's MockCoordinatorStub, end to end through
// EdgeClient and FedAvgClient: it joins, trains the round, uploads its chunks, and a
// receipt that counts only some of them puts exactly the others back into the residual;
// an upload refused because the round closed (FAILED_PRECONDITION) is not retried, and the
// round's empty receipt puts the whole update back.
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include "base/crc32c.h"
#include "codecs/registry.h"
#include "codecs/terngrad.h"
#include "core/model.h"
#include "core/protocol.h"
#include "core/round_report.h"
#include "edge_client/edge_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "modes/clients.h"
#include "modes/fedavg/fedavg_state.pb.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc_mock.grpc.pb.h"
#include "tests/edge_client/fake_streams.h"

namespace fedlgc::modes {
namespace {

// The shared-scale round FedAvgClient saved in its slot (0: none).
uint64_t SavedScaleRound(const edge_client::ClientState& state) {
  pb::FedAvgClientState slot;
  const auto it = state.modes.find("fedavg");
  if (it == state.modes.end() || !slot.ParseFromString(it->second)) return 0;
  return slot.scale_round();
}

using ::testing::_;
using ::testing::Invoke;
using Upload = testing::FakeUploadStream<protos::UpdateChunk>;

// A coordinator scripted on a mock stub: one FedAvg round of an mlp, then the receipt
// the test chooses, then the end of the job.
// Round 1 of a job with `codec`, model version 0, two local steps, a minute to go.
protos::ServerEvent RoundOneStart(const std::string& codec) {
  protos::ServerEvent e;
  protos::RoundStart* s = e.mutable_round_start();
  s->set_round(1);
  s->set_model_version(0);
  s->set_codec(codec);
  s->set_local_steps(2);
  s->set_lr(0.05f);
  s->set_batch_size(16);
  s->set_seed(9);
  s->set_max_chunk_bytes(64 * 1024);
  s->set_deadline_unix_ms(
      std::chrono::duration_cast<std::chrono::milliseconds>(
          (std::chrono::system_clock::now() + std::chrono::minutes(1)).time_since_epoch())
          .count());
  s->mutable_fedavg();
  return e;
}

// After round 1's update went out (`sent`): step 0 its receipt, counting `counted`, step 1
// the job's end, then nothing.
std::optional<protos::ServerEvent> ReceiptThenDone(int step,
                                                   const std::vector<protos::UpdateChunk>& sent,
                                                   const std::set<uint32_t>& counted) {
  protos::ServerEvent e;
  if (step == 0) {
    protos::RoundReceipt* r = e.mutable_receipt();
    r->set_round(1);
    r->set_update_id(sent.empty() ? 0 : sent.front().update_id());
    r->set_chunk_count(sent.empty() ? 0 : sent.front().chunk_count());
    for (uint32_t c : counted) r->add_counted_chunks(c);
    return e;
  }
  if (step == 1) {
    e.mutable_done()->set_rounds(1);
    return e;
  }
  return std::nullopt;
}

struct ScriptedCoordinator {
  std::shared_ptr<protos::MockCoordinatorStub> stub =
      std::make_shared<protos::MockCoordinatorStub>();
  std::vector<float> model = core::Model::Create("mlp", 3).value()->GetFlat();
  std::vector<protos::UpdateChunk> sent;  // every chunk the client wrote
  grpc::Status upload_status = grpc::Status::OK;
  std::set<uint32_t> counted;  // chunks the round's receipt counts
  int uploads = 1;             // UploadUpdate calls expected
  std::string upload_order;    // RoundStart.upload_order

  int downloads = 0;  // DownloadModel calls

  // Join and the round's model, on `stub`.
  void ExpectJoinAndModel() {
    EXPECT_CALL(*stub, Join(_, _, _))
        .WillRepeatedly(Invoke(
            [this](grpc::ClientContext*, const protos::JoinRequest& req, protos::JoinReply* reply) {
              EXPECT_EQ(req.protocol_version(), kProtocolVersion);
              reply->set_model("mlp");
              reply->set_dim(model.size());
              reply->set_current_round(1);
              reply->set_total_rounds(1);
              reply->set_mode("fedavg");
              reply->set_protocol_version(kProtocolVersion);
              return grpc::Status::OK;
            }));
    EXPECT_CALL(*stub, DownloadModelRaw(_, _))
        .WillRepeatedly(Invoke([this](grpc::ClientContext*, const protos::ModelRequest& req) {
          ++downloads;
          EXPECT_EQ(req.blob(), "");
          EXPECT_EQ(req.version(), 0u);
          const std::string bytes(reinterpret_cast<const char*>(model.data()), model.size() * 4);
          protos::ModelChunk c;
          c.set_version(0);
          c.set_total_bytes(bytes.size());
          c.set_crc32c(Crc32c(bytes.data(), bytes.size()));
          c.set_data(bytes);
          return new testing::FakeDownloadStream({c}, grpc::Status::OK);
        }));
  }

  void Expect() {
    ExpectJoinAndModel();
    if (uploads == 0) {
      EXPECT_CALL(*stub, UploadUpdateRaw(_, _)).Times(0);
      ExpectEvents();
      return;
    }
    EXPECT_CALL(*stub, UploadUpdateRaw(_, _))
        .Times(uploads)  // a closed round is not retried; a complete upload needs no second call
        .WillRepeatedly(Invoke([this](grpc::ClientContext*, protos::UploadReceipt* r) {
          // A coordinator that refuses a chunk ends the call there.
          return new Upload(
              &sent, r, upload_status,
              [](const std::vector<protos::UpdateChunk>& carried, protos::UploadReceipt* out) {
                for (const auto& c : carried) out->add_held_chunks(c.chunk_index());
              },
              upload_status.ok() ? ~size_t{0} : 1);
        }));
    ExpectEvents();
  }

  void ExpectEvents() {
    EXPECT_CALL(*stub, EventsRaw(_)).WillOnce(Invoke([this](grpc::ClientContext*) {
      return new testing::FakeEventStream([this, step = 0]() mutable { return Event(step++); });
    }));
  }

  std::optional<protos::ServerEvent> Event(int step) {
    if (step > 0) return ReceiptThenDone(step - 1, sent, counted);
    protos::ServerEvent e = RoundOneStart("fp32");
    e.mutable_round_start()->set_upload_order(upload_order);
    return e;
  }
};

// `state`: what the client's state file holds when it starts (null: nothing); `keep`:
// start from the state an earlier client of this name left.
std::unique_ptr<edge_client::EdgeClient> Client(const std::string& name,
                                                const ScriptedCoordinator& coordinator,
                                                const std::string& attack = "none",
                                                const edge_client::ClientState* state = nullptr,
                                                bool keep = false) {
  edge_client::EdgeClientOptions o;
  o.attack = attack;
  o.server = "127.0.0.1:1";  // never dialled: every call goes to the mock
  o.insecure = true;
  o.client_id = "client-0";
  o.state_dir = ::testing::TempDir() + "/fedavg-client-" + name;
  if (!keep) std::filesystem::remove_all(o.state_dir);
  if (state != nullptr) {
    std::filesystem::create_directories(o.state_dir);
    EXPECT_TRUE(edge_client::SaveClientState(o.state_dir + "/client-0.state", *state).ok());
  }
  o.data = "synthetic:200";
  o.device = "cpu";
  o.backoff_initial_s = 0.001;
  o.backoff_max_s = 0.002;
  auto c = edge_client::EdgeClient::Create(
      o, &MakeClientMode,
      [stub = coordinator.stub](const std::shared_ptr<grpc::Channel>&) { return stub; });
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// Checks, chunk by chunk, that the residual holds exactly the values of the chunks the
// receipt did not count (decoded: fp32 carries what the client computed) and zero in the
// ranges of those it counted; returns the L1 norm of the uncounted values.
double CheckResidual(const std::vector<protos::UpdateChunk>& sent,
                     const std::set<uint32_t>& counted, const std::vector<float>& residual) {
  auto codec = codecs::MakeCodec("fp32").value();
  double uncounted = 0;
  uint64_t covered = 0;
  for (const auto& c : sent) {
    auto view = codecs::ParseFrame(c.frame(), codecs::FrameLimits()).value();
    std::vector<float> values(view.length);
    EXPECT_TRUE(codec->Decode(view, values).ok());
    const bool was_counted = counted.count(c.chunk_index()) > 0;
    for (uint64_t i = 0; i < view.length; ++i) {
      EXPECT_EQ(residual[view.begin + i], was_counted ? 0.0f : values[i])
          << "chunk " << c.chunk_index() << ", coordinate " << view.begin + i;
      if (!was_counted) uncounted += std::fabs(values[i]);
    }
    covered += view.length;
  }
  EXPECT_EQ(covered, residual.size()) << "the chunks tile the model";
  return uncounted;
}

TEST(FedAvgClient, AReceiptCountingSomeChunksPutsExactlyTheOthersBackIntoTheResidual) {
  ScriptedCoordinator coordinator;
  coordinator.counted = {0, 2};
  coordinator.Expect();
  auto client = Client("partial", coordinator);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Run().ok());
  ASSERT_GE(coordinator.sent.size(), 4u) << "the update should span several chunks";
  const auto& state = client->client_state();
  EXPECT_FALSE(state.pending.has_value());
  ASSERT_EQ(state.residual.size(), coordinator.model.size());
  EXPECT_GT(CheckResidual(coordinator.sent, coordinator.counted, state.residual), 0)
      << "training moved no coordinate of the uncounted chunks";
}

// P3's point: chunks leave by decoded energy per byte, so a receipt that counts only the
// first two (a client cut off by the deadline) counted the two most energetic frames, and
// exactly the others are back in the residual.
TEST(FedAvgClient, ByMagnitudeTheChunksThatCountedFirstCarryTheMostEnergy) {
  ScriptedCoordinator coordinator;
  coordinator.upload_order = "magnitude";
  coordinator.counted = {0, 1};
  coordinator.Expect();
  auto client = Client("magnitude", coordinator);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Run().ok());
  ASSERT_GE(coordinator.sent.size(), 4u);
  auto codec = codecs::MakeCodec("fp32").value();
  std::vector<std::pair<uint32_t, double>> density;  // chunk index, energy per byte
  bool reordered = false;
  uint64_t last_begin = 0;
  for (const auto& c : coordinator.sent) {
    auto view = codecs::ParseFrame(c.frame(), codecs::FrameLimits()).value();
    std::vector<float> values(view.length);
    ASSERT_TRUE(codec->Decode(view, values).ok());
    double e = 0;
    for (float v : values) e += double(v) * v;
    density.emplace_back(c.chunk_index(), e / c.frame().size());
    reordered |= c.chunk_index() > 0 && view.begin < last_begin;
    last_begin = view.begin;
  }
  for (size_t i = 1; i < density.size(); ++i) {
    EXPECT_EQ(density[i].first, i) << "chunks leave in index order";
    EXPECT_GE(density[i - 1].second, density[i].second) << "chunk " << i;
  }
  EXPECT_TRUE(reordered) << "an MLP update's energy is not in coordinate order";
  const auto& state = client->client_state();
  ASSERT_EQ(state.residual.size(), coordinator.model.size());
  EXPECT_GT(CheckResidual(coordinator.sent, coordinator.counted, state.residual), 0);
}

TEST(FedAvgClient, AnUploadToAClosedRoundIsNotRetriedAndAllOfItComesBack) {
  ScriptedCoordinator coordinator;
  coordinator.upload_status =
      grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "round 1 is closed; no round is open");
  coordinator.counted = {};  // the round's receipt counts nothing of it
  coordinator.Expect();
  auto client = Client("closed", coordinator);
  ASSERT_NE(client, nullptr);
  const absl::Status st = client->Run();
  EXPECT_TRUE(st.ok()) << "a closed round is not the client's error: " << st;
  ASSERT_EQ(coordinator.sent.size(), 1u);
  const auto& state = client->client_state();
  EXPECT_FALSE(state.pending.has_value());
  ASSERT_EQ(state.residual.size(), coordinator.model.size());
  // The upload stopped at its first refused chunk; the whole update is in the residual.
  double norm = 0;
  for (float r : state.residual) norm += std::fabs(r);
  EXPECT_GT(norm, 0);
  auto view = codecs::ParseFrame(coordinator.sent[0].frame(), codecs::FrameLimits()).value();
  std::vector<float> values(view.length);
  ASSERT_TRUE(codecs::MakeCodec("fp32").value()->Decode(view, values).ok());
  for (uint64_t i = 0; i < view.length; ++i) ASSERT_EQ(state.residual[view.begin + i], values[i]);
}

// An update in flight for this very round and model, coded with another codec than the
// round's (a coordinator restarted without the GradiVeQ basis it named), goes back into
// the residual and out again through the round's codec; the client does not train on the
// same model a second time and add that on top. What it sends is exactly the old update.
TEST(FedAvgClient, AnUpdateOfThisRoundInAnotherCodecGoesOutAgainWithoutTrainingTwice) {
  ScriptedCoordinator coordinator;
  coordinator.counted = {};
  coordinator.Expect();
  std::vector<float> old(coordinator.model.size());
  for (size_t i = 0; i < old.size(); ++i) old[i] = 0.001f * static_cast<float>(i % 97) - 0.04f;
  auto fp16 = codecs::MakeCodec("fp16").value();
  std::vector<codecs::Frame> frames;
  codecs::EncodeOptions eo;
  eo.max_frame_bytes = 64 * 1024;
  ASSERT_TRUE(fp16->Encode(old, eo, &frames).ok());
  edge_client::ClientState state;
  state.codec = "fp16";
  state.residual.assign(old.size(), 0.0f);  // an encode leaves one of the model's size
  state.pending.emplace();
  state.pending->round = 1;
  state.pending->model_version = 0;
  state.pending->update_id = 4242;
  for (codecs::Frame& f : frames) state.pending->frames.push_back(std::move(f.bytes));
  std::vector<float> sent_before(old.size());  // what fp16 carried of it
  for (const std::string& f : state.pending->frames) {
    auto view = codecs::ParseFrame(f, codecs::FrameLimits()).value();
    ASSERT_TRUE(
        fp16->Decode(view, std::span<float>(sent_before).subspan(view.begin, view.length)).ok());
  }
  auto client = Client("same-round-other-codec", coordinator, "none", &state);
  ASSERT_NE(client, nullptr);
  const absl::Status run = client->Run();
  ASSERT_TRUE(run.ok()) << run;
  ASSERT_FALSE(coordinator.sent.empty());
  std::vector<float> sent(old.size(), 0.0f);
  auto fp32 = codecs::MakeCodec("fp32").value();
  for (const auto& c : coordinator.sent) {
    auto view = codecs::ParseFrame(c.frame(), codecs::FrameLimits()).value();
    ASSERT_TRUE(fp32->Decode(view, std::span<float>(sent).subspan(view.begin, view.length)).ok());
  }
  EXPECT_EQ(sent, sent_before) << "the round's update is the old one, not the old one plus "
                                  "a second training";
  const auto log = ReadClientRoundLog(
      ::testing::TempDir() + "/fedavg-client-same-round-other-codec/client-0.rounds.jsonl");
  ASSERT_TRUE(log.ok());
  for (const auto& r : *log) {
    EXPECT_EQ(r.figures.count("train_seconds") ? r.figures.at("train_seconds") : 0.0, 0.0)
        << "no training ran";
  }
}

// TernGrad's shared scale at the edge: the client trains, keeps the update in its residual
// and reports its scale; restarted before the round's scale came, it finds the update
// there, trains no second time, and sends it once the scale arrives (here in the
// RoundStart it gets again after reconnecting) with that scale in every bucket.
TEST(FedAvgClient, ASharedScaleRoundsUpdateWaitsInTheResidualAcrossARestart) {
  const std::string spec = "terngrad(bucket=256,clip=2.5,shared=1)";
  ScriptedCoordinator coordinator;
  std::vector<float> reported;
  auto start = [&](float scale) {
    protos::ServerEvent e = RoundOneStart(spec);
    e.mutable_round_start()->mutable_fedavg()->set_terngrad_scale(scale);
    return e;
  };
  // The first run: the round starts, the client reports, and the stream ends with the
  // client stopped (a restart).
  {
    auto stub = std::make_shared<protos::MockCoordinatorStub>();
    coordinator.stub = stub;
    coordinator.ExpectJoinAndModel();
    std::unique_ptr<edge_client::EdgeClient> client;
    EXPECT_CALL(*stub, Report(_, _, _))
        .WillOnce(Invoke(
            [&](grpc::ClientContext*, const protos::ProgressReport& r, protos::ReportAck* ack) {
              EXPECT_EQ(r.round(), 1u);
              reported.push_back(r.fedavg().terngrad_scale());
              ack->set_round(1);
              client->Stop();
              return grpc::Status::OK;
            }));
    EXPECT_CALL(*stub, UploadUpdateRaw(_, _)).Times(0);
    EXPECT_CALL(*stub, EventsRaw(_)).WillRepeatedly(Invoke([&](grpc::ClientContext*) {
      return new testing::FakeEventStream([&, step = 0]() mutable {
        return step++ == 0 ? std::optional<protos::ServerEvent>(start(0)) : std::nullopt;
      });
    }));
    client = Client("shared-scale", coordinator);
    ASSERT_NE(client, nullptr);
    (void)client->Run();
    ASSERT_EQ(reported.size(), 1u);
    EXPECT_GT(reported[0], 0.0f);
    EXPECT_EQ(SavedScaleRound(client->client_state()), 1u);
    EXPECT_FALSE(client->client_state().pending.has_value());
  }
  ASSERT_EQ(coordinator.downloads, 1);
  const std::vector<float> waiting =
      edge_client::LoadClientState(::testing::TempDir() +
                                   "/fedavg-client-shared-scale/client-0.state")
          .value()
          .residual;
  // Restarted: the round starts again, now with its scale; the client sends, the receipt
  // counts everything, the job ends.
  const float scale = 1.5f * reported[0];
  auto stub = std::make_shared<protos::MockCoordinatorStub>();
  coordinator.stub = stub;
  coordinator.ExpectJoinAndModel();
  EXPECT_CALL(*stub, Report(_, _, _)).Times(0);
  EXPECT_CALL(*stub, UploadUpdateRaw(_, _))
      .WillOnce(Invoke([&](grpc::ClientContext*, protos::UploadReceipt* r) {
        return new Upload(
            &coordinator.sent, r, grpc::Status::OK,
            [](const std::vector<protos::UpdateChunk>& carried, protos::UploadReceipt* out) {
              for (const auto& c : carried) out->add_held_chunks(c.chunk_index());
            },
            ~size_t{0});
      }));
  EXPECT_CALL(*stub, EventsRaw(_)).WillOnce(Invoke([&](grpc::ClientContext*) {
    return new testing::FakeEventStream(
        [&, step = 0]() mutable -> std::optional<protos::ServerEvent> {
          if (step++ == 0) return start(scale);
          std::set<uint32_t> all;
          for (const auto& c : coordinator.sent) all.insert(c.chunk_index());
          return ReceiptThenDone(step - 2, coordinator.sent, all);
        });
  }));
  auto client = Client("shared-scale", coordinator, "none", nullptr, /*keep=*/true);
  ASSERT_NE(client, nullptr);
  const absl::Status run = client->Run();
  ASSERT_TRUE(run.ok()) << run;
  EXPECT_EQ(coordinator.downloads, 1) << "no second training on the round's model";
  ASSERT_FALSE(coordinator.sent.empty());
  auto decoder = codecs::TernGradRoundCodec::Create(spec, coordinator.model.size()).value();
  decoder->SetScale(scale);
  std::vector<float> sent(coordinator.model.size(), 0.0f);
  for (const auto& c : coordinator.sent) {
    auto view = codecs::ParseFrame(c.frame(), codecs::FrameLimits()).value();
    ASSERT_TRUE(decoder->Decode(view, std::span<float>(sent).subspan(view.begin, view.length)).ok())
        << "every bucket carries the round's scale";
  }
  // What went out is the waiting update, quantized: unbiased where nothing was clipped
  // (|v| <= scale), so it matches it on average over the coordinates.
  double dot = 0, vv = 0;
  for (size_t i = 0; i < sent.size(); ++i) {
    dot += double(sent[i]) * waiting[i];
    vv += double(waiting[i]) * waiting[i];
  }
  EXPECT_NEAR(dot / vv, 1.0, 0.2);
  EXPECT_EQ(SavedScaleRound(client->client_state()), 0u);
  EXPECT_FALSE(client->client_state().pending.has_value());
}

// A round the client cannot take part in is skipped, said and counted; the client goes on
// to the end of the job instead of exiting, with its residual untouched.
void ExpectSkipped(const std::string& name, ScriptedCoordinator& coordinator,
                   const std::string& attack) {
  coordinator.uploads = 0;
  coordinator.Expect();
  auto client = Client(name, coordinator, attack);
  ASSERT_NE(client, nullptr);
  const absl::Status st = client->Run();
  EXPECT_TRUE(st.ok()) << "one bad round is not fatal: " << st;
  EXPECT_TRUE(coordinator.sent.empty());
  const auto& state = client->client_state();
  EXPECT_FALSE(state.pending.has_value());
  for (float r : state.residual) ASSERT_EQ(r, 0.0f) << "nothing of the bad round is kept";
  const auto log =
      ReadClientRoundLog(::testing::TempDir() + "/fedavg-client-" + name + "/client-0.rounds.jsonl")
          .value();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].round, 1u);
  EXPECT_EQ(log[0].figures.at("skipped"), 1);
  double skipped = 0;
  for (const auto& family : client->metrics().registry()->Collect()) {
    if (family.name != "fedlgc_client_skipped_rounds_total") continue;
    for (const auto& m : family.metric) skipped += m.counter.value;
  }
  EXPECT_EQ(skipped, 1);
}

TEST(FedAvgClient, AModelThatIsNotFiniteIsSkippedNotFatal) {
  ScriptedCoordinator coordinator;
  coordinator.model[5] = std::numeric_limits<float>::infinity();
  ExpectSkipped("nonfinite-model", coordinator, "none");
}

TEST(FedAvgClient, AnUpdateThatCannotBeEncodedIsSkippedNotFatal) {
  ScriptedCoordinator coordinator;
  // Training's update times 1e300 overflows: the codec refuses to encode it.
  ExpectSkipped("unencodable", coordinator, "scale(factor=1e300)");
}

}  // namespace
}  // namespace fedlgc::modes
