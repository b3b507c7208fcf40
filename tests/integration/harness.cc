// Integration test harness (see harness.h).
#include "tests/integration/harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>

#include "base/file.h"
#include "coordinator/checkpoint.h"
#include "core/model.h"
#include "gtest/gtest.h"
#include "modes/clients.h"
#include "modes/drivers.h"
#include "monitoring/metrics.h"

namespace fedlgc::testing {

std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/fedlgc_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string MakeCerts(const std::string& dir, int clients) {
  const std::string certs = dir + "/certs";
  std::string cmd = std::string(FEDLGC_SOURCE_DIR) + "/scripts/gen-certs.sh " + certs;
  for (int i = 0; i < clients; ++i) cmd += " client-" + std::to_string(i);
  cmd += " >/dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return certs;
}

void AddCerts(const std::string& certs, const std::vector<std::string>& ids) {
  std::string cmd = std::string(FEDLGC_SOURCE_DIR) + "/scripts/gen-certs.sh " + certs;
  for (const std::string& id : ids) cmd += " " + id;
  cmd += " >/dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

std::shared_ptr<grpc::Channel> ClientChannel(const std::string& certs, const std::string& id,
                                             int port, int channel_id) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = **fedlgc::ReadFileIfExists(certs + "/ca.pem");
  ssl.pem_cert_chain = **fedlgc::ReadFileIfExists(certs + "/" + id + ".pem");
  ssl.pem_private_key = **fedlgc::ReadFileIfExists(certs + "/" + id + ".key");
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  if (channel_id > 0) args.SetInt("fedlgc.test.channel", channel_id);
  args.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), grpc::SslCredentials(ssl),
                                   args);
}

int FreePort() {
  // Below the kernel's ephemeral range: bind(0) and every outgoing connection of the
  // tests running beside this one take their ports from that range, so none of them can
  // be handed this port between the check here and its use.
  int low = 32768;
  if (auto range = ReadFileIfExists("/proc/sys/net/ipv4/ip_local_port_range");
      range.ok() && range->has_value()) {
    low = std::max(10001, std::atoi((*range)->c_str()));
  }
  std::random_device seed;
  std::mt19937 pick(seed());
  std::uniform_int_distribution<int> port_in(10000, low - 1);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = port_in(pick);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);
    if (free) return port;
  }
  ADD_FAILURE() << "no free port below " << low;
  return 0;
}

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    // sleep: polls; the timeout is the caller's
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

int WaitForPortFile(const std::string& path, std::chrono::milliseconds timeout) {
  int port = 0;
  WaitFor(
      [&] {
        auto f = fedlgc::ReadFileIfExists(path);
        if (f.ok() && f->has_value()) port = std::atoi((*f)->c_str());
        return port > 0;
      },
      timeout);
  return port;
}

coordinator::CoordinatorOptions CoordinatorDefaults(const std::string& dir,
                                                    const std::string& certs) {
  coordinator::CoordinatorOptions o;
  o.listen = "127.0.0.1:0";  // tests run side by side
  o.state_dir = dir + "/coordinator";
  o.model = "mlp";
  o.rounds = 3;
  o.min_clients = 3;
  o.round_timeout_s = 60;
  o.test_data = "synthetic:500";
  o.plan.codec = "fp32";
  o.downlink.codec = "fp32";
  o.plan.local_steps = 20;
  o.plan.max_chunk_bytes = 64 * 1024;
  o.tls_ca = certs + "/ca.pem";
  o.tls_cert = certs + "/server.pem";
  o.tls_key = certs + "/server.key";
  return o;
}

edge_client::EdgeClientOptions ClientDefaults(const std::string& dir, const std::string& certs,
                                              int index, int num_clients, int port) {
  edge_client::EdgeClientOptions o;
  o.server = "127.0.0.1:" + std::to_string(port);
  o.client_id = "client-" + std::to_string(index);
  o.state_dir = dir + "/clients";
  o.tls_ca = certs + "/ca.pem";
  o.tls_cert = certs + "/" + o.client_id + ".pem";
  o.tls_key = certs + "/" + o.client_id + ".key";
  o.data = "synthetic:3000";
  o.shard = static_cast<uint32_t>(index);
  o.num_shards = static_cast<uint32_t>(num_clients);
  o.backoff_initial_s = 0.05;
  o.backoff_max_s = 0.5;
  return o;
}

InProcessCoordinator::InProcessCoordinator(coordinator::CoordinatorOptions options,
                                           modes::ModeOptions mode_options) {
  auto mode = modes::JobMode(options);
  EXPECT_TRUE(mode.ok()) << mode.status();
  const coordinator::ModeTraits& traits = *mode.value();
  auto c = coordinator::Coordinator::Create(
      options, traits, [&traits, mode_options](const coordinator::DriverEnv& env) {
        return modes::MakeRoundDriver(traits.mode, mode_options, env);
      });
  EXPECT_TRUE(c.ok()) << c.status();
  c_ = std::move(c).value();
  if (options.has_parent()) {
    auto t = tier::Tier::Create(tier::UpstreamOptions(options), c_.get(), options.state_dir,
                                options.min_clients, options.parent_reserve);
    EXPECT_TRUE(t.ok()) << t.status();
    tier_ = std::move(t).value();
    c_->SetRoundSource(tier_.get());
  }
  EXPECT_TRUE(c_->Start().ok());
  if (tier_) tier_->Start();
  thread_ = std::thread([this] {
    result_ = c_->Run();
    finished_ = true;
  });
}

InProcessCoordinator::~InProcessCoordinator() {
  c_->Stop();
  thread_.join();
  if (tier_) {
    tier_.reset();
    c_->SetRoundSource(nullptr);
  }
}

