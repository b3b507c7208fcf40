// fedlgc-load: N emulated clients in one process against one coordinator, over the real
// protocol (sim/load_client.h). By default it starts a coordinator of its own (like
// fedlgc-sim, with the job's flags); --server points it at one already running. It prints
// a line per round and writes a JSON report: per round its seconds, participants, bytes,
// upload latency p50/p99, the coordinator's memory and CPU seconds (from /proc), the
// receipts checked and the aggregate check (sim/load_book.h). Exit 0 only when every round
// was checked and counted every update exactly once.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/file.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/signals.h"
#include "base/str.h"
#include "codecs/round_kind.h"
#include "coordinator/coordinator.h"
#include "coordinator/downlink.h"
#include "coordinator/flags.h"
#include "coordinator/model_keeper.h"
#include "coordinator/preflight.h"
#include "core/float_bytes.h"
#include "core/model.h"
#include "core/preflight.h"
#include "modes/catalog.h"
#include "modes/drivers.h"
#include "monitoring/metrics.h"
#include "nlohmann/json.hpp"
#include "sim/client_certs.h"
#include "sim/fault_proxy.h"
#include "sim/launch.h"
#include "sim/link_profile.h"
#include "sim/load_book.h"
#include "sim/load_client.h"
#include "sim/process.h"

namespace {

using fedlgc::StrCat;
using fedlgc::coordinator::CoordinatorOptions;
using fedlgc::sim::LoadBook;
using fedlgc::sim::RoundFigures;
using nlohmann::json;

struct LoadOptions {
  uint32_t clients = 100;
  double think_s = 1, think_jitter = 0.5;
  uint64_t samples = 100;
  float update_scale = 1e-3f;
  std::string server;  // empty: a coordinator of our own
  int server_pid = 0;  // with --server on this host: its /proc figures
  std::string certs;   // with --server: the folder with ca.pem and ca.key
  std::string tls_server_name = "localhost";
  std::string id_prefix = "load-";
  std::string link, report, run_dir, bin_dir = fedlgc::sim::SelfDir();
  std::string certs_script = fedlgc::sim::CertsScript();
  std::string data = "fashion-mnist", data_dir = "/usr/share/datasets/fashion-mnist";
  std::string metrics_listen;  // the emulated clients' own metrics
  bool insecure = false, quiet = false, verify = true;
  double timeout_s = 3600;
};

void AddLoadFlags(CLI::App& app, LoadOptions* o) {
  CLI::Option_group* g = app.add_option_group("Load", "the emulated clients");
  g->add_option("--clients", o->clients, "emulated clients")->check(CLI::Range(1u, 100000u));
  g->add_option("--think", o->think_s, "seconds each client waits in place of training")
      ->check(CLI::NonNegativeNumber);
  g->add_option("--think-jitter", o->think_jitter,
                "the think time is uniform in think x [1 - j, 1 + j]")
      ->check(CLI::Range(0.0, 1.0));
  g->add_option("--samples", o->samples, "each client's sample count (its FedAvg weight)")
      ->check(CLI::PositiveNumber);
  g->add_option("--update-scale", o->update_scale,
                "synthetic update coordinates are uniform in [-scale, scale]")
      ->check(CLI::PositiveNumber);
  g->add_option("--server", o->server,
                "an already running coordinator (HOST:PORT); default: start one");
  g->add_option("--server-pid", o->server_pid,
                "with --server on this host: its pid, for memory and CPU figures");
  g->add_option("--certs", o->certs,
                "with --server: the folder of its CA (ca.pem, ca.key); client certificates are "
                "issued there");
  g->add_option("--tls-server-name", o->tls_server_name, "name in the coordinator's certificate");
  g->add_option("--id-prefix", o->id_prefix, "client ids are PREFIX0, PREFIX1, ...");
  g->add_option("--link", o->link,
                "a fault proxy per client, as fedlgc-sim's --link (values drawn per client, "
                "availability, or trace:FILE.csv)");
  g->add_option("--report", o->report, "write the JSON report here");
  g->add_option("--run-dir", o->run_dir,
                "the run's folder: the coordinator's state, its config and log, certificates "
                "(default: a new folder in $TMPDIR or /tmp, removed after a run that succeeds)");
  fedlgc::AddRenamedFlag(*g, "--state-dir", "--run-dir", &o->run_dir);
  g->add_option("--bin-dir", o->bin_dir, "where fedlgc-coordinator is");
  g->add_option("--certs-script", o->certs_script, "scripts/gen-certs.sh");
  g->add_option("--test-data", o->data,
                "the coordinator's test set: fashion-mnist or synthetic:N (the emulated clients "
                "train on nothing)");
  fedlgc::AddRenamedFlag(*g, "--data", "--test-data", &o->data);
  g->add_option("--data-dir", o->data_dir, "Fashion-MNIST folder");
  g->add_option("--client-metrics-listen", o->metrics_listen,
                "serve the emulated clients' metrics here (empty: not served)");
  fedlgc::AddBoolFlag(*g, "--insecure", &o->insecure, "plaintext instead of mTLS");
  fedlgc::AddBoolFlag(*g, "--quiet", &o->quiet, "print only the summary");
  fedlgc::AddBoolFlag(*g, "--verify-aggregate", &o->verify,
                      "check every round's aggregate against the updates sent (with "
                      "--server: pass its --server-lr and --downlink-codec fp32, which the "
                      "check then needs, and run it with --linger so the last round's model "
                      "can be fetched)");
  fedlgc::AddRenamedFlag(*g, "--no-check", "--no-verify-aggregate");
  g->add_option("--timeout", o->timeout_s, "give up after this many seconds")
      ->check(CLI::PositiveNumber);
}

int Fail(const std::string& msg) {
  fedlgc::log::Error("fedlgc-load", "%s", msg);
  return 1;
}

// What /proc says of a process.
struct ProcStats {
  double rss_mb = 0, peak_rss_mb = 0, cpu_seconds = 0;
  int threads = 0;
};

std::optional<ProcStats> ReadProc(int pid) {
  std::ifstream status(StrCat("/proc/", pid, "/status"));
  std::ifstream stat(StrCat("/proc/", pid, "/stat"));
  if (!status || !stat) return std::nullopt;
  ProcStats p;
  for (std::string line; std::getline(status, line);) {
    std::istringstream in(line);
    std::string key;
    double value = 0;
    in >> key >> value;
    if (key == "VmRSS:") p.rss_mb = value / 1024;
    if (key == "VmHWM:") p.peak_rss_mb = value / 1024;
    if (key == "Threads:") p.threads = static_cast<int>(value);
  }
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(paren + 2));
  std::string f;
  double utime = 0, stime = 0;
  // Fields 3.. after the name: utime and stime are fields 14 and 15.
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::atof(f.c_str());
    if (i == 15) stime = std::atof(f.c_str());
  }
  p.cpu_seconds = (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  return p;
}

