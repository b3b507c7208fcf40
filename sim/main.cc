// fedlgc-sim: a whole federation on this machine. Makes certificates, starts a
// coordinator and N edge clients as separate processes talking mTLS over 127.0.0.1
// (optionally through a fault proxy per client), follows the rounds, prints a table per
// round and writes a JSON report. The job's and the modes' flags are the coordinator's
// own (coordinator/flags.h, modes/mode_options.h): the simulator writes them, with the
// service settings it picks, into the coordinator's config file, and each client's
// options into that client's.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/file.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/signals.h"
#include "base/str.h"
#include "coordinator/coordinator.h"
#include "coordinator/downlink.h"
#include "coordinator/flags.h"
#include "coordinator/preflight.h"
#include "core/dataset.h"
#include "core/export.h"
#include "core/model.h"
#include "core/optimizer.h"
#include "core/partition.h"
#include "core/preflight.h"
#include "core/round_report.h"
#include "edge_client/client_host.h"
#include "edge_client/flags.h"
#include "edge_client/shared_resources.h"
#include "modes/catalog.h"
#include "modes/drivers.h"
#include "modes/mode_options.h"
#include "nlohmann/json.hpp"
#include "sim/fault_proxy.h"
#include "sim/launch.h"
#include "sim/link_profile.h"
#include "sim/process.h"

namespace {

using fedlgc::RoundReport;
using fedlgc::StrCat;
using fedlgc::sim::LogTail;
using fedlgc::sim::Median;
using fedlgc::sim::NewRounds;
using nlohmann::json;

// What the simulator itself decides; the job is a CoordinatorOptions.
struct SimOptions {
  uint32_t clients = 4;
  // Clients per fedlgc-edge process (edge_client/client_host.h); 0: one each up to
  // kOwnProcessClients clients, else kHostedClients per process.
  uint32_t clients_per_process = 0;
  int train_slots = 1;       // of each process that hosts several clients
  uint32_t aggregators = 0;  // > 0: a two-tier tree (docs/scale.md)
  std::string link, report, html, run_dir, bin_dir = fedlgc::sim::SelfDir();
  std::string certs_script = fedlgc::sim::CertsScript();
  bool quiet = false, insecure = false;
  // Each C++ client is given the job's TorchScript file (fedlgc-edge --model) rather than
  // downloading it when it joins (Python clients always have it).
  bool clients_have_model = false;
  // What every client trains on and with (edge_client/flags.h AddTrainingFlags): each
  // client's options start from these.
  fedlgc::edge_client::EdgeClientOptions edge = SimClientDefaults();
  std::string test_data;  // empty: --data's test split
  uint64_t eval_limit = 0;
  uint32_t byzantine = 0;                    // the last N clients lie
  std::string attack = "scale(factor=100)";  // how (edge_client/attack.h)
  double join_timeout_s = 60;                // too few clients connected this long: the run fails
  // --python-client: each client runs this file's train(module, info) (and evaluate)
  // through the Python package (python/fedlgc/sim.py) instead of fedlgc-edge.
  std::string python_client;
  std::string python = "/usr/bin/python3";
  std::string python_module;  // the module a Python client trains by default (main sets it)

  static constexpr uint32_t kOwnProcessClients = 16;
  static constexpr uint32_t kHostedClients = 250;
  static constexpr uint32_t kPythonClients = 4;  // a Python process each: torch is heavy

  // How many clients each fedlgc-edge process runs.
  uint32_t PerProcess() const {
    if (clients_per_process > 0) return clients_per_process;
    if (!python_client.empty()) return kPythonClients;
    return clients <= kOwnProcessClients ? 1 : kHostedClients;
  }

