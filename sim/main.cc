// fedlgc-sim: a whole federation on this machine. Makes certificates, starts a
// coordinator and N edge clients as separate processes talking mTLS over 127.0.0.1
// (optionally through a fault proxy per client), runs the rounds, prints a table per
// round and writes a JSON report.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "codecs/str.h"
#include "coordinator/sgp_driver.h"
#include "core/atomic_file.h"
#include "core/fault_proxy.h"
#include "core/flags.h"
#include "core/model.h"
#include "core/process.h"
#include "edge_client/client_state.h"

namespace {

using fedlgc::StrCat;

struct Row {
  long round = 0;
  double accuracy = -1, loss = -1, seconds = 0;
  double uplink = 0, raw = 0, downlink = 0;
  long participants = 0;
  long lgc_stage = 0;     // LGC jobs: 1 warm-up, 2 autoencoder training, 3 compressed
  double ae_seconds = 0;  // LGC: the round's autoencoder training time
  double ae_reconstruction = -1, values_cosine = -2;  // LGC stage 2 (see rounds.jsonl)
  double rebuild_mismatches = 0;                      // LGC predict=1, stage 3
  std::string lsgd_leader;
  double consensus = -1;  // SGP
};

// Reads the numbers of one rounds.jsonl line (flat JSON written by the coordinator).
double Field(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\": ";
  const size_t p = line.find(k);
  return p == std::string::npos ? 0 : std::strtod(line.c_str() + p + k.size(), nullptr);
}

std::string StrField(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\": \"";
  const size_t p = line.find(k);
  if (p == std::string::npos) return "";
  const size_t e = line.find('"', p + k.size());
  return line.substr(p + k.size(), e == std::string::npos ? std::string::npos : e - p - k.size());
}

// SGP: push-sum conserves mass. Sums x and w over the clients' state files and the
// coordinator's mailboxes, and compares with what the clients brought in (the initial
// model each, plus every local training step). Prints the check; false when it fails.
bool CheckSgpMass(const std::string& state_dir, uint32_t clients, uint32_t rounds,
                  const std::string& model, uint64_t seed, std::ostringstream* json) {
  auto x0 = fedlgc::core::Model::Create(model, seed);
  if (!x0.ok()) return false;
  const std::vector<float> initial = (*x0)->GetFlat();
  const size_t d = initial.size();
  auto relay =
      fedlgc::coordinator::SgpDriver::Create(true, 0, d, state_dir + "/coordinator", rounds);
  if (!relay.ok()) {
    std::fprintf(stderr, "fedlgc-sim: %s\n", relay.status().ToString().c_str());
    return false;
  }
  auto [x, w] = (*relay)->MailTotals();
  std::vector<double> brought(d, 0.0);
  for (uint32_t i = 0; i < clients; ++i) {
    auto st =
        fedlgc::edge_client::LoadClientState(StrCat(state_dir, "/clients/client-", i, ".state"));
    if (!st.ok() || st->local.x.size() != d || st->local.contributed.size() != d) {
      std::fprintf(stderr, "fedlgc-sim: client-%u has no SGP state\n", i);
      return false;
    }
    for (size_t k = 0; k < d; ++k) {
      x[k] += st->local.x[k];
      brought[k] += st->local.contributed[k];
    }
    w += st->local.w;
    if (st->pending && st->pending->gossip && st->local.share.size() == d) {  // in flight
      for (size_t k = 0; k < d; ++k) x[k] += st->local.share[k];
      w += st->local.share_pw;
    }
  }
  double worst = 0, start_norm = 0, steps_norm = 0, sum_norm = 0;
  for (size_t k = 0; k < d; ++k) {
    const double start = clients * double(initial[k]);
    worst = std::max(worst, std::fabs(x[k] - brought[k]));
    start_norm += start * start;
    steps_norm += (brought[k] - start) * (brought[k] - start);
    sum_norm += x[k] * x[k];
  }
  start_norm = std::sqrt(start_norm);
  steps_norm = std::sqrt(steps_norm);
  sum_norm = std::sqrt(sum_norm);
  const bool ok = worst < 1e-3 && std::fabs(w - clients) < 1e-9;
  std::printf(
      "SGP mass: |sum x| %.4f = |start + applied steps| (|start| %.4f, |steps| %.4f): largest "
      "coordinate gap %.3g; sum w %.12g for %u clients: %s\n",
      sum_norm, start_norm, steps_norm, worst, w, clients, ok ? "conserved" : "NOT CONSERVED");
  *json << ", \"sgp_mass\": {\"sum_x_norm\": " << sum_norm << ", \"start_norm\": " << start_norm
        << ", \"steps_norm\": " << steps_norm << ", \"max_gap\": " << worst << ", \"sum_w\": " << w
        << ", \"conserved\": " << (ok ? "true" : "false") << "}";
  return ok;
}

// The clients' encode and local training seconds per round (<id>.rounds.jsonl, written by
// each edge client): per round the largest encode / train ratio over the clients, and the
// total encode over the total training time; in LGC jobs with echo=1, the relative error
// of the coordinator's reconstruction of each leader and follower update.
struct EncodeShare {
  std::map<long, double> worst;  // round -> max over clients of encode / train
  double total_encode = 0, total_train = 0;
  std::vector<double> leader_error, follower_error;
};

double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

EncodeShare ReadEncodeShare(const std::string& dir, uint32_t clients) {
  EncodeShare e;
  for (uint32_t i = 0; i < clients; ++i) {
    auto f = fedlgc::core::ReadFileIfExists(StrCat(dir, "/client-", i, ".rounds.jsonl"));
    if (!f.ok() || !f->has_value()) continue;
    std::istringstream in(**f);
    std::string line;
    while (std::getline(in, line)) {
      const long round = static_cast<long>(Field(line, "round"));
      if (line.find("lgc_relative_error") != std::string::npos) {
        (Field(line, "lgc_leader") > 0 ? e.leader_error : e.follower_error)
            .push_back(Field(line, "lgc_relative_error"));
        continue;
      }
      const double train = Field(line, "train_seconds"), enc = Field(line, "encode_seconds");
      e.total_encode += enc;
      e.total_train += train;
      if (train > 0) e.worst[round] = std::max(e.worst[round], enc / train);
    }
  }
  return e;
}

std::string SelfDir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "fedlgc-sim: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t clients = 4, rounds = 12, local_epochs = 1, local_steps = 0, batch = 32,
           chunk_bytes = 256 * 1024;
  uint64_t seed = 1, train_limit = 20000, eval_limit = 0;
  float lr = 0.05f, server_lr = 1.0f;
  double round_timeout = 600;
  std::string mode = "fedavg", codec = "qsgd(bits=8)", codec_warmup, partition = "iid", link,
              report, model = "cnn";
  std::string data = "fashion-mnist", data_dir = "/usr/share/datasets/fashion-mnist";
  std::string state_dir, bin_dir = SelfDir();
  std::string certs_script = std::string(FEDLGC_SOURCE_DIR) + "/scripts/gen-certs.sh";
  int torch_threads = 1;
  bool insecure = false, quiet = false;
  fedlgc::core::Flags flags(
      "fedlgc-sim", "Runs a coordinator and N edge clients as processes on 127.0.0.1 over mTLS.");
  flags.Add("clients", &clients, "edge clients");
  flags.Add("rounds", &rounds, "rounds");
  flags.Add("mode", &mode, "aggregation mode: fedavg, lsgd or sgp");
  std::string lsgd_groups;
  double lsgd_pull = 0.1, lsgd_global_pull = 0.1;
  uint32_t lsgd_period = 64, lsgd_global_period = 128, lsgd_group_size = 0;
  bool sgp_reference = true;
  flags.Add("lsgd-pull", &lsgd_pull, "LSGD: pull towards the group leader");
  flags.Add("lsgd-global-pull", &lsgd_global_pull, "LSGD: pull towards the global leader");
  flags.Add("lsgd-period", &lsgd_period, "LSGD: local steps between group pulls");
  flags.Add("lsgd-global-period", &lsgd_global_period, "LSGD: local steps between global pulls");
  flags.Add("lsgd-groups", &lsgd_groups, "LSGD: groups, e.g. 'client-0,client-1;client-2'");
  flags.Add("lsgd-group-size", &lsgd_group_size, "LSGD: groups of this size by latency");
  flags.Add("sgp-reference", &sgp_reference, "SGP: code shares relative to the network mean");
  uint32_t sgp_overlap = 0;
  flags.Add("sgp-overlap", &sgp_overlap, "SGP: 1 trains the next period while a share travels");
  flags.Add("codec", &codec, "codec spec for updates");
  flags.Add("codec-warmup", &codec_warmup,
            "';'-separated codec specs for rounds 1, 2, ... before --codec takes over");
  flags.Add("partition", &partition, "iid, dirichlet(ALPHA) or labels(K)");
  flags.Add("local-epochs", &local_epochs, "local epochs per round");
  flags.Add("local-steps", &local_steps, "local steps per round (overrides epochs when > 0)");
  flags.Add("lr", &lr, "client learning rate");
  flags.Add("server-lr", &server_lr, "server learning rate");
  flags.Add("batch", &batch, "client batch size");
  flags.Add("chunk-bytes", &chunk_bytes, "largest update chunk");
  flags.Add("seed", &seed, "seed of the run (model init, partition, rounds)");
  flags.Add("link", &link, "fault proxy per client, e.g. delay=50ms,rate=10mbit,cut=0.05");
  flags.Add("report", &report, "write a JSON report here");
  flags.Add("model", &model, "cnn or mlp");
  flags.Add("data", &data, "fashion-mnist or synthetic:N");
  flags.Add("data-dir", &data_dir, "Fashion-MNIST folder");
  flags.Add("train-limit", &train_limit, "training examples split among clients (0 = all 60000)");
  flags.Add("eval-limit", &eval_limit, "test examples for evaluation (0 = all)");
  flags.Add("round-timeout", &round_timeout, "round deadline in seconds");
  flags.Add("state-dir", &state_dir, "run folder (default: a new folder under /tmp)");
  flags.Add("bin-dir", &bin_dir, "where fedlgc-coordinator and fedlgc-edge are");
  flags.Add("certs-script", &certs_script, "scripts/gen-certs.sh");
  flags.Add("torch-threads", &torch_threads, "libtorch threads per process");
  flags.Add("insecure", &insecure, "plaintext instead of mTLS");
  flags.Add("quiet", &quiet, "print only the summary");
  if (auto st = flags.Parse(argc, argv); !st.ok()) return Fail(std::string(st.message()));
  if (flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (clients == 0 || rounds == 0) return Fail("--clients and --rounds must be >= 1");
  auto link_spec = fedlgc::core::LinkSpec::Parse(link);
  if (!link_spec.ok()) return Fail(link_spec.status().ToString());

  if (state_dir.empty()) {
    char tmpl[] = "/tmp/fedlgc-sim-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return Fail("cannot make a run folder");
    state_dir = tmpl;
  }
  std::filesystem::create_directories(state_dir);
  const std::string certs = state_dir + "/certs";
  std::string cmd = certs_script + " " + certs;
  for (uint32_t i = 0; i < clients; ++i) cmd += StrCat(" client-", i);
  cmd += " >/dev/null";
  if (!insecure && std::system(cmd.c_str()) != 0)
    return Fail("certificate generation failed: " + cmd);

  const std::string port_file = state_dir + "/coordinator.port";
  std::vector<std::string> cargs = {
      bin_dir + "/fedlgc-coordinator", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
      "--port-file=" + port_file, "--state-dir=" + state_dir + "/coordinator", "--model=" + model,
      StrCat("--rounds=", rounds), StrCat("--min-clients=", clients), "--codec=" + codec,
      "--codec-warmup=" + codec_warmup, StrCat("--local-epochs=", local_epochs),
      StrCat("--local-steps=", local_steps), StrCat("--lr=", lr), StrCat("--server-lr=", server_lr),
      StrCat("--batch=", batch), StrCat("--chunk-bytes=", chunk_bytes),
      StrCat("--round-timeout=", round_timeout), StrCat("--eval-limit=", eval_limit),
      "--test-data=" + data, "--data-dir=" + data_dir, StrCat("--seed=", seed),
      StrCat("--init-seed=", seed), StrCat("--torch-threads=", torch_threads), "--mode=" + mode,
      StrCat("--lsgd-pull=", lsgd_pull), StrCat("--lsgd-global-pull=", lsgd_global_pull),
      StrCat("--lsgd-period=", lsgd_period), StrCat("--lsgd-global-period=", lsgd_global_period),
      "--lsgd-groups=" + lsgd_groups, StrCat("--lsgd-group-size=", lsgd_group_size),
      StrCat("--sgp-reference=", sgp_reference ? "true" : "false"),
      StrCat("--sgp-overlap=", sgp_overlap),
      // Clients that reconnect late still read their last receipts.
      "--linger=2"};
  if (insecure) {
    cargs.push_back("--insecure");
  } else {
    cargs.push_back("--tls-ca=" + certs + "/ca.pem");
    cargs.push_back("--tls-cert=" + certs + "/server.pem");
    cargs.push_back("--tls-key=" + certs + "/server.key");
  }
  const auto start = std::chrono::steady_clock::now();
  fedlgc::core::ChildProcess coordinator(cargs, state_dir + "/coordinator.log");
  int port = 0;
  for (int i = 0; i < 600 && port == 0; ++i) {
    auto f = fedlgc::core::ReadFileIfExists(port_file);
    if (f.ok() && f->has_value()) port = std::atoi((*f)->c_str());
    if (port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (coordinator.Wait(std::chrono::milliseconds(0)) >= 0) {
      return Fail("the coordinator exited at startup; see " + state_dir + "/coordinator.log");
    }
  }
  if (port == 0)
    return Fail("the coordinator did not start; see " + state_dir + "/coordinator.log");

  std::vector<std::unique_ptr<fedlgc::core::FaultProxy>> proxies;
  std::vector<std::unique_ptr<fedlgc::core::ChildProcess>> edges;
  for (uint32_t i = 0; i < clients; ++i) {
    int target = port;
    if (!link_spec->trivial()) {
      auto p = fedlgc::core::FaultProxy::Start("127.0.0.1", port, *link_spec, seed * 1000 + i);
      if (!p.ok()) return Fail(p.status().ToString());
      target = (*p)->port();
      proxies.push_back(std::move(p).value());
    }
    const std::string id = StrCat("client-", i);
    std::vector<std::string> eargs = {bin_dir + "/fedlgc-edge",
                                      StrCat("--server=127.0.0.1:", target),
                                      "--id=" + id,
                                      "--state-dir=" + state_dir + "/clients",
                                      "--data=" + data,
                                      "--data-dir=" + data_dir,
                                      StrCat("--train-limit=", train_limit),
                                      StrCat("--shard=", i),
                                      StrCat("--num-shards=", clients),
                                      "--partition=" + partition,
                                      StrCat("--partition-seed=", seed),
                                      StrCat("--torch-threads=", torch_threads)};
    if (insecure) {
      eargs.push_back("--insecure");
    } else {
      eargs.push_back("--tls-ca=" + certs + "/ca.pem");
      eargs.push_back("--tls-cert=" + certs + "/" + id + ".pem");
      eargs.push_back("--tls-key=" + certs + "/" + id + ".key");
    }
    edges.push_back(
        std::make_unique<fedlgc::core::ChildProcess>(eargs, state_dir + "/" + id + ".log"));
  }
  if (!quiet) {
    std::printf("fedlgc-sim: %s, %u clients, %u rounds, codec %s, %s, link %s, run folder %s\n",
                mode.c_str(), clients, rounds, codec.c_str(), partition.c_str(),
                link.empty() ? "direct" : link.c_str(), state_dir.c_str());
    std::printf("%5s %9s %8s %13s %13s %7s %13s %8s %5s %s\n", "round", "accuracy", "loss",
                "uplink B", "fp32 B", "ratio", "downlink B", "seconds", "parts",
                mode == "lsgd"  ? "leader"
                : mode == "sgp" ? "consensus"
                                : "");
  }
  // Follow rounds.jsonl while the coordinator runs.
  const std::string rounds_path = state_dir + "/coordinator/rounds.jsonl";
  std::vector<Row> rows;
  int code = -1;
  for (;;) {
    code = coordinator.Wait(std::chrono::milliseconds(200));
    auto f = fedlgc::core::ReadFileIfExists(rounds_path);
    if (f.ok() && f->has_value()) {
      std::istringstream in(**f);
      std::string line;
      size_t i = 0;
      while (std::getline(in, line)) {
        if (i++ < rows.size()) continue;
        Row r;
        r.round = static_cast<long>(Field(line, "round"));
        r.accuracy = Field(line, "accuracy");
        r.loss = Field(line, "loss");
        r.uplink = Field(line, "uplink_bytes");
        r.raw = Field(line, "raw_uplink_bytes");
        r.downlink = Field(line, "downlink_bytes");
        r.seconds = Field(line, "seconds");
        r.participants = static_cast<long>(Field(line, "participants"));
        r.lgc_stage = static_cast<long>(Field(line, "lgc_stage"));
        r.ae_seconds = Field(line, "ae_seconds");
        r.ae_reconstruction = Field(line, "ae_reconstruction");
        r.values_cosine = Field(line, "lgc_values_cosine");
        r.rebuild_mismatches = Field(line, "lgc_rebuild_mismatches");
        r.lsgd_leader = StrField(line, "lsgd_leader");
        r.consensus = Field(line, "sgp_consensus_distance");
        rows.push_back(r);
        if (!quiet) {
          const std::string extra = mode == "lsgd"  ? r.lsgd_leader
                                    : mode == "sgp" ? StrCat(r.consensus)
                                                    : std::string();
          std::printf("%5ld %9.4f %8.4f %13.0f %13.0f %7.1f %13.0f %8.1f %5ld %s\n", r.round,
                      r.accuracy, r.loss, r.uplink, r.raw, r.uplink > 0 ? r.raw / r.uplink : 0.0,
                      r.downlink, r.seconds, r.participants, extra.c_str());
          std::fflush(stdout);
        }
      }
    }
    if (code >= 0) break;
  }
  for (auto& e : edges) {
    if (e->Wait(std::chrono::seconds(20)) < 0) e->Kill(SIGKILL);
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (code != 0)
    return Fail(
        StrCat("the coordinator failed (exit ", code, "); see ", state_dir, "/coordinator.log"));
  double up = 0, raw = 0, down = 0;
  for (const Row& r : rows) {
    up += r.uplink;
    raw += r.raw;
    down += r.downlink;
  }
  const double final_acc = rows.empty() ? -1 : rows.back().accuracy;
  const EncodeShare share = ReadEncodeShare(state_dir + "/clients", clients);
  std::vector<double> worst;
  for (const auto& [round, w] : share.worst) worst.push_back(w);
  const double worst_median = Median(worst);
  const double total_share = share.total_train > 0 ? share.total_encode / share.total_train : -1;
  uint64_t cuts = 0;
  for (auto& p : proxies) cuts += p->cuts();
  std::printf(
      "final accuracy %.4f | uplink %.0f B for %.0f fp32 B (%.1fx) | downlink %.0f B | %.1f s | "
      "%llu link cuts | encode %.2f%% of local training (worst client, median round %.2f%%)\n",
      final_acc, up, raw, up > 0 ? raw / up : 0.0, down, wall,
      static_cast<unsigned long long>(cuts), 100 * total_share, 100 * worst_median);
  const double leader_error = Median(share.leader_error);
  const double follower_error = Median(share.follower_error);
  if (leader_error >= 0 || follower_error >= 0) {
    std::printf(
        "LGC reconstruction error |v - decoded| / |v|, median: leader %.3f (%zu updates), "
        "followers %.3f (%zu updates)\n",
        leader_error, share.leader_error.size(), follower_error, share.follower_error.size());
  }
  if (mode == "sgp" && report.empty()) {
    std::ostringstream ignored;
    if (!CheckSgpMass(state_dir, clients, rounds, model, seed, &ignored)) return 1;
  }
  if (!report.empty()) {
    std::ostringstream j;
    j << "{\"config\": {\"clients\": " << clients << ", \"rounds\": " << rounds << ", \"mode\": \""
      << mode << "\", \"codec\": \"" << codec << "\", \"codec_warmup\": \"" << codec_warmup
      << "\", \"partition\": \"" << partition << "\", \"local_epochs\": " << local_epochs
      << ", \"seed\": " << seed << ", \"link\": \"" << link << "\", \"model\": \"" << model
      << "\", \"train_limit\": " << train_limit << "},\n \"rounds\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      j << (i ? ",\n  " : "\n  ") << "{\"round\": " << r.round << ", \"accuracy\": " << r.accuracy
        << ", \"loss\": " << r.loss << ", \"uplink_bytes\": " << static_cast<uint64_t>(r.uplink)
        << ", \"raw_uplink_bytes\": " << static_cast<uint64_t>(r.raw)
        << ", \"downlink_bytes\": " << static_cast<uint64_t>(r.downlink)
        << ", \"seconds\": " << r.seconds << ", \"participants\": " << r.participants
        << ", \"lgc_stage\": " << r.lgc_stage << ", \"ae_seconds\": " << r.ae_seconds
        << ", \"ae_reconstruction\": " << r.ae_reconstruction
        << ", \"lgc_values_cosine\": " << r.values_cosine
        << ", \"lgc_rebuild_mismatches\": " << r.rebuild_mismatches << ", \"lsgd_leader\": \""
        << r.lsgd_leader << "\", \"sgp_consensus_distance\": " << r.consensus << "}";
    }
    j << "],\n \"summary\": {\"final_accuracy\": " << final_acc
      << ", \"uplink_bytes\": " << static_cast<uint64_t>(up)
      << ", \"raw_uplink_bytes\": " << static_cast<uint64_t>(raw)
      << ", \"downlink_bytes\": " << static_cast<uint64_t>(down)
      << ", \"compression_ratio\": " << (up > 0 ? raw / up : 0) << ", \"wall_seconds\": " << wall
      << ", \"link_cuts\": " << cuts << ", \"encode_share_of_training\": " << total_share
      << ", \"encode_share_worst_client_median\": " << worst_median
      << ", \"lgc_leader_error_median\": " << leader_error
      << ", \"lgc_follower_error_median\": " << follower_error << "}";
    if (mode == "sgp" && !CheckSgpMass(state_dir, clients, rounds, model, seed, &j)) code = 1;
    j << "}\n";
    if (auto st = fedlgc::core::AtomicWriteFile(report, j.str()); !st.ok())
      return Fail(st.ToString());
    std::printf("report: %s\n", report.c_str());
  }
  return code;
}