// The coordinator's /proc figures over time, to split its CPU seconds by round.
class ProcSampler {
 public:
  explicit ProcSampler(int pid) : pid_(pid) {}
  void Sample(double now) {
    if (pid_ <= 0) return;
    if (auto p = ReadProc(pid_)) {
      samples_.push_back({now, *p});
      peak_rss_mb_ = std::max(peak_rss_mb_, p->peak_rss_mb);
      max_threads_ = std::max(max_threads_, p->threads);
    }
  }
  bool active() const { return pid_ > 0 && !samples_.empty(); }
  // CPU seconds at time t (linear between samples).
  double CpuAt(double t) const {
    if (samples_.empty()) return 0;
    if (t <= samples_.front().first) return samples_.front().second.cpu_seconds;
    for (size_t i = 1; i < samples_.size(); ++i) {
      const auto& [t1, p1] = samples_[i];
      if (t > t1) continue;
      const auto& [t0, p0] = samples_[i - 1];
      const double a = t1 > t0 ? (t - t0) / (t1 - t0) : 1;
      return p0.cpu_seconds + a * (p1.cpu_seconds - p0.cpu_seconds);
    }
    return samples_.back().second.cpu_seconds;
  }
  // The largest resident set sampled in [t0, t1].
  double RssIn(double t0, double t1) const {
    double m = 0;
    for (const auto& [t, p] : samples_) {
      if (t >= t0 && t <= t1) m = std::max(m, p.rss_mb);
    }
    return m;
  }
  double peak_rss_mb() const { return peak_rss_mb_; }
  int max_threads() const { return max_threads_; }
  double cpu_seconds() const { return samples_.empty() ? 0 : samples_.back().second.cpu_seconds; }

