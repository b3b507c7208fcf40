// fedlgc-coordinator: runs the rounds of one federated training job.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <thread>

#include "coordinator/coordinator.h"
#include "core/flags.h"

namespace {
fedlgc::coordinator::Coordinator* g_coordinator = nullptr;
void OnSignal(int) {
  if (g_coordinator) g_coordinator->Stop();
}
}  // namespace

int main(int argc, char** argv) {
  fedlgc::coordinator::CoordinatorOptions o;
  std::string port_file, warmup;
  fedlgc::core::Flags flags("fedlgc-coordinator",
                            "Coordinates federated training rounds over gRPC (mTLS).");
  flags.Add("listen", &o.listen, "gRPC address; port 0 picks a free one");
  flags.Add("metrics-listen", &o.metrics_listen, "Prometheus exposer address; empty disables it");
  flags.Add("port-file", &port_file, "write \"<grpc port> <metrics port>\" here once listening");
  flags.Add("state-dir", &o.state_dir, "checkpoints and rounds.jsonl; a restart resumes from here");
  flags.Add("model", &o.model, "cnn or mlp");
  flags.Add("rounds", &o.rounds, "rounds to run");
  flags.Add("min-clients", &o.min_clients, "connected clients needed to open a round");
  flags.Add("fraction", &o.fraction, "share of connected clients asked per round");
  flags.Add("round-timeout", &o.round_timeout_s, "seconds before a round closes with what arrived");
  flags.Add("codec", &o.plan.codec,
            "codec spec for updates, e.g. 'ef(topk(ratio=0.01,values=qsgd(bits=8)))'");
  flags.Add("codec-warmup", &warmup,
            "';'-separated codec specs for rounds 1, 2, ... before --codec takes over");
  flags.Add("local-epochs", &o.plan.local_epochs, "local epochs per round");
  flags.Add("local-steps", &o.plan.local_steps,
            "local steps per round (overrides epochs when > 0)");
  flags.Add("lr", &o.plan.lr, "client learning rate");
  flags.Add("batch", &o.plan.batch_size, "client batch size");
  flags.Add("chunk-bytes", &o.plan.max_chunk_bytes, "largest update chunk");
  flags.Add("mode", &o.mode, "aggregation: fedavg, lsgd (leader pull) or sgp (push-sum gossip)");
  flags.Add("lsgd-pull", &o.lsgd.pull, "LSGD: pull strength c towards the group leader");
  flags.Add("lsgd-global-pull", &o.lsgd.global_pull,
            "LSGD: pull strength towards the global leader");
  flags.Add("lsgd-period", &o.lsgd.period,
            "LSGD: local steps between group pulls (one round with groups)");
  flags.Add("lsgd-global-period", &o.lsgd.global_period,
            "LSGD: local steps between global pulls (one round with a single group)");
  std::string lsgd_groups;
  flags.Add("lsgd-groups", &lsgd_groups, "LSGD: groups of client ids, e.g. 'a,b;c,d'");
  flags.Add("lsgd-group-size", &o.lsgd.group_size,
            "LSGD: form groups of this size from measured round trips (0: one group)");
  flags.Add("sgp-reference", &o.sgp_reference,
            "SGP: code shares relative to the round's network mean (false: the whole share)");
  flags.Add("sgp-overlap", &o.sgp_overlap,
            "SGP: 1 lets a client train its next period while its share travels (gossip one "
            "round behind), 0 waits");
  flags.Add("server-lr", &o.server_lr, "server learning rate (1 = FedAvg)");
  flags.Add("server-momentum", &o.server_momentum, "server momentum");
  flags.Add("lgc-leader", &o.lgc_leader,
            "LGC jobs: the leader client (default: the best measured link)");
  flags.Add("ae-device", &o.ae_device, "LGC jobs: where the autoencoder trains (cpu, cuda, auto)");
  flags.Add("linger", &o.linger_s,
            "seconds to keep serving /metrics after the last round (for a last scrape)");
  flags.Add("ratio-target", &o.ratio_target,
            "compression ratio the job should reach; exported for alerting (0: none)");
  flags.Add("eval-every", &o.eval_every, "evaluate every N rounds (0 = never)");
  flags.Add("eval-limit", &o.eval_limit, "test examples used (0 = all)");
  flags.Add("test-data", &o.test_data, "fashion-mnist or synthetic:N");
  flags.Add("data-dir", &o.data_dir, "Fashion-MNIST folder");
  flags.Add("tls-ca", &o.tls_ca, "CA certificate that signs client certificates");
  flags.Add("tls-cert", &o.tls_cert, "server certificate");
  flags.Add("tls-key", &o.tls_key, "server key");
  flags.Add("insecure", &o.insecure, "plaintext, clients name themselves: local experiments only");
  flags.Add("max-message-bytes", &o.max_message_bytes, "gRPC message size limit");
  flags.Add("seed", &o.seed, "seed for participant sampling and client rounds");
  flags.Add("init-seed", &o.init_seed, "seed of the initial model");
  flags.Add("torch-threads", &o.torch_threads, "libtorch threads for evaluation");
  if (auto st = flags.Parse(argc, argv); !st.ok()) {
    std::fprintf(stderr, "fedlgc-coordinator: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  for (size_t begin = 0; begin < warmup.size();) {
    const size_t end = std::min(warmup.find(';', begin), warmup.size());
    if (end > begin) o.plan.warmup_codecs.push_back(warmup.substr(begin, end - begin));
    begin = end + 1;
  }
  auto groups = fedlgc::coordinator::ParseLsgdGroups(lsgd_groups);
  if (!groups.ok()) {
    std::fprintf(stderr, "fedlgc-coordinator: %s\n",
                 std::string(groups.status().message()).c_str());
    return 2;
  }
  o.lsgd.groups = std::move(groups).value();
  auto c = fedlgc::coordinator::Coordinator::Create(o);
  if (!c.ok()) {
    std::fprintf(stderr, "fedlgc-coordinator: %s\n", c.status().ToString().c_str());
    return 1;
  }
  if (auto st = (*c)->Start(); !st.ok()) {
    std::fprintf(stderr, "fedlgc-coordinator: %s\n", st.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "fedlgc-coordinator: listening on port %d, metrics on %d\n", (*c)->port(),
               (*c)->metrics_port());
  if (!port_file.empty()) {
    FILE* f = std::fopen((port_file + ".tmp").c_str(), "w");
    if (f == nullptr) return 1;
    std::fprintf(f, "%d %d\n", (*c)->port(), (*c)->metrics_port());
    std::fclose(f);
    std::rename((port_file + ".tmp").c_str(), port_file.c_str());
  }
  g_coordinator = c->get();
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  auto st = (*c)->Run();
  g_coordinator = nullptr;
  if (!st.ok()) {
    std::fprintf(stderr, "fedlgc-coordinator: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
