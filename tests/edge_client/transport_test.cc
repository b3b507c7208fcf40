// The edge client's transport against gMock's MockCoordinatorStub: an upload cut mid-way
// resumes with only the chunks the coordinator lacks, a receipt that holds only some
// chunks makes it send the rest, a closed round (FAILED_PRECONDITION) is not retried, a
// download resumes from its offset and starts over on a bad checksum, and a report for a
// round that moved on is not an error. Backoffs and round deadlines run on a fake clock.
#include "edge_client/transport.h"

#include <set>
#include <thread>

#include "base/crc32c.h"
#include "codecs/registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc_mock.grpc.pb.h"
#include "tests/core/fake_clock.h"
#include "tests/edge_client/fake_streams.h"

namespace fedlgc::edge_client {
namespace {

using ::testing::_;
using ::testing::Invoke;
using Upload = testing::FakeUploadStream<protos::UpdateChunk>;

struct Fixture {
  std::shared_ptr<protos::MockCoordinatorStub> stub =
      std::make_shared<protos::MockCoordinatorStub>();
  monitoring::Metrics metrics;
  core::FakeClock clock;
  std::unique_ptr<Transport> transport;

  // `real`: on the process's clock instead of the fake.
  explicit Fixture(bool real = false, double backoff_initial_s = 0.001,
                   double backoff_max_s = 0.002) {
    TransportOptions o;
    o.server = "127.0.0.1:1";  // never dialled: every call goes to the mock
    o.insecure = true;
    o.backoff_initial_s = backoff_initial_s;
    o.backoff_max_s = backoff_max_s;
    o.clock = real ? core::Clock::Real() : &clock;
    transport = std::make_unique<Transport>(
        o, &metrics, [stub = stub](const std::shared_ptr<grpc::Channel>&) { return stub; });
    EXPECT_TRUE(transport->Connect().ok());
  }