  static fedlgc::edge_client::EdgeClientOptions SimClientDefaults() {
    fedlgc::edge_client::EdgeClientOptions o;
    o.train_limit = 20000;  // of fashion-mnist and synthetic data (files: all, main())
    return o;
  }
};

void AddSimFlags(CLI::App& app, SimOptions* s) {
  CLI::Option_group* g = app.add_option_group("Simulation", "the processes on this machine");
  g->add_option("--clients", s->clients, "edge clients");
  g->add_option("--clients-per-process", s->clients_per_process,
                "edge clients each fedlgc-edge process hosts (0: one each up to 16 clients, "
                "else 250 each), sharing its data, models and libtorch");
  g->add_option("--train-slots", s->train_slots,
                "hosted clients of one process that may train at once");
  g->add_option("--aggregators", s->aggregators,
                "a two-tier tree: this many aggregators (coordinators with --parent) between "
                "the root and the clients, client i under aggregator i mod N; --fraction then "
                "samples each aggregator's clients, and the root asks every aggregator");
  g->add_option("--link", s->link,
                "a fault proxy per client: a link, e.g. delay=50ms,rate=10mbit,cut=0.05, whose "
                "values may be drawn per client (rate=lognormal(median=5mbit,sigma=1), "
                "delay=uniform(20ms,200ms)), with availability (join=30s, offline=0.2, "
                "offline_mean=60s); or trace:FILE.csv, a row per client (docs/scale.md)");
  g->add_option("--report", s->report, "write a JSON report here");
  g->add_option("--html", s->html,
                "write a self-contained HTML report with plots here (fedlgc-report, which needs "
                "python3-matplotlib)");
  fedlgc::AddBoolFlag(*g, "--quiet", &s->quiet, "print only the summary");
  g->add_option(
      "--run-dir", s->run_dir,
      "the run's folder: the coordinator's and the clients' state folders, configs, "
      "logs and certificates (default: a new folder in $TMPDIR or /tmp, whose working files "
      "are removed after a run that succeeds: the exported model and the reports "
      "stay)");
  fedlgc::AddRenamedFlag(*g, "--state-dir", "--run-dir", &s->run_dir);
  g->add_option("--bin-dir", s->bin_dir, "where fedlgc-coordinator and fedlgc-edge are");
  g->add_option("--certs-script", s->certs_script, "scripts/gen-certs.sh");
  fedlgc::AddBoolFlag(*g, "--insecure", &s->insecure, "plaintext instead of mTLS");
  g->add_option("--test-data", s->test_data,
                "the coordinator's test set in the same forms as --data (default: --data's test "
                "split: an npz's x_test and y_test, or its x and y)");
  g->add_option("--eval-limit", s->eval_limit, "test examples for evaluation (0 = all)");
  CLI::Option_group* t = app.add_option_group("Clients", "what every client trains on and with");
  fedlgc::edge_client::AddTrainingFlags(*t, &s->edge);
  fedlgc::AddBoolFlag(
      *t, "--clients-have-model", &s->clients_have_model,
      "give each client the job's TorchScript file (fedlgc-edge --model), as an app that "
      "ships its model does: under a compressed downlink its first model is then an "
      "empty chain; by default clients download the file when they join, counted in "
      "round 1's downlink bytes");
  t->get_option("--data")->description(
      "the clients' data: fashion-mnist, synthetic:N, npz:PATH, csv:PATH or images:DIR, split "
      "by --partition; a path with {i} names each client's own file (client i reads it whole, "
      "no split) (docs/your-model.md)");
  t->get_option("--train-limit")
      ->description(
          "training examples split among clients (0 = all; the default 20000 applies to "
          "fashion-mnist and synthetic data, files are read whole)");
  g->add_option("--byzantine", s->byzantine,
                "robustness experiments: the last N clients lie about their updates");
  g->add_option("--attack", s->attack,
                "how the --byzantine clients lie: scale(factor=100), signflip(factor=1) or "
                "noise(std=1)");
  g->add_option("--python-client", s->python_client,
                "run every client's training through the Python package with FILE.py's "
                "train(module, info) (and evaluate(module, info) if it defines one; model() "
                "for the module, else the job's): info.data is the client's shard as the C++ "
                "clients read and split it (docs/your-model.md)");
  g->add_option("--python", s->python, "the Python interpreter of --python-client");
  g->add_option("--join-timeout", s->join_timeout_s,
                "seconds the coordinator may wait for too few connected clients before the run "
                "fails (0: wait forever)")
      ->check(CLI::NonNegativeNumber);
}

int Fail(const std::string& msg) {
  fedlgc::log::Error("fedlgc-sim", "%s", msg);
  return 1;
}

std::string ClientConfig(fedlgc::edge_client::EdgeClientOptions eo) {
  CLI::App app;
  fedlgc::CaptureDefaults(app);
  fedlgc::edge_client::AddEdgeClientFlags(app, &eo);
  return fedlgc::ConfigText(app);
}

// A Python client's options (python/fedlgc/sim.py reads them): its C++ client's, the
// module it trains by default, and the job's held-out share.
std::string PythonClientConfig(const fedlgc::edge_client::EdgeClientOptions& eo,
                               const SimOptions& s, const fedlgc::coordinator::CoordinatorOptions& co) {
  json j{{"server", eo.server},
         {"client_id", eo.client_id},
         {"state_dir", eo.state_dir},
         {"insecure", eo.insecure},
         {"tls_ca", eo.tls_ca},
         {"tls_cert", eo.tls_cert},
         {"tls_key", eo.tls_key},
         {"data", eo.data},
         {"data_dir", eo.data_dir},
         {"label_column", eo.label_column},
         {"targets", eo.targets},
         {"inputs", eo.inputs},
         {"train_limit", eo.train_limit},
         {"shard", eo.shard},
         {"num_shards", eo.num_shards},
         {"partition", eo.partition},
         {"partition_seed", eo.partition_seed},
         {"eval_data", eo.eval_data},
         {"eval_fraction", co.EvalOnClients() && co.eval_every > 0 ? co.eval_fraction : 0.0},
         {"module_file", s.python_module},
         // A TorchScript job's file is the client's own copy; a built-in job has none.
         {"model_file", co.model_options().IsFile() ? s.python_module : ""},
         {"torch_threads", eo.torch_threads},
         {"linger", eo.linger_s}};
  return j.dump(1) + "\n";
}

// The service settings of the coordinator the simulator starts.
void SetService(const SimOptions& s, const std::string& certs,
                fedlgc::coordinator::CoordinatorOptions* co) {
  co->listen = "127.0.0.1:0";
  co->metrics_listen = "127.0.0.1:0";
  co->state_dir = s.run_dir + "/coordinator";
  co->test_data = s.test_data.empty() ? s.edge.data : s.test_data;
  co->data_dir = s.edge.data_dir;
  co->label_column = s.edge.label_column;
  co->targets = s.edge.targets;
  co->inputs = s.edge.inputs;
  co->eval_limit = s.eval_limit;
  co->torch_threads = s.edge.torch_threads;
  co->linger_s = 2;  // clients that reconnect late still read their last receipts
  co->insecure = s.insecure;
  if (!s.insecure) {
    co->tls_ca = certs + "/ca.pem";
    co->tls_cert = certs + "/server.pem";
    co->tls_key = certs + "/server.key";
  }
}

fedlgc::edge_client::EdgeClientOptions ClientOptions(const SimOptions& s, const std::string& certs,
                                                     uint32_t i, int port, uint64_t seed) {
  fedlgc::edge_client::EdgeClientOptions eo = s.edge;  // data, optimizer, partition, device
  eo.server = StrCat("127.0.0.1:", port);
  eo.client_id = StrCat("client-", i);
  eo.state_dir = s.run_dir + "/clients";
  eo.shard = i;
  eo.num_shards = s.clients;
  // A file of each client's own: read whole.
  if (s.edge.data.find("{i}") != std::string::npos) {
    eo.data = fedlgc::edge_client::WithIndex(s.edge.data, i);
    eo.shard = 0;
    eo.num_shards = 1;
  }
  if (s.edge.eval_data.find("{i}") != std::string::npos) {
    eo.eval_data = fedlgc::edge_client::WithIndex(s.edge.eval_data, i);
  }
  eo.partition_seed = seed;
  eo.insecure = s.insecure;
  if (i + s.byzantine >= s.clients) eo.attack = s.attack;
  if (!s.insecure) {
    eo.tls_ca = certs + "/ca.pem";
    eo.tls_cert = certs + "/" + eo.client_id + ".pem";
    eo.tls_key = certs + "/" + eo.client_id + ".key";
  }
  return eo;
}

void PrintHeader(const SimOptions& s, const fedlgc::coordinator::CoordinatorOptions& co,
                 const fedlgc::coordinator::ModeTraits& mode,
                 const fedlgc::modes::ModeOptions& mo) {
  const std::string algorithm =
      mo.fedavg.algorithm == "fedavg" ? "" : StrCat(" (", mo.fedavg.algorithm, ")");
  std::printf(
      "fedlgc-sim: %s%s, %u clients (%u per process), %u rounds, codec %s, downlink %s, %s, "
      "link %s, run folder %s\n",
      std::string(fedlgc::ModeName(mode.mode)).c_str(), algorithm.c_str(), s.clients,
      s.PerProcess(), co.rounds, co.plan.codec.c_str(),
      fedlgc::coordinator::EffectiveDownlinkCodec(co.downlink.codec).c_str(),
      s.edge.partition.c_str(), s.link.empty() ? "direct" : s.link.c_str(), s.run_dir.c_str());
  std::printf("%5s %9s %8s %13s %13s %7s %13s %7s %8s %5s %s\n", "round", "accuracy", "loss",
              "uplink B", "fp32 B", "ratio", "downlink B", "ratio", "seconds", "parts",
              std::string(mode.report_heading).c_str());
}

// The mode's column (ModeTraits::report_key, a label or a figure): LSGD's global leader,
// SGP's consensus distance.
void PrintRow(const RoundReport& r, std::string_view report_key) {
  const std::string key(report_key);
  const std::string extra = key.empty()            ? std::string()
                            : r.labels.count(key)  ? r.Label(key)
                            : r.figures.count(key) ? StrCat(r.Figure(key))
                                                   : std::string();
  // Without a server evaluation, the clients' (--eval clients), marked with a c.
  const bool clients = r.accuracy < 0 && r.federated_eval.has_value() && r.federated_eval->clients > 0;
  const std::string fed = clients ? StrCat(" clients ", r.federated_eval->clients, "/",
                                           r.federated_eval->asked)
                                  : std::string();
  std::printf("%5llu %9.4f%s %8.4f %13llu %13llu %7.1f %13llu %7.1f %8.1f %5d %s%s\n",
              static_cast<unsigned long long>(r.round),
              clients ? r.federated_eval->accuracy : r.accuracy, clients ? "c" : "",
              clients ? r.federated_eval->loss : r.loss,
              static_cast<unsigned long long>(r.uplink_bytes),
              static_cast<unsigned long long>(r.raw_uplink_bytes),
              r.uplink_bytes > 0 ? double(r.raw_uplink_bytes) / r.uplink_bytes : 0.0,
              static_cast<unsigned long long>(r.downlink_bytes),
              r.downlink_bytes > 0 ? double(r.raw_downlink_bytes) / r.downlink_bytes : 0.0,
              r.seconds, r.participants, extra.c_str(), fed.c_str());
  std::fflush(stdout);
}

// The clients' encode and local training seconds per round (their rounds.jsonl): per
// round the largest encode / train ratio over the clients, and the total encode over the
// total training time; in LGC jobs, the relative error of each leader and follower update.
struct EncodeShare {
  std::map<uint64_t, double> worst;  // round -> max over clients of encode / train
  // round -> max over clients of the training's wall and CPU seconds
  std::map<uint64_t, double> train_wall, train_cpu;
  double total_encode = 0, total_train = 0;
  std::vector<double> leader_error, follower_error;
};

EncodeShare ReadEncodeShare(const std::string& dir, uint32_t clients) {
  EncodeShare e;
  for (uint32_t i = 0; i < clients; ++i) {
    auto records = fedlgc::ReadClientRoundLog(StrCat(dir, "/client-", i, ".rounds.jsonl"));
    if (!records.ok()) continue;
    for (const fedlgc::ClientRoundRecord& r : *records) {
      const auto get = [&](const char* k) {
        auto it = r.figures.find(k);
        return it == r.figures.end() ? 0.0 : it->second;
      };
      if (r.figures.count("lgc_relative_error")) {
        (get("lgc_leader") > 0 ? e.leader_error : e.follower_error)
            .push_back(get("lgc_relative_error"));
        continue;
      }
      const double train = get("train_seconds"), enc = get("encode_seconds");
      e.total_encode += enc;
      e.total_train += train;
      if (train > 0) e.worst[r.round] = std::max(e.worst[r.round], enc / train);
      e.train_wall[r.round] = std::max(e.train_wall[r.round], train);
      e.train_cpu[r.round] = std::max(e.train_cpu[r.round], get("train_cpu_seconds"));
    }
  }
  return e;
}

// A number for JSON: NaN and infinities become null.
json Num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

}  // namespace

