// Every kind of malformed chunk sent over the real service gets a clear gRPC status and
// a fedlgc_rejected_total{reason} count, and none of them reaches the aggregate.
#include <grpcpp/grpcpp.h>

#include <cstring>
#include <limits>

#include "base/crc32c.h"
#include "base/file.h"
#include "codecs/powersgd_two_phase.h"
#include "codecs/registry.h"
#include "core/model.h"
#include "core/protocol.h"
#include "gtest/gtest.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.grpc.pb.h"
#include "tests/integration/harness.h"

namespace fedlgc::testing {
namespace {

// One nonzero `value` at the start of every 64-bucket: the bucket norm is |value|, so
// QSGD carries it exactly.
std::vector<float> Sparse(size_t dim, float value) {
  std::vector<float> x(dim, 0.0f);
  for (size_t i = 0; i < dim; i += 64) x[i] = value;
  return x;
}

std::vector<std::string> Frames(const std::string& spec, size_t dim, float value,
                                uint64_t max_frame_bytes = 0) {
  auto codec = codecs::MakeCodec(spec).value();
  std::vector<codecs::Frame> frames;
  codecs::EncodeOptions o;
  o.max_frame_bytes = max_frame_bytes;
  EXPECT_TRUE(codec->Encode(Sparse(dim, value), o, &frames).ok());
  std::vector<std::string> out;
  for (auto& f : frames) out.push_back(std::move(f.bytes));
  return out;
}

std::string Frame(const std::string& spec, size_t dim, float value) {
  return Frames(spec, dim, value)[0];
}

using EventStream = grpc::ClientReaderWriter<protos::ClientEvent, protos::ServerEvent>;

// Joins as client-0 and reads the first event, which must be the round's start.
void JoinAsClient0(protos::Coordinator::Stub& stub, grpc::ClientContext* events_ctx,
                   std::unique_ptr<EventStream>* events, protos::ServerEvent* ev) {
  grpc::ClientContext ctx;
  protos::JoinRequest req;
  req.set_client_id("client-0");
  req.set_num_samples(10);
  req.set_protocol_version(kProtocolVersion);
  protos::JoinReply reply;
  ASSERT_TRUE(stub.Join(&ctx, req, &reply).ok());
  *events = stub.Events(events_ctx);
  ASSERT_TRUE((*events)->Read(ev));
  ASSERT_TRUE(ev->has_round_start());
}

TEST(Malformed, EachKindGetsAStatusAndACount) {
  const std::string dir = FreshDir("malformed");
  const std::string certs = MakeCerts(dir, 1);
  auto o = CoordinatorDefaults(dir, certs);
  o.min_clients = 1;
  o.rounds = 1;
  o.round_timeout_s = 30;
  o.plan.codec = "qsgd(bits=8,bucket=64)";
  InProcessCoordinator coord(o);
  const size_t dim = core::Model::Create("mlp", 1).value()->dim();

  auto stub = protos::Coordinator::NewStub(ClientChannel(certs, "client-0", coord.port()));
  grpc::ClientContext events_ctx;
  std::unique_ptr<EventStream> events;
  protos::ServerEvent ev;
  ASSERT_NO_FATAL_FAILURE(JoinAsClient0(*stub, &events_ctx, &events, &ev));
  const uint64_t round = ev.round_start().round();

  auto upload = [&](const protos::UpdateChunk& c, protos::UploadReceipt* receipt = nullptr) {
    protos::UploadReceipt local;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto w = stub->UploadUpdate(&ctx, receipt ? receipt : &local);
    w->Write(c);
    w->WritesDone();
    return w->Finish();
  };
  auto chunk = [&](std::string frame) {
    protos::UpdateChunk c;
    c.set_client_id("client-0");
    c.set_round(round);
    c.set_update_id(42);
    c.set_chunk_index(0);
    c.set_chunk_count(1);
    c.set_num_samples(10);
    c.set_frame(std::move(frame));
    return c;
  };
  auto fix_crc = [](std::string f) {
    const uint32_t crc = Crc32c(f.data(), f.size() - 4);
    std::memcpy(f.data() + f.size() - 4, &crc, 4);
    return f;
  };
  const std::string good = Frame(o.plan.codec, dim, 0.01f);

  std::string bad_crc = good;
  bad_crc[bad_crc.size() / 2] ^= 1;
  EXPECT_EQ(upload(chunk(bad_crc)).error_code(), grpc::StatusCode::DATA_LOSS);

  auto wrong_round = chunk(good);
  wrong_round.set_round(round + 1);
  const grpc::Status wr = upload(wrong_round);
  EXPECT_EQ(wr.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(wr.error_message().find("is not open"), std::string::npos) << wr.error_message();

  EXPECT_EQ(upload(chunk(Frame(o.plan.codec, dim + 5, 0.01f))).error_code(),
            grpc::StatusCode::OUT_OF_RANGE);

  std::string nan_norm = good;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const size_t body = nan_norm.size() - 4 - (dim + (dim + 63) / 64 * 4);
  std::memcpy(nan_norm.data() + body, &nan, 4);
  EXPECT_EQ(upload(chunk(fix_crc(nan_norm))).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  const grpc::Status codec = upload(chunk(Frame("qsgd(bits=4,bucket=64)", dim, 0.01f)));
  EXPECT_EQ(codec.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(codec.error_message().find("this round uses"), std::string::npos);

  auto bad_index = chunk(good);
  bad_index.set_chunk_index(3);
  EXPECT_EQ(upload(bad_index).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Past the 4 MiB message limit: refused and counted before any decoding.
  EXPECT_EQ(upload(chunk(std::string(5 << 20, 'x'))).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);

  // A good chunk, the same chunk again (idempotent), the same frame as the update's other
  // chunk (its coordinates would count twice), then the real other chunk, which completes
  // the round.
  const auto halves = Frames(o.plan.codec, dim, 0.01f, good.size() / 2 + 1024);
  ASSERT_EQ(halves.size(), 2u);
  auto first = chunk(halves[0]);
  first.set_chunk_count(2);
  auto overlap = first;
  overlap.set_chunk_index(1);
  auto last = overlap;
  last.set_frame(halves[1]);
  protos::UploadReceipt receipt;
  const grpc::Status ok1 = upload(first, &receipt);
  ASSERT_TRUE(ok1.ok()) << ok1.error_message();
  EXPECT_EQ(receipt.held_chunks_size(), 1);
  const grpc::Status ok2 = upload(first, &receipt);
  ASSERT_TRUE(ok2.ok()) << ok2.error_message();
  EXPECT_EQ(receipt.duplicates(), 1u);
  const grpc::Status twice = upload(overlap);
  EXPECT_EQ(twice.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << twice.error_message();
  EXPECT_NE(twice.error_message().find("overlaps"), std::string::npos) << twice.error_message();
  ASSERT_TRUE(upload(last, &receipt).ok());
  EXPECT_EQ(receipt.held_chunks_size(), 2);

  ASSERT_TRUE(coord.Wait(std::chrono::seconds(30)));
  events_ctx.TryCancel();
  // The model moved by exactly the good update, and by nothing else.
  const auto before = core::Model::Create("mlp", 1).value()->GetFlat();
  const auto after = coord.get().engine().ModelVector();
  const auto expected = Sparse(dim, 0.01f);
  for (size_t i = 0; i < dim; ++i) ASSERT_NEAR(after[i] - before[i], expected[i], 1e-6) << i;

  const std::string text = ScrapeMetrics(coord.get().metrics_port());
  for (const char* reason : {"crc", "wrong_round", "range", "nonfinite", "codec", "bad_chunk_index",
                             "duplicate", "overlap", "oversized"}) {
    EXPECT_NE(text.find(std::string("fedlgc_rejected_total{reason=\"") + reason + "\"} 1"),
              std::string::npos)
        << reason << "\n"
        << text.substr(0, 3000);
  }
}

// Two-phase PowerSGD payloads are checked against the open round: a Q before the factor
// is out, a P made against another query, wrong sizes, non-finite values and frames of
// another codec are refused; a good P then Q (an update that replaces the P) moves the
// model by exactly P^ Q^T.
TEST(Malformed, TwoPhasePowerSgdPayloadsAreCheckedAgainstTheRound) {
  const std::string dir = FreshDir("malformed_powersgd");
  const std::string certs = MakeCerts(dir, 1);
  auto o = CoordinatorDefaults(dir, certs);
  o.min_clients = 1;
  o.rounds = 1;
  o.round_timeout_s = 30;
  o.plan.codec = "powersgd(rank=2,phases=2)";
  InProcessCoordinator coord(o);
  const codecs::ModelLayout layout = core::ModelLayoutOf("mlp").value();
  const auto t = codecs::PowerSgdTwoPhase::Create(o.plan.codec, layout).value();
  const size_t dim = layout.dim();

  auto stub = protos::Coordinator::NewStub(ClientChannel(certs, "client-0", coord.port()));
  grpc::ClientContext events_ctx;
  std::unique_ptr<EventStream> events;
  protos::ServerEvent ev;
  ASSERT_NO_FATAL_FAILURE(JoinAsClient0(*stub, &events_ctx, &events, &ev));
  const protos::RoundStart start = ev.round_start();
  ASSERT_EQ(start.fedavg().powersgd().query().size(), 4 * t.query_floats());
  EXPECT_TRUE(start.fedavg().powersgd().factor().empty());
  std::vector<float> query(t.query_floats());
  std::memcpy(query.data(), start.fedavg().powersgd().query().data(), 4 * query.size());

  auto upload = [&](uint64_t update_id, std::string frame) {
    protos::UpdateChunk c;
    c.set_client_id("client-0");
    c.set_round(start.round());
    c.set_update_id(update_id);
    c.set_chunk_index(0);
    c.set_chunk_count(1);
    c.set_num_samples(10);
    c.set_frame(std::move(frame));
    protos::UploadReceipt receipt;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto w = stub->UploadUpdate(&ctx, &receipt);
    w->Write(c);
    w->WritesDone();
    return w->Finish();
  };
  auto refused = [](const grpc::Status& st, const std::string& words) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_NE(st.error_message().find(words), std::string::npos) << st.error_message();
  };
  // An update of fp32-sized values in fc1 and fc2 (the compressed matrices) and the biases.
  std::vector<float> m(dim);
  for (size_t i = 0; i < dim; ++i) m[i] = 0.001f * static_cast<float>((i * 7919) % 13) - 0.006f;
  const std::vector<float> p = t.Project(m, query);
  const uint32_t query_tag = codecs::PowerSgdTwoPhase::Tag(query);
  // Stale (made against state the round no longer has, as after a coordinator restart):
  // FAILED_PRECONDITION, which a client takes as "the round moved on".
  auto stale = [](const grpc::Status& st, const std::string& words) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
    EXPECT_NE(st.error_message().find(words), std::string::npos) << st.error_message();
  };
  stale(upload(42, t.Frame(codecs::kPowerSgdMessageSpec, query_tag,
                           std::vector<float>(t.message_floats(), 0.0f))),
        "before the round's factor");
  stale(upload(42, t.Frame(codecs::kPowerSgdProjectionSpec, query_tag + 1, p)), "moved on");
  refused(upload(42, t.Frame(codecs::kPowerSgdProjectionSpec, query_tag,
                             std::span<const float>(p).first(p.size() - 1))),
          "bytes");
  std::vector<float> nan = p;
  nan[3] = std::numeric_limits<float>::quiet_NaN();
  refused(upload(42, t.Frame(codecs::kPowerSgdProjectionSpec, query_tag, nan)), "is nan");
  refused(upload(42, Frame("fp32", dim, 0.01f)), "two-phase PowerSGD payloads");
  ASSERT_TRUE(upload(42, t.Frame(codecs::kPowerSgdProjectionSpec, query_tag, p)).ok());
  // The factor comes as an event once the only participant's P is in.
  std::vector<float> factor;
  while (factor.empty() && events->Read(&ev)) {
    if (!ev.has_mode() || !ev.mode().has_powersgd_factor()) continue;
    const std::string& bytes = ev.mode().powersgd_factor().factor();
    ASSERT_EQ(bytes.size(), 4 * t.projection_floats());
    factor.resize(t.projection_floats());
    std::memcpy(factor.data(), bytes.data(), bytes.size());
  }
  ASSERT_FALSE(factor.empty());
  EXPECT_EQ(factor, t.Orthonormalize(p));  // one client: its own P, orthonormalized
  const std::vector<float> msg = t.Message(m, factor);
  const uint32_t factor_tag = codecs::PowerSgdTwoPhase::Tag(factor);
  std::vector<float> inf = msg;
  inf[5] = std::numeric_limits<float>::infinity();
  refused(upload(43, t.Frame(codecs::kPowerSgdMessageSpec, factor_tag, inf)), "is inf");
  stale(upload(43, t.Frame(codecs::kPowerSgdMessageSpec, query_tag, msg)), "moved on");
  ASSERT_TRUE(upload(43, t.Frame(codecs::kPowerSgdMessageSpec, factor_tag, msg)).ok());
  ASSERT_TRUE(coord.Wait(std::chrono::seconds(30)));
  events_ctx.TryCancel();
  const auto before = core::Model::Create("mlp", 1).value()->GetFlat();
  const auto after = coord.get().engine().ModelVector();
  std::vector<float> expected(dim, 0.0f);
  t.AddRebuilt(factor, msg, 1.0, expected);
  for (size_t i = 0; i < dim; ++i) ASSERT_NEAR(after[i] - before[i], expected[i], 1e-6) << i;
  const auto reports = coord.get().reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].uplink_bytes,
            t.FrameBytes(codecs::kPowerSgdProjectionSpec, t.projection_floats()) +
                t.FrameBytes(codecs::kPowerSgdMessageSpec, t.message_floats()));
}

}  // namespace
}  // namespace fedlgc::testing
