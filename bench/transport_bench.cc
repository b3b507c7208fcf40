// fedlgc-bench-transport: streams a 64 MB update as 256 KiB chunks over loopback gRPC
// (plaintext and mTLS, the UploadUpdate rpc of the real protocol), over a raw loopback TCP
// socket, and over raw TLS 1.3 with the same certificates (OpenSSL, mutual
// authentication), in the same run; prints throughput and the ratios (medians).
//
//   fedlgc-bench-transport [--mb 64] [--chunk-kb 256] [--reps 5] [--json FILE]
//                          [--only tcp|tls|grpc|grpc-tls] [--arg NAME=INT ...]
//
// The process sets malloc up as every fedlgc binary does (fedlgc::InitProcess); run it with
// GLIBC_TUNABLES=glibc.malloc.perturb=0 to measure glibc's defaults instead.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "base/file.h"
#include "base/flags.h"
#include "protos/fedlgc.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

// Receives UpdateChunk streams and counts their bytes: transport only, no decoding.
class SinkService final : public fedlgc::protos::Coordinator::CallbackService {
 public:
  grpc::ServerReadReactor<fedlgc::protos::UpdateChunk>* UploadUpdate(
      grpc::CallbackServerContext*, fedlgc::protos::UploadReceipt* receipt) override {
    class Reactor final : public grpc::ServerReadReactor<fedlgc::protos::UpdateChunk> {
     public:
      Reactor(SinkService* s, fedlgc::protos::UploadReceipt* r) : s_(s), r_(r) { StartRead(&c_); }
      void OnReadDone(bool ok) override {
        if (!ok) {
          r_->set_duplicates(0);
          Finish(grpc::Status::OK);
          return;
        }
        s_->bytes += c_.frame().size();
        StartRead(&c_);
      }
      void OnDone() override { delete this; }

     private:
      SinkService* s_;
      fedlgc::protos::UploadReceipt* r_;
      fedlgc::protos::UpdateChunk c_;
    };
    return new Reactor(this, receipt);
  }
  std::atomic<uint64_t> bytes{0};
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A listening loopback socket; its address in *a.
int Listen(sockaddr_in* a) {
  const int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  *a = sockaddr_in{};
  a->sin_family = AF_INET;
  a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(ls, reinterpret_cast<sockaddr*>(a), sizeof(*a));
  ::listen(ls, 1);
  socklen_t len = sizeof(*a);
  ::getsockname(ls, reinterpret_cast<sockaddr*>(a), &len);
  return ls;
}

[[noreturn]] void SslDie(const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, ERR_error_string(ERR_get_error(), nullptr));
  std::exit(1);
}