  // A round deadline 30 s away on the fixture's clock.
  SystemTime Later() const { return clock.WallNow() + std::chrono::seconds(30); }
};

// An update of `n` fp32 frames.
PendingUpdate Update(int n) {
  auto codec = codecs::MakeCodec("fp32").value();
  std::vector<codecs::Frame> frames;
  codecs::EncodeOptions o;
  o.max_frame_bytes = 512;
  EXPECT_TRUE(codec->Encode(std::vector<float>(100 * n, 0.25f), o, &frames).ok());
  PendingUpdate p;
  p.round = 3;
  p.update_id = 77;
  p.num_samples = 10;
  for (auto& f : frames) p.frames.push_back(std::move(f.bytes));
  EXPECT_GE(p.frames.size(), static_cast<size_t>(n));
  return p;
}

// A receipt holding `held`, for the update the stream carried (or was asked about).
Upload::Receipt Holds(std::set<uint32_t> held) {
  return [held](const std::vector<protos::UpdateChunk>& carried, protos::UploadReceipt* r) {
    if (!carried.empty()) r->set_update_id(carried.front().update_id());
    r->clear_held_chunks();
    for (uint32_t h : held) r->add_held_chunks(h);
  };
}

std::vector<uint32_t> Indices(const std::vector<protos::UpdateChunk>& sent) {
  std::vector<uint32_t> out;
  for (const auto& c : sent) out.push_back(c.frame().empty() ? 999 : c.chunk_index());
  return out;
}

std::set<uint32_t> All(const PendingUpdate& p) {
  std::set<uint32_t> all;
  for (uint32_t i = 0; i < p.frames.size(); ++i) all.insert(i);
  return all;
}

TEST(Transport, SleepLastsItsSecondsUnlessStopped) {
  Fixture fake;
  const auto start = fake.clock.Now();
  fake.transport->Sleep(0.3);
  EXPECT_EQ(fake.clock.Now() - start, std::chrono::milliseconds(300));
  fake.transport->Stop();
  fake.transport->Sleep(60);  // stopped: returns at once
  EXPECT_EQ(fake.clock.Now() - start, std::chrono::milliseconds(300));

  // On the real clock, Stop() from another thread ends a Sleep under way.
  Fixture f(/*real=*/true);
  std::thread stopper([&f] {
    // sleep: stops a Sleep of 0.3 s, the behaviour under test
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    f.transport->Stop();
  });
  const auto t0 = std::chrono::steady_clock::now();
  f.transport->Sleep(60);  // an edge's --linger, cut short by SIGTERM
  stopper.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(Transport, RetriesBackOffExponentiallyWithJitterUntilTheRoundsDeadline) {
  Fixture f(/*real=*/false, /*backoff_initial_s=*/0.2, /*backoff_max_s=*/5);
  const PendingUpdate p = Update(1);
  std::vector<core::Clock::time_point> tries;
  std::vector<protos::UpdateChunk> sent;
  EXPECT_CALL(*f.stub, UploadUpdateRaw(_, _))
      .WillRepeatedly(Invoke([&](grpc::ClientContext*, protos::UploadReceipt* r) {
        tries.push_back(f.clock.Now());
        return new Upload(&sent, r, grpc::Status(grpc::StatusCode::UNAVAILABLE, "down"), nullptr,
                          0);
      }));
  const SystemTime deadline = f.clock.WallNow() + std::chrono::seconds(60);
  const absl::Status st = f.transport->Upload(p, "fp32", deadline);
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  // Retry k waits between half and all of min(5 s, 0.2 s * 2^(k-1)): 0.2, 0.4, ... 3.2,
  // then 5 s each, until the 60 s of the round are gone.
  ASSERT_GE(tries.size(), 12u);
  for (size_t k = 1; k < tries.size(); ++k) {
    const double cap = std::min(5.0, 0.2 * (1 << std::min<size_t>(k - 1, 10)));
    const double waited = std::chrono::duration<double>(tries[k] - tries[k - 1]).count();
    EXPECT_GE(waited, 0.5 * cap - 1e-9) << "retry " << k;
    EXPECT_LE(waited, cap + 1e-9) << "retry " << k;
  }
  EXPECT_GE(f.clock.WallNow(), deadline);
  EXPECT_LT(f.clock.WallNow(), deadline + std::chrono::seconds(5));
}

TEST(Transport, AnUploadCutMidStreamResumesWithOnlyTheChunksTheCoordinatorLacks) {
  Fixture f;
  const PendingUpdate p = Update(4);
  const size_t n = p.frames.size();
  std::vector<protos::UpdateChunk> sent;
  EXPECT_CALL(*f.stub, UploadUpdateRaw(_, _))
      // The link breaks after two chunks.
      .WillOnce(Invoke([&](grpc::ClientContext*, protos::UploadReceipt* r) {
        return new Upload(&sent, r, grpc::Status(grpc::StatusCode::UNAVAILABLE, "cut"), nullptr, 2);
      }))
      // The query after the reconnect: the coordinator holds the two.
      .WillOnce(Invoke([&](grpc::ClientContext*, protos::UploadReceipt* r) {
        return new Upload(&sent, r, grpc::Status::OK, Holds({0, 1}));
      }))
      // The rest.
      .WillOnce(Invoke([&](grpc::ClientContext*, protos::UploadReceipt* r) {
        return new Upload(&sent, r, grpc::Status::OK, Holds(All(p)));
      }));
  ASSERT_TRUE(f.transport->Upload(p, "fp32", f.Later()).ok());
  std::vector<uint32_t> expect = {0, 1, 999};  // 999: the query (no frame)
  for (uint32_t i = 2; i < n; ++i) expect.push_back(i);
  EXPECT_EQ(Indices(sent), expect);
  for (const auto& c : sent) {
    EXPECT_EQ(c.update_id(), 77u);
    EXPECT_EQ(c.round(), 3u);
  }
}

TEST(Transport, AReceiptHoldingSomeChunksMakesItSendTheRest) {
  Fixture f;
  const PendingUpdate p = Update(3);
  const size_t n = p.frames.size();
  std::vector<protos::UpdateChunk> sent;
  EXPECT_CALL(*f.stub, UploadUpdateRaw(_, _))
      // Every chunk went out, but the coordinator (restarted meanwhile) holds only one.
      .WillOnce(Invoke([&](grpc::ClientContext*, protos::UploadReceipt* r) {
        return new Upload(&sent, r, grpc::Status::OK, Holds({1}));
      }))
      .WillOnce(Invoke([&](grpc::ClientContext*, protos::UploadReceipt* r) {
        return new Upload(&sent, r, grpc::Status::OK, Holds({1}));
      }))
      .WillOnce(Invoke([&](grpc::ClientContext*, protos::UploadReceipt* r) {
        return new Upload(&sent, r, grpc::Status::OK, Holds(All(p)));
      }));
  ASSERT_TRUE(f.transport->Upload(p, "fp32", f.Later()).ok());
  std::vector<uint32_t> expect;
  for (uint32_t i = 0; i < n; ++i) expect.push_back(i);
  expect.push_back(999);
  for (uint32_t i = 0; i < n; ++i) {
    if (i != 1) expect.push_back(i);
  }
  EXPECT_EQ(Indices(sent), expect);
}

TEST(Transport, AClosedRoundIsNotRetried) {
  Fixture f;
  const PendingUpdate p = Update(2);
  std::vector<protos::UpdateChunk> sent;
  EXPECT_CALL(*f.stub, UploadUpdateRaw(_, _))
      .Times(1)
      .WillOnce(Invoke([&](grpc::ClientContext*, protos::UploadReceipt* r) {
        return new Upload(&sent, r,
                          grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                       "round 3 is closed; no round is open"),
                          nullptr, 1);
      }));
  const absl::Status st = f.transport->Upload(p, "fp32", f.Later());
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_NE(std::string(st.message()).find("round 3 is closed"), std::string::npos) << st;
  EXPECT_EQ(sent.size(), 1u);
}

TEST(Transport, ASharesChunksGoThroughGossipWithTheirPushSumFields) {
  Fixture f;
  const PendingUpdate p = Update(2);
  std::vector<protos::GossipChunk> sent;
  EXPECT_CALL(*f.stub, UploadUpdateRaw(_, _)).Times(0);
  EXPECT_CALL(*f.stub, GossipRaw(_, _))
      .WillOnce(Invoke([&](grpc::ClientContext*, protos::UploadReceipt* r) {
        return new testing::FakeUploadStream<protos::GossipChunk>(
            &sent, r, grpc::Status::OK,
            [&](const std::vector<protos::GossipChunk>&, protos::UploadReceipt* out) {
              for (uint32_t i = 0; i < p.frames.size(); ++i) out->add_held_chunks(i);
            });
      }));
  ASSERT_TRUE(f.transport->Upload(p, "fp32", f.Later(), ShareFields{0.5, 7, 2}).ok());
  ASSERT_EQ(sent.size(), p.frames.size());
  for (const auto& g : sent) {
    EXPECT_EQ(g.weight(), 0.5);
    EXPECT_EQ(g.reference_version(), 7u);
    EXPECT_EQ(g.inbox_applied(), 2u);
  }
}

std::vector<protos::ModelChunk> Chunks(const std::string& blob, uint64_t from, uint64_t to,
                                       uint32_t crc) {
  protos::ModelChunk c;
  c.set_version(5);
  c.set_offset(from);
  c.set_total_bytes(blob.size());
  c.set_crc32c(crc);
  c.set_data(blob.substr(from, to - from));
  return {c};
}

TEST(Transport, ADownloadResumesFromItsOffsetAndStartsOverOnABadChecksum) {
  Fixture f;
  std::string blob(3000, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 7);
  const uint32_t crc = Crc32c(blob.data(), blob.size());
  std::vector<uint64_t> offsets;
  EXPECT_CALL(*f.stub, DownloadModelRaw(_, _))
      .WillOnce(Invoke([&](grpc::ClientContext*, const protos::ModelRequest& req) {
        offsets.push_back(req.offset());
        return new testing::FakeDownloadStream(Chunks(blob, 0, 1000, crc),
                                               grpc::Status(grpc::StatusCode::UNAVAILABLE, "cut"));
      }))
      .WillOnce(Invoke([&](grpc::ClientContext*, const protos::ModelRequest& req) {
        offsets.push_back(req.offset());
        // The rest, but the whole blob's checksum does not match: start over.
        return new testing::FakeDownloadStream(Chunks(blob, 1000, 3000, crc ^ 1), grpc::Status::OK);
      }))
      .WillOnce(Invoke([&](grpc::ClientContext*, const protos::ModelRequest& req) {
        offsets.push_back(req.offset());
        return new testing::FakeDownloadStream(Chunks(blob, 0, 3000, crc), grpc::Status::OK);
      }));
  auto got = f.transport->DownloadBlob("", 5, f.Later());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, blob);
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 1000, 0}));
}

