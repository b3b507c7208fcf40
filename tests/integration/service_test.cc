// The service's answers to what a client can send that is not what the protocol says,
// over the real service: bytes that are not a message on every call, messages over the
// size limit, more open calls than a client may hold, calls that stop making progress,
// and hundreds of downloads nobody reads (the coordinator's memory, as a process).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>

#include "base/file.h"
#include "core/protocol.h"
#include "gtest/gtest.h"
#include "protos/fedlgc.grpc.pb.h"
#include "tests/integration/harness.h"

namespace fedlgc::testing {
namespace {

using std::chrono::seconds;

grpc::ByteBuffer Bytes(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

// A call of `method` that writes `messages` as raw bytes, closes its side and reads every
// answer: any call of the service looks like this on the wire.
class RawCall final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
          std::vector<std::string> messages)
      : messages_(std::move(messages)) {
    ctx_.set_deadline(std::chrono::system_clock::now() + seconds(20));
    grpc::GenericStub stub(channel);
    stub.PrepareBidiStreamingCall(&ctx_, method, grpc::StubOptions(), this);
    StartRead(&in_);
    NextWrite();
    StartCall();
  }
  void OnWriteDone(bool ok) override {
    if (ok) NextWrite();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    ++answers_;
    StartRead(&in_);
  }
  void OnDone(const grpc::Status& s) override {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = s;
    done_ = true;
    cv_.notify_all();
  }
  grpc::Status Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }

 private:
  void NextWrite() {
    if (next_ < messages_.size()) {
      out_ = Bytes(messages_[next_++]);
      StartWrite(&out_);
    } else {
      StartWritesDone();
    }
  }

  grpc::ClientContext ctx_;
  std::vector<std::string> messages_;
  size_t next_ = 0;
  grpc::ByteBuffer in_, out_;
  int answers_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  grpc::Status status_;
};

grpc::Status Raw(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                 std::vector<std::string> messages) {
  RawCall call(channel, "/fedlgc.protos.Coordinator/" + method, std::move(messages));
  return call.Wait();
}

double Counted(int metrics_port, const std::string& reason) {
  const std::string text = ScrapeMetrics(metrics_port);
  const std::string series = "\nfedlgc_rejected_total{reason=\"" + reason + "\"} ";
  const size_t at = text.find(series);
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size()));
}

TEST(Service, BytesThatAreNotAMessageGetInvalidArgumentOnEveryCall) {
  const std::string dir = FreshDir("service-garbage");
  const std::string certs = MakeCerts(dir, 1);
  auto o = CoordinatorDefaults(dir, certs);
  o.rounds = 1;
  InProcessCoordinator coord(o);
  auto ch = ClientChannel(certs, "client-0", coord.port());
  // Ten 0xff bytes: a varint longer than any protobuf allows.
  const std::string garbage(10, '\xff');
  protos::UpdateChunk valid;
  valid.set_round(1);
  const std::string valid_bytes = valid.SerializeAsString();
  const std::vector<std::pair<std::string, std::vector<std::string>>> calls = {
      {"Join", {garbage}},
      {"Report", {garbage}},
      {"DownloadModel", {garbage}},
      {"Events", {garbage}},
      {"UploadUpdate", {garbage, valid_bytes}},  // what follows is not read: the call says so
      {"Gossip", {garbage}},
  };
  for (const auto& [method, messages] : calls) {
    const grpc::Status st = Raw(ch, method, messages);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << method << ": " << st.error_message();
    EXPECT_NE(st.error_message().find("bytes that are not a fedlgc.protos."), std::string::npos)
        << method << ": " << st.error_message();
  }
  EXPECT_EQ(Counted(coord.get().metrics_port(), "malformed"), 6);
}