 private:
  const int pid_;
  std::vector<std::pair<double, ProcStats>> samples_;
  double peak_rss_mb_ = 0;
  int max_threads_ = 0;
};

// The soft limit of open files raised to the hard one: every client holds a connection.
void RaiseFileLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
}

std::string ClientId(const LoadOptions& o, uint32_t i) { return StrCat(o.id_prefix, i); }

// Where the CA and the clients' certificates are: --certs, or the run folder's.
std::string CertsDir(const LoadOptions& o) {
  return o.certs.empty() ? o.run_dir + "/certs" : o.certs;
}

// The CA and the server's certificate (gen-certs.sh), then every client's in process.
absl::Status MakeCertificates(const LoadOptions& o, const std::string& dir) {
  if (o.server.empty()) {
    const std::string cmd = StrCat(o.certs_script, " ", dir, " >/dev/null");
    if (std::system(cmd.c_str()) != 0) {
      return absl::InternalError("certificate generation failed: " + cmd);
    }
  }
  std::vector<std::string> ids;
  for (uint32_t i = 0; i < o.clients; ++i) ids.push_back(ClientId(o, i));
  return fedlgc::sim::IssueClientCertificates(dir, ids);
}

// Whether the clients download the true global model: a float32 downlink serves it, a
// compressed one the model its deltas rebuild (the aggregate check then reads the true
// models the coordinator keeps in its state folder: FeedKeptModels).
bool DownloadsTrueModels(const CoordinatorOptions& co) {
  return !fedlgc::coordinator::DownlinkCompressed(co.downlink);
}

// The service settings of the coordinator fedlgc-load starts.
void SetService(const LoadOptions& o, const std::string& certs, CoordinatorOptions* co) {
  // The aggregate check under a compressed downlink reads every round's true model from
  // the state folder (FeedKeptModels).
  if (o.verify && !DownloadsTrueModels(*co))
    co->keep_models = std::max(co->keep_models, co->rounds + 1);
  co->listen = "127.0.0.1:0";
  co->metrics_listen = "127.0.0.1:0";
  co->state_dir = o.run_dir + "/coordinator";
  co->test_data = o.data;
  co->data_dir = o.data_dir;
  co->eval_every = 0;  // the load is the protocol's, not the evaluation's
  co->linger_s = 30;   // the final model is downloaded after the last round
  co->insecure = o.insecure;
  if (!o.insecure) {
    co->tls_ca = certs + "/ca.pem";
    co->tls_cert = certs + "/server.pem";
    co->tls_key = certs + "/server.key";
  }
}

fedlgc::sim::LoadClientOptions ClientOptions(const LoadOptions& o, const CoordinatorOptions& co,
                                             const std::string& certs, const std::string& server,
                                             uint32_t i, uint64_t seed) {
  fedlgc::sim::LoadClientOptions c;
  c.true_models = DownloadsTrueModels(co);
  c.transport.server = server;
  c.transport.client_id = ClientId(o, i);
  c.transport.insecure = o.insecure;
  c.transport.tls_server_name = o.tls_server_name;
  if (!o.insecure) {
    c.transport.tls_ca = certs + "/ca.pem";
    c.transport.tls_cert = StrCat(certs, "/", c.transport.client_id, ".pem");
    c.transport.tls_key = StrCat(certs, "/", c.transport.client_id, ".key");
  }
  c.samples = o.samples;
  c.think_s = o.think_s;
  c.think_jitter = o.think_jitter;
  c.update_scale = o.update_scale;
  c.seed = seed;
  return c;
}

struct Run {
  std::unique_ptr<fedlgc::sim::ChildProcess> coordinator;  // null with --server
  std::string server;  // HOST:PORT the clients dial (before any fault proxy)
  std::vector<std::unique_ptr<fedlgc::sim::FaultProxy>> proxies;
  std::vector<std::unique_ptr<fedlgc::sim::LoadClient>> clients;
  std::vector<std::thread> threads;
  std::atomic<uint32_t> finished{0}, failed{0};
  std::string first_error;
  absl::Mutex mu;
};

void PrintHeader(const LoadOptions& o, const CoordinatorOptions& co, const std::string& server) {
  std::printf("fedlgc-load: %u clients against %s, think %.2f s, codec %s, fraction %.2f%s\n",
              o.clients, server.c_str(), o.think_s, co.plan.codec.c_str(), co.fraction,
              o.link.empty() ? "" : (", link " + o.link).c_str());
  std::printf("%5s %6s %6s %7s %7s %8s %9s %9s %7s %7s %8s %8s %8s %7s %s\n", "round", "start",
              "parts", "seconds", "slowest", "overhead", "up MB", "down MB", "up p50", "up p99",
              "coord MB", "coord s", "MB/cpu-s", "threads", "check");
}

