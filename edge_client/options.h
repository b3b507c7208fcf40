// What an edge client runs with: who it is, where its coordinator is, its data shard and
// device, and where it keeps its state. Defaults are the flag defaults of fedlgc-edge
// (docs/configuration.md); flags and config files are parsed only in main (flags.h).
#ifndef FEDLGC_EDGE_CLIENT_OPTIONS_H_
#define FEDLGC_EDGE_CLIENT_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/dataset.h"
#include "core/protocol.h"
#include "edge_client/transport.h"

namespace fedlgc::edge_client {

struct EdgeClientOptions {
  std::string server = kDefaultAddress;
  std::string client_id = "client-0";
  std::string state_dir = "state";
  std::string tls_ca, tls_cert, tls_key;
  std::string tls_server_name = "localhost";  // name in the coordinator's certificate
  bool insecure = false;
  // The job's model as a TorchScript file of this client's (its SHA-256 must be the job's);
  // empty: whatever the coordinator serves (a built-in, or its file, downloaded into
  // <state_dir>/models/).
  std::string model;
  // The local optimizer (core/optimizer.h); empty: SGD with the round's lr, momentum 0.9.
  std::string optimizer;
  // The training data (core/dataset.h): fashion-mnist, synthetic:N, npz:PATH, csv:PATH
  // or images:DIR; a CSV's label column and how labels are read.
  std::string data = "fashion-mnist";
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string label_column = "label";
  std::string targets = "auto";
  std::string inputs = "auto";  // core::DataOptions::inputs
  uint64_t train_limit = 0;  // use the first N training examples (0 = all)
  // Federated evaluation: data of this client's own to evaluate the global model on, in
  // --data's forms (its test split); empty: a held-out share of the shard, as the job says
  // (--eval-fraction).
  std::string eval_data;
  uint32_t shard = 0;        // this client's shard index
  uint32_t num_shards = 1;   // shards the training set is split into
  std::string partition = "iid";
  std::string device = "auto";  // cpu, cuda, cuda:N or auto (CUDA when available)
  uint64_t partition_seed = 1;
  int torch_threads = 1;
  std::string metrics_listen;  // empty: no exposer
  uint32_t max_message_bytes = 4 << 20;
  double backoff_initial_s = 0.2;
  double backoff_max_s = 5.0;
  double call_timeout_s = 60;  // per upload/download attempt
  // Stop after this many rounds were uploaded (0: run until the job is done). For tests.
  uint32_t exit_after_rounds = 0;
  // Seconds to keep serving /metrics after the job is done, for Prometheus's last scrape.
  double linger_s = 0;
  // At the job's end: the final global model, with this client's own buffers under
  // --buffers local (its personalised model), written as the export files (core/export.h)
  // of this path. Empty: none.
  std::string export_path;
  // Robustness experiments only: how this client lies about its update (attack.h).
  std::string attack = "none";
  // Measurements only: each round's local update (trained minus received weights) as
  // float32 in <dump_updates>/<client id>/r<round>.f32 (bench/lgc_probe reads them).
  std::string dump_updates;
  // The time the client reads (not owned; core/clock.h): the process's, or a test's fake.
  core::Clock* clock = core::Clock::Real();

  absl::Status Validate() const;
  TransportOptions transport() const;
  core::DataOptions data_options() const;
  // The seed of this client's held-out share (core::SplitHeldOut): the same for the C++
  // client and a Python client of the same shard.
  uint64_t held_out_seed() const { return partition_seed * 1000003 + shard; }
};

}  // namespace fedlgc::edge_client

#endif  // FEDLGC_EDGE_CLIENT_OPTIONS_H_