TEST(Service, MessagesOverTheLimitAreRefusedAndCounted) {
  const std::string dir = FreshDir("service-oversized");
  const std::string certs = MakeCerts(dir, 1);
  auto o = CoordinatorDefaults(dir, certs);
  o.rounds = 1;
  o.max_message_bytes = 1 << 20;
  o.plan.max_chunk_bytes = 512 * 1024;
  InProcessCoordinator coord(o);
  auto ch = ClientChannel(certs, "client-0", coord.port());
  protos::UpdateChunk big;
  big.set_round(1);
  big.set_frame(std::string(1536 * 1024, 'x'));  // 1.5 MiB: over the limit, under gRPC's
  const grpc::Status upload = Raw(ch, "UploadUpdate", {big.SerializeAsString()});
  EXPECT_EQ(upload.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << upload.error_message();
  EXPECT_NE(upload.error_message().find("--max-message-bytes"), std::string::npos);
  protos::JoinRequest join;
  join.set_client_id(std::string(1100 * 1024, 'c'));
  const grpc::Status j = Raw(ch, "Join", {join.SerializeAsString()});
  EXPECT_EQ(j.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << j.error_message();
  EXPECT_EQ(Counted(coord.get().metrics_port(), "oversized"), 2);
  // Past twice the limit gRPC's transport cuts the call before the service sees it.
  big.set_frame(std::string(3 << 20, 'x'));
  EXPECT_EQ(Raw(ch, "UploadUpdate", {big.SerializeAsString()}).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

double MetricValue(int port, const std::string& series) {
  const std::string text = ScrapeMetrics(port);
  const size_t at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
}

TEST(Service, OpenCallsPerClientAreCappedAndIdleOnesCancelled) {
  const std::string dir = FreshDir("service-limits");
  const std::string certs = MakeCerts(dir, 2);
  auto o = CoordinatorDefaults(dir, certs);
  o.rounds = 1;
  o.streams.per_client = 2;
  o.streams.idle_timeout_s = 1.5;
  InProcessCoordinator coord(o);
  auto stub = protos::Coordinator::NewStub(ClientChannel(certs, "client-0", coord.port()));
  auto other = protos::Coordinator::NewStub(ClientChannel(certs, "client-1", coord.port(), 1));
  // Two uploads that send nothing: the client's cap.
  grpc::ClientContext c1, c2, c3;
  protos::UploadReceipt r1, r2, r3;
  auto u1 = stub->UploadUpdate(&c1, &r1);
  auto u2 = stub->UploadUpdate(&c2, &r2);
  ASSERT_TRUE(WaitFor(
      [&] {
        return ScrapeMetrics(coord.get().metrics_port()).find("\nfedlgc_open_calls 2") !=
               std::string::npos;
      },
      std::chrono::seconds(10)));
  // A third call of that client is refused at once; another client is not affected.
  auto u3 = stub->UploadUpdate(&c3, &r3);
  const grpc::Status third = u3->Finish();
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << third.error_message();
  EXPECT_NE(third.error_message().find("at most 2"), std::string::npos) << third.error_message();
  {
    grpc::ClientContext ctx;
    protos::ModelRequest req;
    auto download = other->DownloadModel(&ctx, req);
    protos::ModelChunk chunk;
    EXPECT_TRUE(download->Read(&chunk));
    while (download->Read(&chunk)) {
    }
    EXPECT_TRUE(download->Finish().ok());
  }
  EXPECT_EQ(Counted(coord.get().metrics_port(), "streams"), 1);
  // Without a message for 1.5 s both are cancelled, and the client may open calls again.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(u1->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(u2->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 6);
  EXPECT_EQ(MetricValue(coord.get().metrics_port(), "fedlgc_idle_calls_cancelled_total"), 2);
  grpc::ClientContext c4;
  protos::UploadReceipt r4;
  auto u4 = stub->UploadUpdate(&c4, &r4);
  u4->WritesDone();
  const grpc::Status fourth = u4->Finish();
  EXPECT_TRUE(fourth.ok()) << fourth.error_code() << " " << fourth.error_message();
}

int64_t RssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

// 600 downloads of the CNN model that nobody reads (a 16 KiB window each), from 600
// clients (--insecure: a client names itself) over 12 connections: the coordinator's resident memory stays
// within twice what it was after one download, and comes back when they are cancelled.
TEST(Service, SixHundredUnreadDownloadsDoNotGrowTheCoordinator) {
  const std::string dir = FreshDir("service-rss");
  const char* bin = std::getenv("FEDLGC_COORDINATOR_BIN");  // e.g. another build, to compare
  ChildProcess coordinator(
      {bin ? std::string(bin) : BinPath("fedlgc-coordinator"), "--insecure",
       "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--port-file=" + dir + "/port",
       "--state-dir=" + dir + "/state", "--model=cnn", "--rounds=1", "--min-clients=1000",
       "--test-data=synthetic:100", "--eval-every=0", "--downlink-codec=fp32"},
      dir + "/coordinator.log");
  const int port = WaitForPortFile(dir + "/port", std::chrono::seconds(60));
  ASSERT_GT(port, 0);
  auto ports = fedlgc::ReadFileIfExists(dir + "/port").value().value();
  const int metrics_port = std::atoi(ports.substr(ports.find(' ') + 1).c_str());
  std::vector<std::unique_ptr<protos::Coordinator::Stub>> stubs;
  for (int i = 0; i < 12; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("fedlgc.test.channel", i);
    // A reader that takes 16 KiB per stream and never more: the coordinator holds the rest.
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 * 1024);
    stubs.push_back(protos::Coordinator::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args)));
  }
  {  // One whole download: the baseline includes what serving a model takes.
    grpc::ClientContext ctx;
    protos::ModelRequest req;
    req.set_client_id("warm-up");
    auto d = stubs[0]->DownloadModel(&ctx, req);
    protos::ModelChunk chunk;
    while (d->Read(&chunk)) {
    }
    ASSERT_TRUE(d->Finish().ok());
  }
  // sleep: lets RSS settle before measuring
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const int64_t baseline = RssKiB(coordinator.pid());
  constexpr int kDownloads = 600;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<protos::ModelChunk>>> readers;
  for (int i = 0; i < kDownloads; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    protos::ModelRequest req;
    req.set_client_id("reader-" + std::to_string(i));
    readers.push_back(stubs[i % stubs.size()]->DownloadModel(contexts.back().get(), req));
  }
  EXPECT_TRUE(WaitFor([&] { return MetricValue(metrics_port, "fedlgc_open_calls") >= kDownloads; },
                      std::chrono::seconds(30)))
      << "open: " << MetricValue(metrics_port, "fedlgc_open_calls");
  // sleep: lets RSS settle
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const int64_t loaded = RssKiB(coordinator.pid());
  for (auto& c : contexts) c->TryCancel();
  for (auto& r : readers) (void)r->Finish();
  EXPECT_TRUE(WaitFor([&] { return MetricValue(metrics_port, "fedlgc_open_calls") == 0; },
                      std::chrono::seconds(30)));
  // sleep: lets RSS settle
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int64_t after = RssKiB(coordinator.pid());
  std::printf("coordinator RSS: %lld KiB after one download, %lld KiB with %d unread "
              "downloads open (%.2fx), %lld KiB after they were cancelled\n",
              static_cast<long long>(baseline), static_cast<long long>(loaded), kDownloads,
              static_cast<double>(loaded) / baseline, static_cast<long long>(after));
  EXPECT_LE(loaded, 2 * baseline);
  coordinator.Kill(SIGTERM);
  coordinator.Wait(std::chrono::seconds(10));
}

}  // namespace
}  // namespace fedlgc::testing