// One line of a settled round, and its JSON row.
json Row(const RoundFigures& f, const ProcSampler& proc, bool quiet) {
  const double cpu = proc.active() ? proc.CpuAt(f.last_receipt) - proc.CpuAt(f.opened) : 0;
  const double rss = proc.RssIn(f.opened, f.last_receipt);
  const double ingest = cpu > 0 ? f.up_bytes / 1e6 / cpu : 0;
  const std::string check = !f.check.made
                                ? (f.check.why.empty() ? "unchecked" : "unchecked: " + f.check.why)
                            : f.check.ok ? StrCat("ok (", f.receipts, " receipts)")
                                         : "MISMATCH: " + f.check.why;
  if (!quiet) {
    std::printf(
        "%5llu %6u %6u %7.2f %7.2f %8.2f %9.2f %9.2f %7.3f %7.3f %8.0f %8.2f %8.1f %7d %s\n",
        static_cast<unsigned long long>(f.round), f.started, f.participants, f.seconds,
        f.slowest_client, f.overhead, f.up_bytes / 1e6, f.down_bytes / 1e6, f.upload_p50,
        f.upload_p99, rss, cpu, ingest, proc.max_threads(), check.c_str());
    std::fflush(stdout);
  }
  return json{{"round", f.round},
              {"model_version", f.model_version},
              {"started", f.started},
              {"uploaded", f.uploaded},
              {"receipts", f.receipts},
              {"participants", f.participants},
              {"chunks", f.chunks},
              {"counted_chunks", f.counted_chunks},
              {"seconds", f.seconds},
              {"slowest_client_seconds", f.slowest_client},
              {"overhead_seconds", f.overhead},
              {"download_p50_seconds", f.download_p50},
              {"upload_p50_seconds", f.upload_p50},
              {"upload_p99_seconds", f.upload_p99},
              {"up_bytes", f.up_bytes},
              {"down_bytes", f.down_bytes},
              {"coordinator_cpu_seconds", cpu},
              {"coordinator_rss_mb", rss},
              {"ingest_mb_per_cpu_second", ingest},
              {"check",
               {{"made", f.check.made},
                {"ok", f.check.ok},
                {"why", f.check.why},
                {"coordinates", f.check.coordinates},
                {"off", f.check.off},
                {"worst_gap", f.check.worst_gap},
                {"worst_ratio", f.check.worst_ratio},
                {"median_allowed", f.check.median_allowed}}}};
}

}  // namespace

