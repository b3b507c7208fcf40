// fedlgc-edge: an edge client of a fedlgc federation.
#include <csignal>
#include <cstdio>

#include "core/flags.h"
#include "edge_client/edge_client.h"

namespace {
fedlgc::edge_client::EdgeClient* g_client = nullptr;
void OnSignal(int) {
  if (g_client) g_client->Stop();
}
}  // namespace

int main(int argc, char** argv) {
  fedlgc::edge_client::EdgeClientOptions o;
  fedlgc::core::Flags flags(
      "fedlgc-edge", "Trains locally and streams compressed updates to a fedlgc coordinator.");
  flags.Add("server", &o.server, "coordinator address host:port");
  flags.Add("id", &o.client_id, "client id (the CN of its certificate under mTLS)");
  flags.Add("state-dir", &o.state_dir, "where the residual and the update in flight are kept");
  flags.Add("tls-ca", &o.tls_ca, "CA certificate of the coordinator");
  flags.Add("tls-cert", &o.tls_cert, "this client's certificate");
  flags.Add("tls-key", &o.tls_key, "this client's key");
  flags.Add("tls-server-name", &o.tls_server_name,
            "name to verify in the coordinator's certificate");
  flags.Add("insecure", &o.insecure, "plaintext: local experiments only");
  flags.Add("data", &o.data, "fashion-mnist or synthetic:N");
  flags.Add("data-dir", &o.data_dir, "Fashion-MNIST folder");
  flags.Add("train-limit", &o.train_limit, "use the first N training examples (0 = all)");
  flags.Add("shard", &o.shard, "this client's shard index");
  flags.Add("num-shards", &o.num_shards, "number of shards the training set is split into");
  flags.Add("partition", &o.partition, "iid, dirichlet(ALPHA) or labels(K)");
  flags.Add("partition-seed", &o.partition_seed, "seed of the split (same on every client)");
  flags.Add("torch-threads", &o.torch_threads, "libtorch threads");
  flags.Add("device", &o.device, "cpu, cuda, cuda:N or auto (CUDA when libtorch and a GPU allow)");
  flags.Add("metrics-listen", &o.metrics_listen, "Prometheus exposer address; empty disables it");
  flags.Add("max-message-bytes", &o.max_message_bytes, "gRPC message size limit");
  flags.Add("backoff-max", &o.backoff_max_s, "longest reconnect backoff in seconds");
  flags.Add("exit-after-rounds", &o.exit_after_rounds,
            "exit after uploading this many rounds (0: run to the end)");
  if (auto st = flags.Parse(argc, argv); !st.ok()) {
    std::fprintf(stderr, "fedlgc-edge: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  auto c = fedlgc::edge_client::EdgeClient::Create(o);
  if (!c.ok()) {
    std::fprintf(stderr, "fedlgc-edge %s: %s\n", o.client_id.c_str(),
                 c.status().ToString().c_str());
    return 1;
  }
  g_client = c->get();
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  auto st = (*c)->Run();
  g_client = nullptr;
  if (!st.ok()) {
    std::fprintf(stderr, "fedlgc-edge %s: %s\n", o.client_id.c_str(), st.ToString().c_str());
    return 1;
  }
  return 0;
}
