// What a coordinator runs: the job (model, rounds, quorum, the round plan, the mode), where
// it listens and keeps its state, and how it evaluates. Defaults are the flag defaults of
// fedlgc-coordinator (docs/configuration.md); the mode's own options are
// modes::ModeOptions. Flags and config files are parsed only in main (flags.h).
#ifndef FEDLGC_COORDINATOR_OPTIONS_H_
#define FEDLGC_COORDINATOR_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/downlink.h"
#include "coordinator/mode_traits.h"
#include "coordinator/model_guard.h"
#include "coordinator/robust.h"
#include "coordinator/round_engine.h"
#include "coordinator/stream_registry.h"
#include "core/clock.h"
#include "core/dataset.h"
#include "core/model.h"
#include "core/protocol.h"

namespace fedlgc::coordinator {

// The job's codec both ways when none is given, the same in the coordinator, fedlgc-sim,
// fedlgc-load and the compose files (a test compares their --help): what fedlgc is for,
// 4-bit updates up and 4-bit model deltas down, each through Zstandard (docs/results.md,
// time to accuracy on slow links).
inline constexpr char kDefaultCodec[] = "zstd(qsgd(bits=4,norm=linf))";

struct CoordinatorOptions {
  CoordinatorOptions() {
    plan.codec = kDefaultCodec;
    downlink.codec = kDefaultCodec;
  }

  std::string listen = kDefaultAddress;  // gRPC address (where bare clients dial); port 0: any free one
  std::string metrics_listen = "127.0.0.1:0";  // Prometheus exposer; empty: none
  std::string state_dir = "state/coordinator";
  // "cnn", "mlp", or a TorchScript file, which the coordinator serves to clients that do
  // not hold it (core/model.h); its buffers ("average" or "local") and its loss.
  std::string model = "cnn";
  std::string buffers = "average";
  std::string loss = "auto";
  // Regular expressions over the parameters' names (core::ModelOptions): parameters that do
  // not train, and personal ones that each client trains and keeps; "" for none.
  std::string freeze, local_params;
  uint64_t init_seed = 1;  // of the initial model (a built-in's; a file has its weights)
  uint32_t rounds = 20;
  uint32_t min_clients = 1;         // quorum to open a round
  double fraction = 1.0;            // of connected clients per round
  double round_timeout_s = 300;     // deadline after opening
  double max_client_weight = 0.25;  // largest share of a round's weight one client holds
  // Robustness (docs/robustness.md): the aggregator (robust.h), the clip multiplier
  // (0: no clipping) and the model guard.
  std::string aggregator = "mean";
  double clip_multiplier = 2;
  GuardOptions guard;
  RoundPlan plan;
  // --codec-ladder (codec_ladder.h): codecs densest first, each participant asked with the
  // densest its measured link carries by its deadline; empty: every client sends
  // plan.codec. With a ladder, plan.codec is its first rung.
  std::vector<std::string> codec_ladder;
  // The global model's downloads (downlink.h): fp32, or deltas through a codec.
  DownlinkOptions downlink;
  // --mode, a name of core/protocol.h; the job's mode is resolved from it and the codec
  // once (modes::JobMode), and the options are checked against its traits.
  std::string mode = "fedavg";
  double ratio_target = 0;                  // exported for the compression-ratio alert; 0: none
  double linger_s = 0;                      // seconds to keep serving /metrics after the last round
  uint32_t max_client_series = 1000;        // clients with metric series of their own (0: all)
  // The trained model handed over (coordinator/model_keeper.h): --export PATH writes the
  // global model's files (core/export.h) after every committed round, --export-best those
  // of the best evaluated round instead; the state folder keeps the last --keep-models
  // rounds' models and the best one for fedlgc-export.
  std::string export_path;
  bool export_best = false;
  uint32_t keep_models = 3;
  // --tensorboard DIR: each committed round's figures as TensorBoard scalars
  // (monitoring/tensorboard.h, RoundScalars in round_recorder.h); empty: none.
  std::string tensorboard;
  uint32_t eval_every = 1;                  // 0: never
  // Where the global model is evaluated: "server" on --test-data, "clients" on each asked
  // client's own held-out data (federated_eval.h), "both", or "auto": server, or clients
  // when there is no test set (--test-data none).
  std::string eval = "auto";
  double eval_fraction = 0.1;  // of each client's shard held out under clients and both
  uint32_t eval_clients = 0;   // clients asked per evaluation (0: every connected one)
  double eval_timeout_s = 60;  // how long their answers are waited for
  // Batch normalisation statistics re-estimated after each commit
  // (coordinator/statistics_phase.h): "off", "on", or "auto" (on where the job compresses
  // its updates and clients may send statistics: StatisticsAutomatic); the batches of how
  // many examples each asked client passes forward, and how long their answers are
  // waited for.
  std::string bn_stats = "auto";
  uint32_t bn_stats_batches = 100;
  uint32_t bn_stats_batch = 64;
  double bn_stats_timeout_s = 30;
  uint64_t eval_limit = 0;                  // test examples (0 = all)
  // The test set (core/dataset.h): fashion-mnist, synthetic:N, npz:PATH, csv:PATH or
  // images:DIR; a CSV's label column and how labels are read.
  std::string test_data = "fashion-mnist";
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string label_column = "label";
  std::string targets = "auto";
  std::string inputs = "auto";  // core::DataOptions::inputs
  // TLS: CA for client certificates, server certificate and key.
  std::string tls_ca, tls_cert, tls_key;
  bool insecure = false;
  uint32_t max_message_bytes = 4 << 20;
  // Open uploads, shares and downloads per client and in all, and the idle timeout
  // (stream_registry.h); streams per connection (HTTP/2).
  StreamLimits streams;
  uint32_t max_streams_per_connection = 64;
  uint64_t seed = 1;  // participant sampling and the clients' round seeds
  int torch_threads = 1;
  // An aggregator (docs/scale.md): a coordinator that is an edge client of its parent.
  // Each round its parent opens for it, it runs one with its own clients from the
  // parent's model and sends the merged update up through the parent's codec, with error
  // feedback of its own. `parent`: the parent's addresses, tried in turn
  // ("host:port[,host:port...]"); empty: a root. Its identity there, its client
  // certificate (mTLS; the CA is --tls-ca unless --parent-tls-ca), the name in the
  // parent's certificate, the upstream client's metrics exposer, and the share of the
  // parent's round time kept for the upload up.
  std::string parent;
  std::string parent_id;
  std::string parent_tls_ca, parent_tls_cert, parent_tls_key;
  std::string parent_tls_server_name = "localhost";
  std::string parent_metrics_listen;
  double parent_reserve = 0.25;
  // The time rounds, deadlines and idle calls are measured in (not owned; core/clock.h):
  // the process's, or a test's fake.
  core::Clock* clock = core::Clock::Real();