namespace {

using fedlgc::coordinator::CoordinatorOptions;
using fedlgc::sim::ChildProcess;

struct Federation {
  std::unique_ptr<ChildProcess> coordinator;
  std::vector<std::unique_ptr<ChildProcess>> aggregators;  // --aggregators
  std::vector<std::unique_ptr<fedlgc::sim::FaultProxy>> proxies;  // --link: client i's
  std::vector<fedlgc::sim::LinkSpec> links;                       // what each proxy does
  std::vector<std::unique_ptr<ChildProcess>> edges;  // fedlgc-edge processes
  std::vector<std::string> edge_names;               // "client-3", "clients 0-249"
  std::vector<std::string> edge_logs;
  std::chrono::steady_clock::time_point start;
};

// Aggregator `a` of a tree under the root on `root_port`: the job's options, its own
// folder and service, and the clients under it (i mod --aggregators == a).
CoordinatorOptions AggregatorOptions(const SimOptions& s, const std::string& certs,
                                     const CoordinatorOptions& job, uint32_t a, int root_port) {
  CoordinatorOptions o = job;
  o.state_dir = StrCat(s.run_dir, "/agg-", a);
  o.min_clients = 0;
  for (uint32_t i = a; i < s.clients; i += s.aggregators) ++o.min_clients;
  o.eval_every = 0;  // the root evaluates the global model
  o.eval = "server";
  o.export_path.clear();  // and hands it over
  o.export_best = false;
  o.tensorboard.clear();  // and writes the run's scalars
  o.parent = StrCat("127.0.0.1:", root_port);
  o.parent_id = StrCat("agg-", a);
  if (!s.insecure) {
    o.parent_tls_cert = StrCat(certs, "/agg-", a, ".pem");
    o.parent_tls_key = StrCat(certs, "/agg-", a, ".key");
  }
  return o;
}

// The command of the process that runs clients first..last: fedlgc-edge, or with
// --python-client the Python runner (python/fedlgc/sim.py) with each client's JSON.
std::vector<std::string> ClientProcessArgv(const SimOptions& s, uint32_t first, uint32_t last) {
  if (!s.python_client.empty()) {
    // The package beside the binaries (build/python, or the install's), before whatever
    // PYTHONPATH holds.
    const char* path = std::getenv("PYTHONPATH");
    std::vector<std::string> argv = {"/usr/bin/env",
                                     StrCat("PYTHONPATH=", fedlgc::sim::PythonPackageDir(s.bin_dir),
                                            path ? StrCat(":", path) : ""),
                                     s.python,
                                     "-m",
                                     "fedlgc.sim",
                                     "--file",
                                     s.python_client};
    for (uint32_t i = first; i <= last; ++i) {
      argv.push_back(StrCat("--config=", s.run_dir, "/client-", i, ".json"));
    }
    return argv;
  }
  if (first == last && s.PerProcess() == 1) {
    return {s.bin_dir + "/fedlgc-edge", StrCat("--config=", s.run_dir, "/client-", first, ".toml")};
  }
  return {s.bin_dir + "/fedlgc-edge", StrCat("--client-ids=", first, "-", last),
          StrCat("--client-config=", s.run_dir, "/client-{i}.toml"),
          StrCat("--train-slots=", s.train_slots)};
}

// Certificates, the coordinator (and --aggregators under it), a fault proxy per client
// (with --link), the clients.
absl::StatusOr<Federation> Launch(const SimOptions& s, CoordinatorOptions co,
                                  const fedlgc::modes::ModeOptions& mo,
                                  const fedlgc::sim::LinkProfile& link) {
  const std::string certs = s.run_dir + "/certs";
  std::string cmd = s.certs_script + " " + certs;
  for (uint32_t i = 0; i < s.clients; ++i) cmd += StrCat(" client-", i);
  for (uint32_t a = 0; a < s.aggregators; ++a) cmd += StrCat(" agg-", a);
  cmd += " >/dev/null";
  if (!s.insecure && std::system(cmd.c_str()) != 0) {
    return absl::InternalError("certificate generation failed: " + cmd);
  }
  SetService(s, certs, &co);
  Federation f;
  f.start = std::chrono::steady_clock::now();
  int port = 0;
  CoordinatorOptions root = co;
  if (s.aggregators > 0) {
    root.min_clients = s.aggregators;
    root.fraction = 1;  // the aggregators sample their clients
  }
  auto coordinator = fedlgc::sim::StartCoordinator(s.bin_dir, s.run_dir, root, mo, &port);
  if (!coordinator.ok()) return coordinator.status();
  f.coordinator = *std::move(coordinator);
  std::vector<int> ports;  // of each aggregator
  for (uint32_t a = 0; a < s.aggregators; ++a) {
    const CoordinatorOptions ao = AggregatorOptions(s, certs, co, a, port);
    int agg_port = 0;
    // The server optimizer is the root's, applied once to the merged updates.
    auto agg = fedlgc::sim::StartCoordinator(s.bin_dir, s.run_dir, ao, fedlgc::modes::ModeOptions(),
                                             &agg_port, StrCat("agg-", a));
    if (!agg.ok()) return agg.status();
    f.aggregators.push_back(*std::move(agg));
    ports.push_back(agg_port);
  }
  for (uint32_t i = 0; i < s.clients; ++i) {
    int target = s.aggregators > 0 ? ports[i % s.aggregators] : port;
    if (!link.trivial()) {
      // Each client's own link, drawn from the profile (or its row of a trace).
      f.links.push_back(link.Draw(i, StrCat("client-", i), co.seed));
      auto p =
          fedlgc::sim::FaultProxy::Start("127.0.0.1", target, f.links.back(), co.seed * 1000 + i);
      if (!p.ok()) return p.status();
      target = (*p)->port();
      f.proxies.push_back(std::move(p).value());
    }
    auto eo = ClientOptions(s, certs, i, target, co.seed);
    if (s.clients_have_model) eo.model = std::filesystem::absolute(co.model).string();
    const std::string client_config = StrCat(s.run_dir, "/", eo.client_id, ".toml");
    if (auto st = fedlgc::AtomicWriteFile(client_config, ClientConfig(eo)); !st.ok()) return st;
    if (!s.python_client.empty()) {
      if (auto st = fedlgc::AtomicWriteFile(StrCat(s.run_dir, "/", eo.client_id, ".json"),
                                            PythonClientConfig(eo, s, co));
          !st.ok()) {
        return st;
      }
    }
  }
  // One process per client, or processes that host a range of clients each, every client
  // from its own config file.
  const uint32_t per = s.PerProcess();
  for (uint32_t first = 0; first < s.clients; first += per) {
    const uint32_t last = std::min(s.clients, first + per) - 1;
    f.edge_names.push_back(per == 1 ? StrCat("client-", first)
                                    : StrCat("clients ", first, "-", last));
    const std::vector<std::string> argv = ClientProcessArgv(s, first, last);
    f.edge_logs.push_back(per == 1 ? StrCat(s.run_dir, "/client-", first, ".log")
                                   : StrCat(s.run_dir, "/clients-", first, "-", last, ".log"));
    f.edges.push_back(std::make_unique<ChildProcess>(argv, f.edge_logs.back()));
  }
  return f;
}

// Asks every process of the federation to stop, and kills what is left after `grace`.
void StopAll(Federation& f, std::chrono::milliseconds grace) {
  f.coordinator->Kill(SIGTERM);
  for (auto& a : f.aggregators) a->Kill(SIGTERM);
  for (auto& e : f.edges) e->Kill(SIGTERM);
  const auto until = std::chrono::steady_clock::now() + grace;
  auto stop = [&](ChildProcess& p) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (p.running() && p.Wait(std::max(left, std::chrono::milliseconds(0))) < 0) {
      p.Kill(SIGKILL);
      p.Wait(std::chrono::seconds(5));
    }
  };
  stop(*f.coordinator);
  for (auto& a : f.aggregators) stop(*a);
  for (auto& e : f.edges) stop(*e);
}