bool InProcessCoordinator::Wait(std::chrono::seconds timeout) {
  return WaitFor([this] { return finished_.load(); }, timeout);
}

ClientThread::ClientThread(edge_client::EdgeClientOptions options) {
  auto c = edge_client::EdgeClient::Create(std::move(options), &modes::MakeClientMode);
  EXPECT_TRUE(c.ok()) << c.status();
  client_ = std::move(c).value();
  thread_ = std::thread([this] {
    result_ = client_->Run();
    finished_ = true;
  });
}

ClientThread::~ClientThread() {
  client_->Stop();
  thread_.join();
}

bool ClientThread::Wait(std::chrono::seconds timeout) {
  return WaitFor([this] { return finished_.load(); }, timeout);
}

std::string BinPath(const std::string& name) { return std::string(FEDLGC_BIN_DIR) + "/" + name; }

std::string ReadText(const std::string& path) {
  auto text = fedlgc::ReadFile(path);
  return text.ok() ? *std::move(text) : std::string();
}

int RunOnTerminal(const std::vector<std::string>& argv, const std::string& log,
                  std::chrono::milliseconds timeout) {
  std::string cmd;
  for (const std::string& a : argv) cmd += "'" + a + "' ";
  sim::ChildProcess script({"/usr/bin/script", "-qfec", cmd, "/dev/null"}, log);
  return script.Wait(timeout);
}

coordinator::EngineState CheckpointState(const std::string& state_dir,
                                         const coordinator::CoordinatorOptions& o) {
  auto m = core::Model::Create(o.model, o.init_seed).value();
  auto s = coordinator::ReadCheckpoint(
      state_dir, o.JobKey(m->dim(), &m->layout(), *modes::JobMode(o).value()));
  EXPECT_TRUE(s.ok() && s->has_value()) << s.status();
  return s.ok() && s->has_value() ? **s : coordinator::EngineState{};
}

std::vector<float> CheckpointModel(const std::string& state_dir,
                                   const coordinator::CoordinatorOptions& o) {
  return CheckpointState(state_dir, o).model;
}

std::string ScrapeMetrics(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    ::send(fd, req.data(), req.size(), 0);
    char buf[8192];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

double SumMetric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  double sum = 0;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    sum += std::strtod(line.substr(line.rfind(' ') + 1).c_str(), nullptr);
  }
  return sum;
}

std::vector<std::string> CoordinatorArgv(const coordinator::CoordinatorOptions& o, int port) {
  std::vector<std::string> argv = {BinPath("fedlgc-coordinator"),
                                   "--listen=127.0.0.1:" + std::to_string(port),
                                   "--metrics-listen=",
                                   "--state-dir=" + o.state_dir,
                                   "--model=" + o.model,
                                   "--rounds=" + std::to_string(o.rounds),
                                   "--min-clients=" + std::to_string(o.min_clients),
                                   "--test-data=" + o.test_data,
                                   "--codec=" + o.plan.codec,
                                   "--downlink-codec=" + o.downlink.codec,
                                   "--local-steps=" + std::to_string(o.plan.local_steps),
                                   "--chunk-bytes=" + std::to_string(o.plan.max_chunk_bytes),
                                   "--tls-ca=" + o.tls_ca,
                                   "--tls-cert=" + o.tls_cert,
                                   "--tls-key=" + o.tls_key};
  if (o.has_parent()) {
    for (const std::string& flag :
         {"--parent=" + o.parent, "--parent-id=" + o.parent_id,
          "--parent-tls-cert=" + o.parent_tls_cert, "--parent-tls-key=" + o.parent_tls_key,
          "--eval-every=" + std::to_string(o.eval_every),
          "--round-timeout=" + std::to_string(o.round_timeout_s)}) {
      argv.push_back(flag);
    }
  }
  return argv;
}

std::unique_ptr<ChildProcess> SpawnEdge(const std::string& dir, const std::string& certs, int i,
                                        int n, int port, const std::vector<std::string>& extra,
                                        const std::vector<std::string>& env) {
  const auto c = ClientDefaults(dir, certs, i, n, port);
  std::vector<std::string> argv = {BinPath("fedlgc-edge"),
                                   "--server=" + c.server,
                                   "--id=" + c.client_id,
                                   "--state-dir=" + c.state_dir,
                                   "--tls-ca=" + c.tls_ca,
                                   "--tls-cert=" + c.tls_cert,
                                   "--tls-key=" + c.tls_key,
                                   "--data=" + c.data,
                                   "--shard=" + std::to_string(i),
                                   "--num-shards=" + std::to_string(n),
                                   "--backoff-max=0.5"};
  // An extra --server (a list to fail over through) replaces the one above.
  for (const std::string& e : extra) {
    if (e.rfind("--server=", 0) == 0) argv.erase(argv.begin() + 1);
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  if (!env.empty()) {
    argv.insert(argv.begin(), env.begin(), env.end());
    argv.insert(argv.begin(), "/usr/bin/env");
  }
  return std::make_unique<ChildProcess>(argv, dir + "/" + c.client_id + ".log");
}

double UplinkBytesOf(coordinator::Coordinator& coord, const std::string& client) {
  double bytes = 0;
  for (const auto& fam : coord.metrics().registry()->Collect()) {
    if (fam.name != "fedlgc_uplink_wire_bytes_total") continue;
    for (const auto& m : fam.metric) {
      for (const auto& l : m.label) {
        if (l.name == "client" && l.value == client) bytes += m.counter.value;
      }
    }
  }
  return bytes;
}

}  // namespace fedlgc::testing