// A chain of deltas from version 3 (as the coordinator marks one).
std::vector<protos::ModelChunk> ChainChunks(const std::string& blob, uint64_t from, uint64_t to,
                                            uint32_t crc) {
  std::vector<protos::ModelChunk> c = Chunks(blob, from, to, crc);
  c[0].set_chain(true);
  c[0].set_from_version(3);
  return c;
}

TEST(Transport, ACutChainOfDeltasResumesFromItsOffsetWithTheHeldVersion) {
  Fixture f;
  std::string blob(3000, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 13);
  const uint32_t crc = Crc32c(blob.data(), blob.size());
  std::vector<uint64_t> offsets, held;
  auto record = [&](const protos::ModelRequest& req) {
    offsets.push_back(req.offset());
    held.push_back(req.has_held_version() ? req.held_version() : 999);
  };
  EXPECT_CALL(*f.stub, DownloadModelRaw(_, _))
      .WillOnce(Invoke([&](grpc::ClientContext*, const protos::ModelRequest& req) {
        record(req);
        return new testing::FakeDownloadStream(ChainChunks(blob, 0, 1200, crc),
                                               grpc::Status(grpc::StatusCode::UNAVAILABLE, "cut"));
      }))
      .WillOnce(Invoke([&](grpc::ClientContext*, const protos::ModelRequest& req) {
        record(req);
        return new testing::FakeDownloadStream(ChainChunks(blob, 1200, 3000, crc),
                                               grpc::Status::OK);
      }));
  auto got = f.transport->DownloadModel("", 5, f.Later(), 3);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->bytes, blob);
  EXPECT_TRUE(got->chain);
  EXPECT_EQ(got->from, 3u);
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 1200}));
  EXPECT_EQ(held, (std::vector<uint64_t>{3, 3}));
}