struct FollowResult {
  std::vector<RoundReport> rows;
  int code = -1;      // the coordinator's exit code
  std::string error;  // why the run was stopped early; empty when it was not
};

// Follows rounds.jsonl while the coordinator runs, with a live line of progress.json on a
// terminal. Stops the federation on SIGINT/SIGTERM and when too few clients have been
// connected for --join-timeout.
FollowResult Follow(Federation& f, const SimOptions& s, std::string_view report_key,
                    const fedlgc::StopOnSignals& signals) {
  const std::string dir = s.run_dir + "/coordinator";
  fedlgc::sim::TerminalLine line(!s.quiet && ::isatty(STDOUT_FILENO) == 1);
  FollowResult out;
  auto clear = [&] { line.Clear(); };
  for (;;) {
    out.code = f.coordinator->Wait(std::chrono::milliseconds(200));
    std::vector<RoundReport> fresh = NewRounds(dir + "/rounds.jsonl", out.rows.size());
    if (!fresh.empty() && !s.quiet) clear();
    for (RoundReport& r : fresh) {
      if (!s.quiet) PrintRow(r, report_key);
      out.rows.push_back(std::move(r));
    }
    // Before the coordinator's exit: Ctrl-C on a terminal reaches the whole process group,
    // and a coordinator that stops on it exits 0.
    if (const int signal = signals.signal(); signal != 0) {
      clear();
      out.error = StrCat("stopped by ", signal == SIGINT ? "SIGINT" : "SIGTERM",
                         "; the run folder is ", s.run_dir);
      StopAll(f, std::chrono::seconds(10));
      return out;
    }
    if (out.code >= 0) break;
    // A client that gave up (bad data, a model that does not fit, a refused identity)
    // says why at once: the run fails with its words rather than waiting for it.
    for (size_t i = 0; i < f.edges.size(); ++i) {
      if (!f.edges[i]->running()) continue;
      const int code = f.edges[i]->Wait(std::chrono::milliseconds(0));
      if (code <= 0) continue;
      clear();
      out.error = StrCat(f.edge_names[i], " exited with status ", code, "; its log ends:\n",
                         LogTail(f.edge_logs[i], 5), "(run folder ", s.run_dir, ")");
      StopAll(f, std::chrono::seconds(10));
      return out;
    }
    auto text = fedlgc::ReadFileIfExists(dir + "/progress.json");
    if (!text.ok() || !text->has_value()) continue;
    const json p = json::parse(**text, nullptr, /*allow_exceptions=*/false);
    if (!p.is_object()) continue;  // being replaced: read it next time
    if (s.join_timeout_s > 0 && p.value("state", "") == "waiting" &&
        p.value("waiting_seconds", 0.0) > s.join_timeout_s) {
      clear();
      out.error = StrCat("only ", p.value("connected", 0), " of ", p.value("needed", 0),
                         " clients connected for ", s.join_timeout_s, " s (--join-timeout); ",
                         f.edge_names[0], "'s log ends:\n", LogTail(f.edge_logs[0], 5),
                         "(run folder ", s.run_dir, ")");
      StopAll(f, std::chrono::seconds(10));
      return out;
    }
    line.Show(fedlgc::sim::ProgressLine(p));
  }
  clear();
  for (auto& a : f.aggregators) {
    if (a->Wait(std::chrono::seconds(20)) < 0) a->Kill(SIGKILL);
  }
  for (auto& e : f.edges) {
    if (e->Wait(std::chrono::seconds(20)) < 0) e->Kill(SIGKILL);
  }
  return out;
}