// Raw TLS 1.3 with mutual authentication and the federation's certificates: what any
// TLS transport pays for encryption on this machine.
double RawTlsSeconds(const std::string& dir, size_t total, size_t chunk) {
  auto make_ctx = [&](bool server, const std::string& name) {
    SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (ctx == nullptr) SslDie("SSL_CTX_new");
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    if (SSL_CTX_use_certificate_file(ctx, (dir + "/" + name + ".pem").c_str(), SSL_FILETYPE_PEM) !=
            1 ||
        SSL_CTX_use_PrivateKey_file(ctx, (dir + "/" + name + ".key").c_str(), SSL_FILETYPE_PEM) !=
            1 ||
        SSL_CTX_load_verify_locations(ctx, (dir + "/ca.pem").c_str(), nullptr) != 1) {
      SslDie("certificates");
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    return ctx;
  };
  SSL_CTX* sctx = make_ctx(true, "server");
  SSL_CTX* cctx = make_ctx(false, "bench");
  sockaddr_in a;
  const int ls = Listen(&a);
  std::thread server([&] {
    const int c = ::accept(ls, nullptr, nullptr);
    SSL* ssl = SSL_new(sctx);
    SSL_set_fd(ssl, c);
    if (SSL_accept(ssl) != 1) SslDie("SSL_accept");
    std::vector<char> buf(1 << 20);
    size_t got = 0;
    while (got < total) {
      const int n = SSL_read(ssl, buf.data(), static_cast<int>(buf.size()));
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    SSL_write(ssl, "k", 1);
    SSL_shutdown(ssl);
    SSL_free(ssl);
    ::close(c);
  });
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  SSL* ssl = SSL_new(cctx);
  SSL_set_fd(ssl, fd);
  SSL_set_tlsext_host_name(ssl, "localhost");
  if (SSL_connect(ssl) != 1) SslDie("SSL_connect");
  std::string data(chunk, 'x');
  const auto t0 = Clock::now();
  for (size_t sent = 0; sent < total;) {
    const int n = SSL_write(ssl, data.data(), static_cast<int>(std::min(chunk, total - sent)));
    if (n <= 0) SslDie("SSL_write");
    sent += static_cast<size_t>(n);
  }
  char ack;
  SSL_read(ssl, &ack, 1);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  SSL_free(ssl);
  ::close(fd);
  server.join();
  ::close(ls);
  SSL_CTX_free(sctx);
  SSL_CTX_free(cctx);
  return s;
}

double RawTcpSeconds(size_t total, size_t chunk) {
  sockaddr_in a;
  const int ls = Listen(&a);
  std::thread server([ls, total] {
    const int c = ::accept(ls, nullptr, nullptr);
    std::vector<char> buf(1 << 20);
    size_t got = 0;
    while (got < total) {
      const ssize_t n = ::recv(c, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    ::send(c, "k", 1, 0);
    ::close(c);
  });
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  std::string data(chunk, 'x');
  const auto t0 = Clock::now();
  for (size_t sent = 0; sent < total;) {
    const ssize_t n = ::send(fd, data.data(), std::min(chunk, total - sent), 0);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  char ack;
  ::recv(fd, &ack, 1, 0);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  ::close(fd);
  server.join();
  ::close(ls);
  return s;
}

double GrpcSeconds(fedlgc::protos::Coordinator::Stub& stub, size_t total, size_t chunk) {
  fedlgc::protos::UpdateChunk c;
  c.set_client_id("bench");
  c.set_frame(std::string(chunk, 'x'));
  grpc::ClientContext ctx;
  fedlgc::protos::UploadReceipt receipt;
  const auto t0 = Clock::now();
  auto w = stub.UploadUpdate(&ctx, &receipt);
  for (size_t sent = 0; sent < total; sent += chunk) {
    if (!w->Write(c)) break;
  }
  w->WritesDone();
  const grpc::Status st = w->Finish();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!st.ok()) {
    std::fprintf(stderr, "upload failed: %s\n", st.error_message().c_str());
    std::exit(1);
  }
  return s;
}

// Medians of each transport's seconds per transfer (raw TCP, gRPC plaintext, raw TLS,
// gRPC mTLS; empty where not run) as GB/s and ratios, on stdout and in `json`.
void PrintResults(const std::string& only, uint32_t mb, uint32_t chunk_kb, uint32_t reps,
                  const std::string& json, const std::vector<std::vector<double>>& seconds) {
  const bool all = only.empty();
  const double total = static_cast<double>(mb) * (1 << 20);
  auto gbps = [&](const std::vector<double>& s) { return s.empty() ? 0 : total / Median(s) / 1e9; };
  const double raw_gbps = gbps(seconds[0]), plain_gbps = gbps(seconds[1]),
               raw_tls_gbps = gbps(seconds[2]), tls_gbps = gbps(seconds[3]);
  std::printf("loopback, %u MB in %u KiB chunks, median of %u\n", mb, chunk_kb, reps);
  if (!all) {  // one transport: its throughput, no ratios
    std::printf("%s %7.3f GB/s\n", only.c_str(),
                std::max({raw_gbps, plain_gbps, tls_gbps, raw_tls_gbps}));
  } else {
    std::printf("raw TCP        %7.3f GB/s\n", raw_gbps);
    std::printf("gRPC plaintext %7.3f GB/s  (%.0f%% of raw TCP)\n", plain_gbps,
                100 * plain_gbps / raw_gbps);
    std::printf("raw TLS 1.3    %7.3f GB/s  (%.0f%% of raw TCP)\n", raw_tls_gbps,
                100 * raw_tls_gbps / raw_gbps);
    std::printf("gRPC mTLS      %7.3f GB/s  (%.0f%% of raw TCP, %.0f%% of raw TLS)\n", tls_gbps,
                100 * tls_gbps / raw_gbps, 100 * tls_gbps / raw_tls_gbps);
  }
  if (all && !json.empty()) {
    std::ofstream(json) << "{\"mb\": " << mb << ", \"chunk_kb\": " << chunk_kb
                        << ", \"raw_tcp_gbps\": " << raw_gbps
                        << ", \"grpc_plain_gbps\": " << plain_gbps
                        << ", \"grpc_tls_gbps\": " << tls_gbps
                        << ", \"raw_tls_gbps\": " << raw_tls_gbps
                        << ", \"plain_ratio\": " << plain_gbps / raw_gbps
                        << ", \"tls_ratio\": " << tls_gbps / raw_gbps
                        << ", \"tls_vs_raw_tls\": " << tls_gbps / raw_tls_gbps << "}\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t mb = 64, chunk_kb = 256, reps = 5;
  std::string json, only;
  std::vector<std::string> extra_args;
  CLI::App app("gRPC streaming vs raw TCP on loopback.", "fedlgc-bench-transport");
  fedlgc::AddCommonFlags(app);
  app.add_option("--mb", mb, "megabytes per transfer");
  app.add_option("--chunk-kb", chunk_kb, "chunk size in KiB");
  app.add_option("--reps", reps, "repetitions (medians are reported)");
  app.add_option("--json", json, "write results as JSON here");
  app.add_option("--only", only, "run only this transport (its throughput, no ratios)")
      ->check(CLI::IsMember({"tcp", "tls", "grpc", "grpc-tls"}));
  app.add_option("--arg", extra_args, "a gRPC channel argument NAME=INT for both ends (repeat)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  if (auto code = fedlgc::ParseFlags(app, argc, argv)) return *code;
  fedlgc::InitProcess();
  const size_t total = size_t{mb} << 20, chunk = size_t{chunk_kb} << 10;

  // Certificates for the mTLS case.
  char tmpl[] = "/tmp/fedlgc-bench-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string gen =
      std::string(FEDLGC_SOURCE_DIR) + "/scripts/gen-certs.sh " + dir + " bench >/dev/null";
  if (std::system(gen.c_str()) != 0) return 1;
  auto read = [&](const std::string& f) { return fedlgc::ReadFile(dir + "/" + f).value(); };

  SinkService service;
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = read("ca.pem");
  ssl.pem_key_cert_pairs.push_back({read("server.key"), read("server.pem")});
  int plain_port = 0, tls_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &plain_port);
  builder.AddListeningPort("127.0.0.1:0", grpc::SslServerCredentials(ssl), &tls_port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(8 << 20);
  grpc::ChannelArguments args;
  for (const std::string& kv : extra_args) {
    const size_t eq = kv.find('=');
    int value = 0;
    if (eq == std::string::npos || !absl::SimpleAtoi(kv.substr(eq + 1), &value)) {
      std::fprintf(stderr, "--arg %s: expected NAME=INT\n", kv.c_str());
      return 2;
    }
    builder.AddChannelArgument(kv.substr(0, eq), value);
    args.SetInt(kv.substr(0, eq), value);
  }
  auto server = builder.BuildAndStart();

  args.SetMaxSendMessageSize(8 << 20);
  auto plain = fedlgc::protos::Coordinator::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(plain_port), grpc::InsecureChannelCredentials(), args));
  grpc::SslCredentialsOptions cssl;
  cssl.pem_root_certs = read("ca.pem");
  cssl.pem_cert_chain = read("bench.pem");
  cssl.pem_private_key = read("bench.key");
  grpc::ChannelArguments targs = args;
  targs.SetSslTargetNameOverride("localhost");
  auto tls = fedlgc::protos::Coordinator::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(tls_port), grpc::SslCredentials(cssl), targs));

  GrpcSeconds(*plain, chunk * 4, chunk);  // warm up connections
  GrpcSeconds(*tls, chunk * 4, chunk);
  const bool all = only.empty();
  std::vector<double> raw, rtls, gp, gt;
  for (uint32_t r = 0; r < reps; ++r) {
    if (all || only == "tcp") raw.push_back(RawTcpSeconds(total, chunk));
    if (all || only == "tls") rtls.push_back(RawTlsSeconds(dir, total, chunk));
    if (all || only == "grpc") gp.push_back(GrpcSeconds(*plain, total, chunk));
    if (all || only == "grpc-tls") gt.push_back(GrpcSeconds(*tls, total, chunk));
  }
  PrintResults(only, mb, chunk_kb, reps, json, {raw, gp, rtls, gt});
  server->Shutdown();
  std::string rm = "rm -rf " + dir;
  return std::system(rm.c_str()) == 0 ? 0 : 1;
}