// The coordinator restarted between two attempts and serves another blob: the second
// attempt either sees other totals (`shorter` false) or an offset past the new blob's end
// (true); both start over from offset 0 and end with the new blob.
void ExpectStartsOverWhenTheBlobChanged(bool shorter) {
  Fixture f;
  const std::string a(3000, 'a'), b(shorter ? 800 : 2000, 'b');
  const uint32_t crc_a = Crc32c(a.data(), a.size());
  const uint32_t crc_b = Crc32c(b.data(), b.size());
  std::vector<uint64_t> offsets;
  EXPECT_CALL(*f.stub, DownloadModelRaw(_, _))
      .WillOnce(Invoke([&](grpc::ClientContext*, const protos::ModelRequest& req) {
        offsets.push_back(req.offset());
        return new testing::FakeDownloadStream(ChainChunks(a, 0, 1000, crc_a),
                                               grpc::Status(grpc::StatusCode::UNAVAILABLE, "cut"));
      }))
      .WillOnce(Invoke([&](grpc::ClientContext*, const protos::ModelRequest& req) {
        offsets.push_back(req.offset());
        if (shorter) {
          return new testing::FakeDownloadStream(
              {}, grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "offset past the end"));
        }
        return new testing::FakeDownloadStream(ChainChunks(b, 1000, 2000, crc_b),
                                               grpc::Status::OK);
      }))
      .WillOnce(Invoke([&](grpc::ClientContext*, const protos::ModelRequest& req) {
        offsets.push_back(req.offset());
        return new testing::FakeDownloadStream(ChainChunks(b, 0, b.size(), crc_b),
                                               grpc::Status::OK);
      }));
  auto got = f.transport->DownloadModel("", 5, f.Later(), 3);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->bytes, b);
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 1000, 0}));
}

TEST(Transport, AResumedDownloadOfABlobThatChangedStartsOver) {
  ExpectStartsOverWhenTheBlobChanged(/*shorter=*/false);
  ExpectStartsOverWhenTheBlobChanged(/*shorter=*/true);
}

TEST(Transport, AReportForARoundThatMovedOnIsNotAnError) {
  Fixture f;
  EXPECT_CALL(*f.stub, Report(_, _, _))
      .WillOnce(::testing::Return(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")))
      .WillOnce(
          ::testing::Return(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "round moved")))
      .WillOnce(::testing::Return(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad loss")));
  protos::ProgressReport report;
  report.set_round(2);
  EXPECT_TRUE(f.transport->Report(report, f.Later()).ok());  // retried, then moved on
  const absl::Status bad = f.transport->Report(report, f.Later());
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
}

}  // namespace
}  // namespace fedlgc::edge_client