json ConfigJson(const SimOptions& s, const CoordinatorOptions& co,
                const fedlgc::modes::ModeOptions& mo) {
  using fedlgc::coordinator::JoinSpecs;
  const std::string warmup = JoinSpecs(co.plan.warmup_codecs), ladder = JoinSpecs(co.codec_ladder);
  return json{{"clients", s.clients},
              {"clients_per_process", s.PerProcess()},
              {"aggregators", s.aggregators},
              {"rounds", co.rounds},
              {"mode", co.mode},
              {"codec", co.plan.codec},
              {"codec_warmup", warmup},
              {"codec_ladder", ladder},
              {"downlink_codec", fedlgc::coordinator::EffectiveDownlinkCodec(co.downlink.codec)},
              {"partition", s.edge.partition},
              {"algorithm", mo.fedavg.algorithm},
              {"local_epochs", co.plan.local_epochs},
              {"upload_order", co.plan.upload_order},
              {"seed", co.seed},
              {"link", s.link},
              {"model", co.model},
              {"buffers", co.buffers},
              {"freeze", co.freeze},
              {"local_params", co.local_params},
              {"data", s.edge.data},
              {"test_data", co.test_data},
              {"eval", co.EvalOnServer() && co.EvalOnClients() ? "both"
                       : co.EvalOnClients()                    ? "clients"
                                                               : "server"},
              {"eval_fraction", co.EvalOnClients() ? co.eval_fraction : 0.0},
              {"optimizer", s.edge.optimizer},
              {"train_limit", s.edge.train_limit},
              {"aggregator", co.aggregator},
              {"clip_multiplier", co.clip_multiplier},
              {"guard", co.guard.enabled},
              {"byzantine", s.byzantine},
              {"attack", s.byzantine > 0 ? s.attack : "none"}};
}

// The accuracy a run reached: its last round's, its best round's (as published
// benchmarks report, e.g. Li et al. 2022) and the mean of its last five rounds that have
// one (with --eval-every N, of the last five evaluations). Each round's is the
// coordinator's test set's, or the clients' (--eval clients) where it has none; -1 where
// no round has one.
struct AccuracyOverRounds {
  double last = -1, best = -1, last5_mean = -1;
  uint64_t best_round = 0;
};

AccuracyOverRounds Accuracies(const std::vector<RoundReport>& rows) {
  AccuracyOverRounds out;
  std::vector<double> seen;
  for (const RoundReport& r : rows) {
    double a = r.accuracy;
    if (a < 0 && r.federated_eval.has_value()) a = r.federated_eval->accuracy;
    if (a < 0) continue;
    seen.push_back(a);
    if (a > out.best) {
      out.best = a;
      out.best_round = r.round;
    }
  }
  if (!rows.empty()) {
    const RoundReport& r = rows.back();
    out.last =
        r.accuracy >= 0 || !r.federated_eval.has_value() ? r.accuracy : r.federated_eval->accuracy;
  }
  if (!seen.empty()) {
    const size_t k = std::min<size_t>(5, seen.size());
    double sum = 0;
    for (size_t i = seen.size() - k; i < seen.size(); ++i) sum += seen[i];
    out.last5_mean = sum / k;
  }
  return out;
}

