// Edge client flags (see flags.h).
#include "edge_client/flags.h"

#include <CLI/CLI.hpp>

#include "base/flags.h"
#include "base/str.h"
#include "edge_client/client_host.h"

namespace fedlgc::edge_client {

void AddEdgeClientFlags(CLI::App& app, EdgeClientOptions* o) {
  CLI::Option_group* link = app.add_option_group("Link", "the coordinator and this client");
  link->add_option("--server", o->server,
                   "coordinator address host:port, or several separated by commas: the client "
                   "fails over to the next whenever the one it uses is unreachable");
  link->add_option("--id", o->client_id, "client id (the CN of its certificate under mTLS)");
  link->add_option("--state-dir", o->state_dir,
                   "where the residual, the update in flight and the round log are kept");
  link->add_option("--tls-ca", o->tls_ca, "CA certificate of the coordinator");
  link->add_option("--tls-cert", o->tls_cert, "this client's certificate");
  link->add_option("--tls-key", o->tls_key, "this client's key");
  link->add_option("--tls-server-name", o->tls_server_name,
                   "name to verify in the coordinator's certificate");
  fedlgc::AddBoolFlag(*link, "--insecure", &o->insecure, "plaintext: local experiments only");
  link->add_option("--max-message-bytes", o->max_message_bytes, "gRPC message size limit");
  link->add_option("--backoff-max", o->backoff_max_s, "longest reconnect backoff in seconds");
  link->add_option("--call-timeout", o->call_timeout_s, "seconds per upload or download attempt");
  link->add_option("--metrics-listen", o->metrics_listen,
                   "Prometheus exposer address; empty disables it");
  link->add_option("--exit-after-rounds", o->exit_after_rounds,
                   "exit after uploading this many rounds (0: run to the end)");
  link->add_option("--linger", o->linger_s,
                   "seconds to keep serving /metrics after the job is done (for a last scrape)");
  link->add_option("--attack", o->attack,
                   "robustness experiments only: lie about the update: none, scale(factor=100), "
                   "signflip(factor=1) or noise(std=1)");
  CLI::Option_group* data = app.add_option_group("Data", "the model, the local shard, the device");
  data->add_option("--model", o->model,
                   "the job's TorchScript file, if this client has it (its SHA-256 must be the "
                   "job's); empty: the coordinator's model, downloaded when it is a file");
  AddTrainingFlags(*data, o);
  data->add_option("--export", o->export_path,
                   "when the job ends, write its final global model here (PATH.pt TorchScript, "
                   "PATH.npz, PATH.json), with this client's own BatchNorm statistics under "
                   "--buffers local: its personalised model");
  data->add_option("--shard", o->shard, "this client's shard index");
  data->add_option("--num-shards", o->num_shards,
                   "number of shards the training set is split into (1: all of it, as when "
                   "each client has a file of its own)");
  data->add_option("--partition-seed", o->partition_seed,
                   "seed of the split (same on every client)");
}

void AddTrainingFlags(CLI::App& app, EdgeClientOptions* o) {
  app.add_option("--data", o->data,
                 "fashion-mnist, synthetic:N, npz:PATH (arrays x and y, or x_train and "
                 "y_train), csv:PATH or images:DIR (docs/your-model.md)");
  app.add_option("--data-dir", o->data_dir, "Fashion-MNIST folder");
  fedlgc::AddLabelFlags(app, "the data", &o->label_column, &o->targets);
  app.add_option("--optimizer", o->optimizer,
                 "local optimizer: sgd(lr=..,momentum=..,weight_decay=..,nesterov=0|1) or "
                 "adam(lr=..,beta1=..,beta2=..,eps=..,weight_decay=..); empty: SGD with the "
                 "round's lr and momentum 0.9 (an sgd without lr takes the round's)");
  app.add_option("--train-limit", o->train_limit, "use the first N training examples (0 = all)");
  app.add_option("--inputs", o->inputs,
                 "how features reach the model: auto (an npz's integer x other than uint8 as "
                 "int64, the rest as float32), float, or ids (int64 token ids, for a model with "
                 "an embedding first; npz or csv)");
  app.add_option("--eval-data", o->eval_data,
                 "federated evaluation (the coordinator's --eval clients or both): data of this "
                 "client's own to evaluate the global model on, in --data's forms (an npz's "
                 "x_test and y_test, or its x and y); empty: the share of the shard the job "
                 "holds out (--eval-fraction)");
  app.add_option(
      "--partition", o->partition,
      "iid, dirichlet(ALPHA[,min=N,balance=1]) or labels(K[,assign=deal|random]): label skew by "
      "Dirichlet(ALPHA), drawn again until every client holds N examples, with balance=1 giving no "
      "more of a class to a client already at its even share; or K classes a client, dealt in turn "
      "(every class the same number of holders) or at random (client i holds class i mod classes "
      "and K-1 drawn at random, so sizes are skewed too)");
  app.add_option("--device", o->device,
                 "cpu, cuda, cuda:N or auto (CUDA when libtorch and a GPU allow)");
  app.add_option("--torch-threads", o->torch_threads, "libtorch threads per process");
  app.add_option("--dump-updates", o->dump_updates,
                 "measurements only: write each round's local update (float32) to "
                 "DIR/<id>/r<round>.f32 (a round trained again: r<round>.2.f32, ...)");
}

void AddHostFlags(CLI::App& app, HostFlags* h) {
  CLI::Option_group* g = app.add_option_group(
      "Hosting", "many clients in this process, each its own identity, state and connection");
  g->add_option("--client-ids", h->clients,
                "host these clients, e.g. 0-249 or 3,7,10-12; {i} in --id, --tls-cert, "
                "--tls-key and --data stands for each one's index, which is also its --shard");
  fedlgc::AddRenamedFlag(*g, "--clients", "--client-ids");
  g->add_option("--client-config", h->client_config,
                "with --client-ids: a config file per client ({i} its index), read on top of the "
                "command line's options");
  g->add_option("--train-slots", h->train_slots,
                "with --client-ids: how many hosted clients may train at once (each slot holds "
                "one model)");
}

absl::StatusOr<std::vector<EdgeClientOptions>> HostedClients(const HostFlags& h,
                                                             const EdgeClientOptions& base) {
  auto indices = ParseClientList(h.clients);
  if (!indices.ok()) return indices.status();
  std::vector<EdgeClientOptions> out;
  for (uint32_t i : *indices) {
    EdgeClientOptions o = HostedClientOptions(base, i);
    if (!h.client_config.empty()) {
      CLI::App app;
      AddCommonFlags(app);
      AddEdgeClientFlags(app, &o);
      const std::string arg = "--config=" + WithIndex(h.client_config, i);
      try {
        app.parse(std::vector<std::string>{arg});
      } catch (const CLI::ParseError& e) {
        return absl::InvalidArgumentError(StrCat(arg, ": ", e.what()));
      }
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace fedlgc::edge_client