  bool has_parent() const { return !parent.empty(); }

  // Checked against the job's mode (modes::JobMode resolves it from `mode` and the codec).
  absl::Status Validate(const ModeTraits& traits) const;
  core::ModelOptions model_options() const;
  core::DataOptions test_data_options() const;
  // Whether the coordinator holds a test set (--test-data is not "none").
  bool HasTestData() const { return !test_data.empty() && test_data != "none"; }
  // Where evaluations run (--eval, resolved).
  bool EvalOnServer() const;
  bool EvalOnClients() const;
  // The --parent options, for a job of the mode of `traits`.
  absl::Status ValidateParent(const ModeTraits& traits) const;
  // Identifies the job in checkpoints: changing any of these makes a new job.
  // `layout`: the model's (per-tensor codecs name it in their spec); null only for jobs
  // whose codecs need none. `model_sha256`: a TorchScript file's hash, which names the
  // model in place of its path (moving the file keeps the job; changing it makes another).
  std::string JobKey(uint64_t dim, const codecs::ModelLayout* layout, const ModeTraits& traits,
                     const std::string& model_sha256 = "") const;
  // The job id clients see in Join: "fedlgc-<model>" (a file: its name and the first 12
  // digits of its hash), and for an aggregator "fedlgc-<model>@<parent id>", so that a
  // client that fails over between tiers knows it talks to another coordinator.
  std::string JobId(const std::string& model_sha256 = "") const;
  // The model's name in Join and reports: a built-in's, or the file's name.
  std::string ModelName() const;
  // --aggregator and --clip-multiplier, checked against the job's mode.
  absl::StatusOr<AggregatorOptions> Robust(const ModeTraits& traits) const;
};

// Codec specs as --codec-warmup and --codec-ladder write them: ';'-separated.
std::string JoinSpecs(const std::vector<std::string>& specs);

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_OPTIONS_H_