// Prints the run's summary line and returns it as JSON.
json Summarize(const std::vector<RoundReport>& rows, const Federation& f, const EncodeShare& share,
               const SimOptions& s) {
  double up = 0, raw = 0, down = 0, raw_down = 0;
  for (const RoundReport& r : rows) {
    up += static_cast<double>(r.uplink_bytes);
    raw += static_cast<double>(r.raw_uplink_bytes);
    down += static_cast<double>(r.downlink_bytes);
    raw_down += static_cast<double>(r.raw_downlink_bytes);
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - f.start).count();
  const AccuracyOverRounds acc = Accuracies(rows);
  std::vector<double> worst;
  for (const auto& [round, w] : share.worst) worst.push_back(w);
  const double worst_median = Median(worst);
  const double total_share = share.total_train > 0 ? share.total_encode / share.total_train : -1;
  uint64_t cuts = 0, offline_cuts = 0;
  json cuts_per_client = json::object(), links = json::object();
  for (size_t i = 0; i < f.proxies.size(); ++i) {
    cuts += f.proxies[i]->cuts();
    offline_cuts += f.proxies[i]->offline_cuts();
    cuts_per_client[StrCat("client-", i)] = f.proxies[i]->cuts();
    const fedlgc::sim::LinkSpec& l = f.links[i];
    links[StrCat("client-", i)] = {{"rate_mbit", l.rate_bytes_per_s * 8 / 1e6},
                                   {"delay_ms", l.delay_s * 1e3},
                                   {"cut_per_mib", l.cut_per_mib},
                                   {"join_s", l.join_s},
                                   {"offline_share", l.offline_share},
                                   {"offline_cuts", f.proxies[i]->offline_cuts()},
                                   {"offline_refused", f.proxies[i]->offline_refused()}};
  }
  // In a tree, what the clients sent the aggregators (the rows are the root's).
  double below = 0;
  for (uint32_t a = 0; a < s.aggregators; ++a) {
    for (const RoundReport& r : NewRounds(StrCat(s.run_dir, "/agg-", a, "/rounds.jsonl"), 0)) {
      below += static_cast<double>(r.uplink_bytes);
    }
  }
  if (s.aggregators > 0) {
    std::printf(
        "tree: the clients sent %.0f B to %u aggregators, which sent %.0f B to the root "
        "(%.1fx fewer)\n",
        below, s.aggregators, up, up > 0 ? below / up : 0.0);
  }
  std::printf(
      "final accuracy %.4f (best %.4f in round %llu, last 5 %.4f) | uplink %.0f B for %.0f fp32 "
      "B (%.1fx) | downlink %.0f B for %.0f fp32 B (%.1fx) | %.1f s | %llu link cuts | encode "
      "%.2f%% of local training (worst client, median round %.2f%%)\n",
      acc.last, acc.best, static_cast<unsigned long long>(acc.best_round), acc.last5_mean, up, raw,
      up > 0 ? raw / up : 0.0, down, raw_down, down > 0 ? raw_down / down : 0.0, wall,
      static_cast<unsigned long long>(cuts), 100 * total_share, 100 * worst_median);
  const double leader_error = Median(share.leader_error);
  const double follower_error = Median(share.follower_error);
  if (leader_error >= 0 || follower_error >= 0) {
    std::printf(
        "LGC reconstruction error |v - decoded| / |v|, median: leader %.3f (%zu updates), "
        "followers %.3f (%zu updates)\n",
        leader_error, share.leader_error.size(), follower_error, share.follower_error.size());
  }
  return json{{"final_accuracy", Num(acc.last)},
              {"best_accuracy", Num(acc.best)},
              {"best_round", acc.best_round},
              {"last5_mean_accuracy", Num(acc.last5_mean)},
              {"uplink_bytes", static_cast<uint64_t>(up)},
              {"raw_uplink_bytes", static_cast<uint64_t>(raw)},
              {"downlink_bytes", static_cast<uint64_t>(down)},
              {"raw_downlink_bytes", static_cast<uint64_t>(raw_down)},
              {"compression_ratio", up > 0 ? raw / up : 0},
              {"downlink_ratio", down > 0 ? raw_down / down : 0},
              {"wall_seconds", wall},
              {"link_cuts", cuts},
              {"link_cuts_per_client", cuts_per_client},
              {"offline_cuts", offline_cuts},
              {"links", links},
              {"encode_share_of_training", Num(total_share)},
              {"encode_share_worst_client_median", Num(worst_median)},
              {"lgc_leader_error_median", leader_error},
              {"lgc_follower_error_median", follower_error},
              {"aggregators_uplink_bytes", static_cast<uint64_t>(below)}};
}

// The run's JSON report: its settings, every round (with its slowest client's training in
// wall and CPU seconds, what it would take on a core of its own), and the summary.
json Report(const std::vector<RoundReport>& rows, const Federation& f, const SimOptions& s,
            const CoordinatorOptions& co, const fedlgc::modes::ModeOptions& mo) {
  json report{{"config", ConfigJson(s, co, mo)}, {"rounds", json::array()}};
  // The values that travel (the flat vector), and the parameters' that stay home.
  if (auto model = fedlgc::core::Model::Create(co.model_options(), co.init_seed); model.ok()) {
    const fedlgc::core::ParameterGroups& g = (*model)->parameter_groups();
    report["parameters"] = json{{"travel", (*model)->dim()},
                                {"frozen", g.frozen_values},
                                {"local", g.local_values},
                                {"frozen_names", g.frozen},
                                {"local_names", g.local}};
  }
  const EncodeShare share = ReadEncodeShare(s.run_dir + "/clients", s.clients);
  for (const RoundReport& r : rows) {
    json row = json::parse(fedlgc::ToJson(r));
    if (auto it = share.train_wall.find(r.round); it != share.train_wall.end()) {
      row["train_seconds_max"] = it->second;
      row["train_cpu_seconds_max"] = share.train_cpu.at(r.round);
    }
    report["rounds"].push_back(std::move(row));
  }
  report["summary"] = Summarize(rows, f, share, s);
  return report;
}

// --report's JSON and --html's page (drawn by fedlgc-report from the JSON, the run
// folder's without --report).
absl::Status WriteReports(const json& report, const SimOptions& s) {
  if (s.report.empty() && s.html.empty()) return absl::OkStatus();
  const std::string json_path = s.report.empty() ? s.run_dir + "/report.json" : s.report;
  if (auto st = fedlgc::AtomicWriteFile(json_path, report.dump(1) + "\n"); !st.ok()) return st;
  if (!s.report.empty()) std::printf("report: %s\n", s.report.c_str());
  if (s.html.empty()) return absl::OkStatus();
  const std::string log = s.run_dir + "/report.log";
  ChildProcess tool({s.bin_dir + "/fedlgc-report", json_path, "-o", s.html}, log);
  if (const int rc = tool.Wait(std::chrono::minutes(5)); rc != 0) {
    return absl::InternalError(StrCat("fedlgc-report failed (exit ", rc, "):\n", LogTail(log, 5)));
  }
  std::printf("html: %s\n", s.html.c_str());
  return absl::OkStatus();
}

// Where the trained model went (--export, by default <run folder>/model.pt): a line a
// newcomer can follow, and the report's "export".
json ReportExport(const CoordinatorOptions& co) {
  auto files = fedlgc::core::ExportFiles::For(co.export_path);
  if (!files.ok()) return json();
  auto text = fedlgc::ReadFileIfExists(files->json);
  if (!text.ok() || !text->has_value()) {
    std::printf("model: none exported (no round committed)\n");
    return json();
  }
  json meta = json::parse(**text, nullptr, /*allow_exceptions=*/false);
  if (!meta.is_object()) return json();
  std::string eval;
  if (meta.value("metric", json()).is_string() && meta[meta["metric"].get<std::string>()].is_number()) {
    eval = StrCat(", ", meta["metric"].get<std::string>(), " ",
                  meta[meta["metric"].get<std::string>()].get<double>());
  }
  std::printf(
      "model: %s (round %llu%s; tensors in %s)\n  load it: /usr/bin/python3 -c \"import torch; "
      "print(torch.jit.load('%s'))\"\n",
      files->pt.c_str(), static_cast<unsigned long long>(meta.value("round", uint64_t{0})),
      eval.c_str(), files->npz.c_str(), files->pt.c_str());
  return json{{"pt", files->pt}, {"npz", files->npz}, {"json", files->json}, {"metadata", meta}};
}

