// Every kind of malformed chunk sent over the real service gets a clear gRPC status and
// a fedlgc_rejected_total{reason} count, and none of them reaches the aggregate.
#include <grpcpp/grpcpp.h>

#include <cstring>
#include <limits>

#include "codecs/crc32c.h"
#include "codecs/registry.h"
#include "core/atomic_file.h"
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
  {
    grpc::ClientContext ctx;
    protos::JoinRequest req;
    req.set_client_id("client-0");
    req.set_num_samples(10);
    req.set_protocol_version(kProtocolVersion);
    protos::JoinReply reply;
    ASSERT_TRUE(stub->Join(&ctx, req, &reply).ok());
  }
  grpc::ClientContext events_ctx;
  auto events = stub->Events(&events_ctx);
  protos::ServerEvent ev;
  ASSERT_TRUE(events->Read(&ev));
  ASSERT_TRUE(ev.has_round_start());
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
    const uint32_t crc = codecs::Crc32c(f.data(), f.size() - 4);
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
  for (const char* reason :
       {"crc", "wrong_round", "range", "nonfinite", "codec", "bad_chunk_index", "duplicate",
        "overlap", "oversized"}) {
    EXPECT_NE(text.find(std::string("fedlgc_rejected_total{reason=\"") + reason + "\"} 1"),
              std::string::npos)
        << reason << "\n"
        << text.substr(0, 3000);
  }
}

}  // namespace
}  // namespace fedlgc::testing