namespace {

void StopClients(Run& run) {
  for (auto& c : run.clients) c->Stop();
  for (std::thread& t : run.threads) t.join();
  run.threads.clear();
}

// The coordinator (unless --server), fault proxies and the clients' threads.
absl::Status Launch(const LoadOptions& o, CoordinatorOptions co,
                    const fedlgc::modes::ModeOptions& mo, LoadBook* book,
                    fedlgc::monitoring::Metrics* metrics, Run* run) {
  const std::string certs = CertsDir(o);
  if (!o.insecure) {
    if (absl::Status st = MakeCertificates(o, certs); !st.ok()) return st;
  }
  run->server = o.server;
  if (o.server.empty()) {
    SetService(o, certs, &co);
    int port = 0;
    auto child = fedlgc::sim::StartCoordinator(o.bin_dir, o.run_dir, co, mo, &port);
    if (!child.ok()) return child.status();
    run->coordinator = *std::move(child);
    run->server = StrCat("127.0.0.1:", port);
  }
  auto link = fedlgc::sim::LinkProfile::Parse(o.link);
  if (!link.ok()) return link.status();
  const size_t colon = run->server.rfind(':');
  for (uint32_t i = 0; i < o.clients; ++i) {
    std::string target = run->server;
    if (!link->trivial()) {
      auto p = fedlgc::sim::FaultProxy::Start(
          run->server.substr(0, colon), std::atoi(run->server.c_str() + colon + 1),
          link->Draw(i, StrCat(o.id_prefix, i), co.seed), co.seed * 1000 + i);
      if (!p.ok()) return p.status();
      target = StrCat("127.0.0.1:", (*p)->port());
      run->proxies.push_back(std::move(p).value());
    }
    run->clients.push_back(std::make_unique<fedlgc::sim::LoadClient>(
        i, ClientOptions(o, co, certs, target, i, co.seed), book, metrics));
  }
  for (auto& c : run->clients) {
    run->threads.emplace_back([c = c.get(), run] {
      const absl::Status st = c->Run();
      if (!st.ok() && !absl::IsCancelled(st)) {
        absl::MutexLock lock(&run->mu);
        if (run->failed++ == 0) run->first_error = st.ToString();
      }
      ++run->finished;
    });
  }
  return absl::OkStatus();
}

// After the last round: the model it made, for the last round's check (only the current
// version is served: the one after the last round started with).
void FetchFinalModel(const LoadOptions& o, const CoordinatorOptions& co, LoadBook* book,
                     fedlgc::monitoring::Metrics* metrics, const Run& run) {
  const std::optional<uint64_t> last = book->last_version();
  if (!o.verify || !DownloadsTrueModels(co) || !last || !book->WantsModel(*last + 1)) return;
  const uint64_t version = *last + 1;
  fedlgc::sim::LoadClientOptions c = ClientOptions(o, co, CertsDir(o), run.server, 0, co.seed);
  fedlgc::edge_client::Transport t(c.transport, metrics);
  if (!t.Connect().ok()) return;
  auto bytes =
      t.DownloadBlob("", version, std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!bytes.ok()) {
    fedlgc::log::Warning("fedlgc-load", "the final model: %s", bytes.status().ToString().c_str());
    return;
  }
  if (auto model = fedlgc::core::FloatsFromBytes(*bytes, bytes->size() / 4, "the model");
      model.ok())
    book->Model(version, *std::move(model));
}

// Under a compressed downlink: the true models of the rounds committed so far, from the
// coordinator's state folder (it keeps every round's: Launch), and before round 1's the
// job's initial model, made here from the same options and seed. `fed`: the rounds given.
void FeedKeptModels(const LoadOptions& o, const CoordinatorOptions& co, LoadBook* book,
                    std::set<uint64_t>* fed) {
  namespace coord = fedlgc::coordinator;
  if (!o.verify || DownloadsTrueModels(co) || !o.server.empty()) return;
  const std::string state_dir = o.run_dir + "/coordinator";
  for (uint64_t round : coord::KeptRounds(state_dir)) {
    if (!fed->insert(round).second) continue;
    auto kept = coord::ReadKeptModel(coord::KeptRoundPath(state_dir, round));
    if (!kept.ok() || !kept->has_value()) {
      fed->erase(round);  // being written: read it again next time
      continue;
    }
    const coord::KeptModel& k = **kept;
    if (k.round == 1 && book->WantsModel(k.model_version - 1)) {
      auto initial = fedlgc::core::Model::Create(co.model_options(), co.init_seed);
      if (initial.ok()) book->Model(k.model_version - 1, (*initial)->GetFlat());
    }
    if (book->WantsModel(k.model_version)) book->Model(k.model_version, k.weights);
  }
}

struct Outcome {
  json rows = json::array();
  uint64_t rounds = 0, checked = 0, failed_checks = 0, receipts = 0;
  std::string error;
};

void Take(LoadBook& book, bool final, const ProcSampler& proc, bool check, bool quiet,
          fedlgc::sim::TerminalLine& line, Outcome* out) {
  for (const RoundFigures& f : book.TakeSettled(final)) {
    line.Clear();
    out->rows.push_back(Row(f, proc, quiet));
    ++out->rounds;
    out->receipts += f.receipts;
    if (f.check.made && f.check.ok) ++out->checked;
    if (check && (!f.check.made || !f.check.ok)) ++out->failed_checks;
  }
}

// Follows the run until every client is done, one fails, the coordinator exits, a signal
// or --timeout; prints the rounds as they settle.
Outcome Follow(const LoadOptions& o, const CoordinatorOptions& co, LoadBook& book,
               fedlgc::monitoring::Metrics* metrics, Run& run, ProcSampler& proc,
               const fedlgc::StopOnSignals& signals) {
  Outcome out;
  // On a terminal, a live line of the open round from the coordinator's progress.json.
  fedlgc::sim::TerminalLine line(!o.quiet && run.coordinator && ::isatty(STDOUT_FILENO) == 1);
  std::set<uint64_t> kept_rounds;
  while (run.finished < o.clients) {
    proc.Sample(book.Now());
    FeedKeptModels(o, co, &book, &kept_rounds);
    if (run.coordinator) line.Show(fedlgc::sim::ReadProgressLine(o.run_dir + "/coordinator"));
    Take(book, false, proc, o.verify, o.quiet, line, &out);
    if (signals.signal() != 0) {
      line.Clear();
      out.error = StrCat("stopped by signal ", signals.signal());
      break;
    }
    if (book.Now() > o.timeout_s) {
      out.error = StrCat("--timeout of ", o.timeout_s, " s passed");
      break;
    }
    if (run.coordinator && run.coordinator->Wait(std::chrono::milliseconds(200)) >= 0) {
      out.error = StrCat("the coordinator exited:\n",
                         fedlgc::sim::LogTail(o.run_dir + "/coordinator.log", 5));
      break;
    }
    if (!run.coordinator) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (out.error.empty() && run.failed == 0) FetchFinalModel(o, co, &book, metrics, run);
  FeedKeptModels(o, co, &book, &kept_rounds);
  StopClients(run);
  line.Clear();
  proc.Sample(book.Now());
  Take(book, true, proc, o.verify, o.quiet, line, &out);
  if (out.error.empty() && run.failed > 0) {
    out.error = StrCat(run.failed.load(), " clients failed; the first: ", run.first_error);
  }
  return out;
}

json Summary(const LoadOptions& o, const CoordinatorOptions& co, const Outcome& out,
             const ProcSampler& proc, const Run& run, const LoadBook& book, double wall) {
  uint64_t cuts = 0;
  for (const auto& p : run.proxies) cuts += p->cuts();
  rusage self{};
  ::getrusage(RUSAGE_SELF, &self);
  const double self_cpu = self.ru_utime.tv_sec + self.ru_utime.tv_usec / 1e6 +
                          self.ru_stime.tv_sec + self.ru_stime.tv_usec / 1e6;
  const bool ok = out.error.empty() && out.failed_checks == 0 && out.rounds > 0;
  if (out.error.empty() && out.rounds == 0) fedlgc::log::Warning("fedlgc-load", "no round ran");
  std::printf(
      "%s: %llu rounds, %llu checked (%llu receipts) | coordinator peak RSS %.0f MB, %.1f CPU s, "
      "%d threads | fedlgc-load %.0f MB, %.1f CPU s | %llu link cuts, %llu reconnects | %.1f s\n",
      !ok        ? "FAILED"
      : o.verify ? "every update counted exactly once"
                 : "done (not checked)",
      static_cast<unsigned long long>(out.rounds), static_cast<unsigned long long>(out.checked),
      static_cast<unsigned long long>(out.receipts), proc.peak_rss_mb(), proc.cpu_seconds(),
      proc.max_threads(), self.ru_maxrss / 1024.0, self_cpu, static_cast<unsigned long long>(cuts),
      static_cast<unsigned long long>(book.breaks()), wall);
  for (const auto& [code, what] : book.Breaks())
    std::printf("  %s: %s\n", code.c_str(), what.c_str());
  return json{{"ok", ok},
              {"error", out.error},
              {"rounds", out.rounds},
              {"rounds_checked", out.checked},
              {"receipts", out.receipts},
              {"coordinator_peak_rss_mb", proc.peak_rss_mb()},
              {"coordinator_cpu_seconds", proc.cpu_seconds()},
              {"coordinator_max_threads", proc.max_threads()},
              {"load_peak_rss_mb", self.ru_maxrss / 1024.0},
              {"load_cpu_seconds", self_cpu},
              {"link_cuts", cuts},
              {"reconnects", book.breaks()},
              {"reconnects_by_code", book.Breaks()},
              {"wall_seconds", wall},
              {"config",
               {{"clients", o.clients},
                {"think_seconds", o.think_s},
                {"codec", co.plan.codec},
                {"fraction", co.fraction},
                {"rounds", co.rounds},
                {"model", co.model},
                {"link", o.link},
                {"server", o.server.empty() ? "own" : o.server}}}};
}

}  // namespace

namespace {

// The options as a whole, and the run folder.
absl::Status CheckLoadOptions(const LoadOptions* o, const CoordinatorOptions* co,
                              const fedlgc::modes::ModeOptions& mo) {
  if (!o->server.empty() && !o->insecure && o->certs.empty()) {
    return absl::InvalidArgumentError(
        "--server needs --certs (its CA, to issue client certificates) or --insecure");
  }
  if (o->verify && mo.fedavg.server_momentum != 0) {
    return absl::InvalidArgumentError(
        "--verify-aggregate needs --server-momentum 0 (with momentum a round's step is not its "
        "mean); pass --no-verify-aggregate");
  }
  if (o->verify && co->aggregator != "mean" && co->aggregator != "streaming") {
    return absl::InvalidArgumentError(
        "--verify-aggregate compares each round with the mean of the counted updates: "
        "--aggregator mean or streaming, or pass --no-verify-aggregate");
  }
  const fedlgc::codecs::RoundKind kind = fedlgc::codecs::RoundKindOf(co->plan.codec);
  if (fedlgc::codecs::Present(kind.basis)) {
    return absl::InvalidArgumentError(
        "fedlgc-load's emulated clients do not fetch GradiVeQ's bases: use another --codec");
  }
  if (kind.shared_scale == fedlgc::codecs::Placement::kTop ||
      kind.two_phase == fedlgc::codecs::Placement::kTop) {
    return absl::InvalidArgumentError(
        "fedlgc-load's emulated clients send one update a round and take no part in a round's "
        "own exchange (terngrad(shared=1)'s scale, two-phase PowerSGD's factor): use another "
        "--codec");
  }
  return absl::OkStatus();
}

absl::Status Settle(const CLI::App& app, LoadOptions* o, CoordinatorOptions* co,
                    const fedlgc::modes::ModeOptions& mo) {
  // Rounds open once every emulated client is connected (--fraction samples them).
  if (app.count("--min-clients") == 0) co->min_clients = o->clients;
  if (absl::Status st = CheckLoadOptions(o, co, mo); !st.ok()) return st;
  if (absl::Status st = fedlgc::sim::PrepareRunDir("fedlgc-load", &o->run_dir); !st.ok()) return st;
  std::error_code ec;
  if (o->server.empty() && !std::filesystem::is_empty(o->run_dir + "/coordinator", ec) && !ec) {
    return absl::FailedPreconditionError(
        StrCat(o->run_dir, " holds the state of an earlier job: give a new --run-dir"));
  }
  return absl::OkStatus();
}

// Launches, follows and reports the run; the exit code.
int RunLoad(const LoadOptions& o, const CoordinatorOptions& co,
            const fedlgc::modes::ModeOptions& mo, const fedlgc::StopOnSignals& signals) {
  RaiseFileLimit();
  fedlgc::monitoring::Metrics metrics;
  metrics.SetMaxClientSeries(100);  // the emulated clients' own counters, bounded
  if (!o.metrics_listen.empty()) {
    if (absl::Status st = metrics.Serve(o.metrics_listen); !st.ok()) return Fail(st.ToString());
  }
  LoadBook book(o.verify, mo.fedavg.server_lr);
  Run run;
  if (absl::Status st = Launch(o, co, mo, &book, &metrics, &run); !st.ok()) {
    StopClients(run);
    return Fail(std::string(st.message()));
  }
  if (!o.quiet) PrintHeader(o, co, run.server);
  ProcSampler proc(run.coordinator ? run.coordinator->pid() : o.server_pid);
  const Outcome out = Follow(o, co, book, &metrics, run, proc, signals);
  if (run.coordinator) {
    run.coordinator->Kill(SIGTERM);
    if (run.coordinator->Wait(std::chrono::seconds(20)) < 0) run.coordinator->Kill(SIGKILL);
  }
  json report{{"rounds", out.rows}, {"summary", Summary(o, co, out, proc, run, book, book.Now())}};
  if (!out.error.empty()) Fail(out.error);
  if (!o.report.empty()) {
    if (absl::Status st = fedlgc::AtomicWriteFile(o.report, report.dump(1) + "\n"); !st.ok())
      return Fail(st.ToString());
    std::printf("report: %s\n", o.report.c_str());
  }
  return report["summary"]["ok"].get<bool>() ? 0 : 1;
}

// --check: the run's options, its files and programs, and the coordinator it starts
// (Coordinator::Check, without the certificates and ports the run makes) or the one it
// is given (--server).
int CheckRun(const CLI::App& app, LoadOptions o, CoordinatorOptions co,
             const fedlgc::modes::ModeOptions& mo) {
  fedlgc::core::Preflight p("fedlgc-load");
  if (app.count("--min-clients") == 0) co.min_clients = o.clients;
  p.Report("run options", CheckLoadOptions(&o, &co, mo), StrCat(o.clients, " emulated clients"));
  auto mode = fedlgc::modes::JobMode(co);
  absl::Status job = mode.ok() ? mo.Validate((*mode)->mode) : mode.status();
  p.Report("job", job, mode.ok() ? std::string(fedlgc::ModeName((*mode)->mode)) : "");
  auto link = fedlgc::sim::LinkProfile::Parse(o.link);
  p.Report("link", link.status(), o.link.empty() ? "direct (no fault proxy)" : o.link);
  if (!o.report.empty()) p.Report("report", fedlgc::core::CheckWritableFile(o.report));
  if (!o.metrics_listen.empty()) {
    p.Report("metrics listen", fedlgc::core::CheckListenAddress(o.metrics_listen));
  }
  if (!o.server.empty()) {
    p.Report("run folder", o.run_dir.empty()
                               ? absl::StatusOr<std::string>("a new folder under /tmp")
                               : fedlgc::core::CheckWritableFolder(o.run_dir));
    p.Report("server", fedlgc::core::CheckDialAddress(o.server));
    if (o.insecure) {
      p.Skip("certificates", "none: plaintext (--insecure)");
    } else {
      const bool readable = ::access((o.certs + "/ca.pem").c_str(), R_OK) == 0 &&
                            ::access((o.certs + "/ca.key").c_str(), R_OK) == 0;
      p.Report("certificates",
               readable ? absl::StatusOr<std::string>(
                              StrCat("issued for the clients by ", o.certs, "/ca.pem"))
                        : absl::NotFoundError(
                              StrCat("--certs ", o.certs, ": needs ca.pem and ca.key, readable")));
    }
    return p.Finish();
  }
  fedlgc::sim::CheckRunFiles(o.run_dir, o.bin_dir, {"fedlgc-coordinator"}, o.certs_script,
                             o.insecure, &p);
  if (mode.ok()) {
    if (o.run_dir.empty()) o.run_dir = "/tmp/fedlgc-load-XXXXXX";
    SetService(o, "", &co);
    co.insecure = true;  // the run makes the coordinator's certificates
    fedlgc::coordinator::CheckCoordinator(
        co, **mode, fedlgc::modes::RoundDrivers((*mode)->mode, mo), &p, /*endpoints=*/false);
  }
  return p.Finish();
}

}  // namespace

int main(int argc, char** argv) {
  LoadOptions o;
  CoordinatorOptions co;  // the job's defaults are the coordinator's own
  fedlgc::modes::ModeOptions mo;
  bool check = false;
  CLI::App app("Emulates N edge clients over the real protocol against one coordinator.",
               "fedlgc-load");
  fedlgc::AddCommonFlags(app);
  fedlgc::AddCheckFlag(app, &check);
  AddLoadFlags(app, &o);
  fedlgc::sim::AddJobFlags(app, &co, &mo);
  if (auto code = fedlgc::ParseFlags(app, argc, argv)) return *code;
  fedlgc::InitProcess();
  if (check) return CheckRun(app, o, co, mo);
  const fedlgc::StopOnSignals signals([] {});
  if (o.verify && !o.server.empty() && !DownloadsTrueModels(co)) {
    fedlgc::log::Info("fedlgc-load",
                      "--server with --downlink-codec %s: the clients download the model its "
                      "deltas rebuild, not the true one the aggregate check needs, and the "
                      "coordinator's state folder is not here; no check",
                      co.downlink.codec.c_str());
    o.verify = false;
  }
  const bool temporary_run_dir = o.run_dir.empty();
  if (absl::Status st = Settle(app, &o, &co, mo); !st.ok()) return Fail(std::string(st.message()));
  const int code = RunLoad(o, co, mo, signals);
  if (code == 0 && temporary_run_dir) {
    // Without --run-dir: the run's working files (the coordinator's state, certificates,
    // logs) go; --report names where the figures stay.
    fedlgc::sim::RemoveWorkingFiles(o.run_dir, {o.report});
    std::error_code ec;
    std::filesystem::remove(o.run_dir, ec);  // only when empty
  }
  return code;
}