// --python-client: the file and the package, and the module the clients train unless the
// file says otherwise: the job's TorchScript file, or the built-in scripted with the
// job's initial weights (<run folder>/<model>.pt).
// What --python-client needs: its file, the interpreter and the Python package.
absl::StatusOr<std::string> CheckPythonClients(const SimOptions& s) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(s.python_client, ec)) {
    return absl::InvalidArgumentError(
        StrCat("--python-client ", s.python_client, ": no such file"));
  }
  if (::access(s.python.c_str(), X_OK) != 0) {
    return absl::NotFoundError(StrCat("--python ", s.python, ": not an executable here"));
  }
  const std::string package = fedlgc::sim::PythonPackageDir(s.bin_dir);
  if (!fs::exists(package + "/fedlgc/sim.py", ec)) {
    return absl::FailedPreconditionError(
        StrCat("--python-client: the Python package is not built beside ", s.bin_dir,
               " (it needs Debian's pybind11-dev and python3-dev)"));
  }
  if (s.byzantine > 0) {
    return absl::InvalidArgumentError("--byzantine: the lying clients are C++ clients only");
  }
  return StrCat(s.python_client, " through ", s.python, " (the package in ", package, ")");
}

absl::Status PreparePythonClients(SimOptions* s, const CoordinatorOptions& co) {
  namespace fs = std::filesystem;
  if (auto checked = CheckPythonClients(*s); !checked.ok()) return checked.status();
  s->python_client = fs::absolute(s->python_client).string();
  const fedlgc::core::ModelOptions mo = co.model_options();
  if (mo.IsFile()) {
    s->python_module = fs::absolute(co.model).string();
    return absl::OkStatus();
  }
  auto model = fedlgc::core::Model::Create(mo, co.init_seed);
  if (!model.ok()) return model.status();
  auto bytes = (*model)->TorchScriptBytes({});
  if (!bytes.ok()) return bytes.status();
  s->python_module = StrCat(s->run_dir, "/", co.model, ".pt");
  return fedlgc::AtomicWriteFile(s->python_module, *bytes);
}

// The trained model's files (--export, by default <run folder>/model.pt), checked
// writable, --tensorboard's folder made absolute, and --python-client's preparation.
absl::Status PrepareOutputs(const CLI::App& app, SimOptions* s, CoordinatorOptions* co) {
  co->export_path = co->export_path.empty()
                        ? s->run_dir + "/model.pt"
                        : std::filesystem::absolute(co->export_path).string();
  if (!co->tensorboard.empty())
    co->tensorboard = std::filesystem::absolute(co->tensorboard).string();
  if (co->export_best && app.count("--export") == 0) {
    return absl::InvalidArgumentError("--export-best needs --export PATH");
  }
  if (!s->python_client.empty()) {
    if (absl::Status st = PreparePythonClients(s, *co); !st.ok()) return st;
  }
  auto files = fedlgc::core::ExportFiles::For(co->export_path);
  if (!files.ok()) return files.status();
  return fedlgc::core::PrepareExport(*files);
}

// What a client would refuse, refused before anything starts; without --train-limit a
// data file is read whole.
absl::Status CheckClientOptions(const CLI::App& app, SimOptions* s) {
  fedlgc::core::DataOptions d;
  d.spec = s->edge.data;
  d.label_column = s->edge.label_column;
  d.targets = s->edge.targets;
  d.inputs = s->edge.inputs;
  if (auto st = d.Validate(); !st.ok()) {
    return absl::InvalidArgumentError(StrCat("--data: ", st.message()));
  }
  if (d.IsFile() && app.count("--train-limit") == 0) s->edge.train_limit = 0;
  if (s->edge.data.find("{i}") != std::string::npos && s->test_data.empty()) {
    return absl::InvalidArgumentError(
        "--data names a file per client ({i}): give the coordinator's --test-data");
  }
  if (d.IsFile() && s->test_data.empty()) {
    fedlgc::log::Warning("fedlgc-sim",
                         "no --test-data: the coordinator evaluates on %s's test split, which for "
                         "a csv file, an image folder or an npz without x_test and y_test is the "
                         "training data itself (the accuracy printed is then training accuracy)",
                         s->edge.data);
  }
  if (auto p = fedlgc::core::PartitionSpec::Parse(s->edge.partition); !p.ok()) {
    return absl::InvalidArgumentError(StrCat("--partition: ", p.status().message()));
  }
  if (auto opt = fedlgc::core::OptimizerSpec::Parse(s->edge.optimizer); !opt.ok()) {
    return opt.status();
  }
  return absl::OkStatus();
}

// The job's mode, with what its options and an aggregator (--aggregators) would refuse.
absl::StatusOr<const fedlgc::coordinator::ModeTraits*> CheckJob(
    const SimOptions& s, const CoordinatorOptions& co, const fedlgc::modes::ModeOptions& mo) {
  auto mode = fedlgc::modes::JobMode(co);
  if (!mode.ok()) return mode.status();
  if (auto st = mo.Validate((*mode)->mode); !st.ok()) return st;
  if (s.clients_have_model && !co.model_options().IsFile()) {
    return absl::InvalidArgumentError(StrCat("--clients-have-model: the job trains the built-in ",
                                             co.model, ", which has no file to give"));
  }
  if (auto st = fedlgc::modes::CheckEvaluation(co, mo); !st.ok()) return st;
  if (s.aggregators > 0 && co.EvalOnClients() && co.eval_every > 0) {
    return absl::InvalidArgumentError(
        "--aggregators with evaluation on the clients (--eval clients or both, or auto with "
        "--test-data none or --local-params): the root's clients are the aggregators, which "
        "do not pass evaluation down the tree; use --eval server");
  }
  if (s.aggregators > 0) {
    CoordinatorOptions probe = co;
    probe.parent = "127.0.0.1:1";
    probe.parent_id = "agg-0";
    probe.insecure = true;
    if (auto st = probe.ValidateParent(**mode); !st.ok()) return st;
  }
  return mode;
}

// The simulator's own limits, then what a client would refuse.
absl::Status CheckSimOptions(const CLI::App& app, SimOptions* s) {
  if (s->clients == 0) return absl::InvalidArgumentError("--clients must be >= 1");
  if (s->train_slots < 1 || s->train_slots > 256) {
    return absl::InvalidArgumentError("--train-slots must be 1 to 256");
  }
  if (s->byzantine > s->clients)
    return absl::InvalidArgumentError("--byzantine must be <= --clients");
  if (s->aggregators > s->clients) {
    return absl::InvalidArgumentError("--aggregators must be <= --clients");
  }
  return CheckClientOptions(app, s);
}

// --check: the run's options, the clients' data split as client 0 reads it, the files and
// programs the run needs, and the coordinator's job (Coordinator::Check, without the
// certificates and ports the run makes).
int CheckRun(const CLI::App& app, SimOptions s, CoordinatorOptions co,
             const fedlgc::modes::ModeOptions& mo) {
  fedlgc::core::Preflight p("fedlgc-sim");
  const bool valid = p.Report("run options", CheckSimOptions(app, &s),
                              StrCat(s.clients, " clients, ", s.PerProcess(), " a process"));
  if (app.count("--min-clients") == 0) co.min_clients = s.clients;
  if (app.count("--init-seed") == 0) co.init_seed = co.seed;
  auto mode = CheckJob(s, co, mo);
  p.Report("job", mode.status(),
           mode.ok() ? std::string(fedlgc::ModeName((*mode)->mode)) : std::string());
  auto link = fedlgc::sim::LinkProfile::Parse(s.link);
  p.Report("link", link.status(), s.link.empty() ? "direct (no fault proxy)" : s.link);
  fedlgc::sim::CheckRunFiles(s.run_dir, s.bin_dir, {"fedlgc-coordinator", "fedlgc-edge"},
                             s.certs_script, s.insecure, &p);
  for (const auto& [flag, path] :
       {std::pair<std::string, std::string>{"report", s.report}, {"html", s.html}}) {
    if (!path.empty()) p.Report(flag, fedlgc::core::CheckWritableFile(path));
  }
  if (!s.python_client.empty()) {
    p.Report("python client", CheckPythonClients(s));
  }
  if (!valid) {
    p.Skip("client data", "needs valid options");
  } else {
    // Client 0's options, as Launch makes them (its data, split and shard).
    fedlgc::edge_client::EdgeClientOptions eo = ClientOptions(s, "", 0, 1, co.seed);
    fedlgc::edge_client::DataCache cache;
    auto data = cache.Get(eo);
    std::string text;
    absl::Status fits = data.status();
    if (data.ok()) {
      size_t smallest = SIZE_MAX;
      for (const auto& shard : (*data)->shards) smallest = std::min(smallest, shard.size());
      text = StrCat(eo.data, ": ", (*data)->data.size(), " examples in ", (*data)->shards.size(),
                    " shards (", eo.partition, "), the smallest ", smallest);
      if (smallest == 0) fits = absl::FailedPreconditionError(StrCat(text, ": a shard is empty"));
      auto model = fedlgc::core::Model::Create(co.model_options(), co.init_seed);
      if (fits.ok() && model.ok()) fits = (*model)->CheckFits((*data)->data);
    }
    p.Report("client data", fits, text);
  }
  if (mode.ok()) {
    // The run makes the coordinator's certificates and picks its port.
    const std::string run_dir = s.run_dir.empty() ? "/tmp/fedlgc-sim-XXXXXX" : s.run_dir;
    co.state_dir = run_dir + "/coordinator";
    if (co.export_path.empty()) co.export_path = run_dir + "/model.pt";
    co.insecure = true;
    fedlgc::coordinator::CheckCoordinator(
        co, **mode, fedlgc::modes::RoundDrivers((*mode)->mode, mo), &p, /*endpoints=*/false);
  }
  return p.Finish();
}

}  // namespace

int main(int argc, char** argv) {
  SimOptions s;
  CoordinatorOptions co;  // the job's defaults are the coordinator's own
  fedlgc::modes::ModeOptions mo;
  bool check = false;
  CLI::App app("Runs a coordinator and N edge clients as processes on 127.0.0.1 over mTLS.",
               "fedlgc-sim");
  fedlgc::AddCommonFlags(app);
  fedlgc::AddCheckFlag(app, &check);
  AddSimFlags(app, &s);
  fedlgc::sim::AddJobFlags(app, &co, &mo);
  if (auto code = fedlgc::ParseFlags(app, argc, argv)) return *code;
  fedlgc::InitProcess();
  // Follow sees the signal and stops the federation.
  const fedlgc::StopOnSignals signals([] {});
  if (check) return CheckRun(app, s, co, mo);
  if (absl::Status st = CheckSimOptions(app, &s); !st.ok()) return Fail(std::string(st.message()));
  if (app.count("--min-clients") == 0) co.min_clients = s.clients;
  if (app.count("--init-seed") == 0) co.init_seed = co.seed;
  auto job_mode = CheckJob(s, co, mo);
  if (!job_mode.ok()) return Fail(std::string(job_mode.status().message()));
  const fedlgc::coordinator::ModeTraits& mode = **job_mode;
  auto link = fedlgc::sim::LinkProfile::Parse(s.link);
  if (!link.ok()) return Fail(link.status().ToString());
  const bool temporary_run_dir = s.run_dir.empty();
  if (absl::Status st = fedlgc::sim::PrepareRunDir("fedlgc-sim", &s.run_dir); !st.ok())
    return Fail(std::string(st.message()));
  if (absl::Status st = PrepareOutputs(app, &s, &co); !st.ok()) {
    return Fail(std::string(st.message()));
  }
  if (!s.quiet) PrintHeader(s, co, mode, mo);
  auto f = Launch(s, co, mo, *link);
  if (!f.ok()) return Fail(std::string(f.status().message()));
  FollowResult run = Follow(*f, s, mode.report_key, signals);
  if (!run.error.empty()) {
    Fail(run.error);
    return signals.signal() != 0 ? 128 + signals.signal() : 1;
  }
  if (run.code != 0) {
    return Fail(StrCat("the coordinator failed (exit ", run.code, "):\n",
                       LogTail(s.run_dir + "/coordinator.log", 5), "(", s.run_dir,
                       "/coordinator.log)"));
  }
  json report = Report(run.rows, *f, s, co, mo);
  report["export"] = ReportExport(co);
  if (!co.tensorboard.empty()) {
    std::printf("tensorboard: %s (watch it: tensorboard --logdir %s)\n", co.tensorboard.c_str(),
                co.tensorboard.c_str());
    report["tensorboard"] = co.tensorboard;
  }
  int code = 0;
  if (mode.end_of_run_check != nullptr) {
    const fedlgc::core::ModelOptions model = co.model_options();
    auto check = mode.end_of_run_check({s.run_dir, s.clients, co.rounds, &model, co.init_seed});
    if (check.ok()) {
      json j(check->figures);
      j[check->verdict] = check->passed;
      report[check->name] = j;
    } else {
      fedlgc::log::Error("fedlgc-sim", "%s", check.status().ToString().c_str());
    }
    if (!check.ok() || !check->passed) code = 1;
  }
  if (absl::Status st = WriteReports(report, s); !st.ok()) return Fail(st.ToString());
  if (code == 0 && temporary_run_dir) {
    // Without --run-dir: what the run made for the user stays, the rest goes.
    std::vector<std::string> keep = {s.report, s.html, co.tensorboard, s.run_dir + "/report.json"};
    if (auto files = fedlgc::core::ExportFiles::For(co.export_path); files.ok()) {
      keep.insert(keep.end(), {files->pt, files->npz, files->json});
    }
    const std::vector<std::string> kept = fedlgc::sim::RemoveWorkingFiles(s.run_dir, keep);
    std::string names;
    for (const std::string& k : kept) fedlgc::StrAppend(&names, names.empty() ? "" : ", ", k);
    std::printf("run folder: %s, working files removed (kept: %s; --run-dir keeps all)\n",
                s.run_dir.c_str(), names.empty() ? "nothing" : names.c_str());
  }
  return code;
}
