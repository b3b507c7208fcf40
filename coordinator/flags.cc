// Coordinator flags (see flags.h).
#include "coordinator/flags.h"

#include <CLI/CLI.hpp>

#include "base/flags.h"
#include "base/str.h"
#include "core/protocol.h"

namespace fedlgc::coordinator {
namespace {

std::vector<std::string> SplitSpecs(const std::string& text) {
  std::vector<std::string> out;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find(';', begin), text.size());
    if (end > begin) out.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

// The model and its rules: which parameters train, travel and stay, the loss.
void AddModelFlags(CLI::Option_group* g, CoordinatorOptions* o) {
  g->add_option("--model", o->model,
                "cnn or mlp (built in, for 28x28 images), or a TorchScript file (torch.jit.save), "
                "which the coordinator serves to the clients (docs/your-model.md)");
  g->add_option("--buffers", o->buffers,
                "a model's floating-point buffers (BatchNorm statistics): average (sent and "
                "averaged with the weights) or local (each client keeps its own, FedBN)");
  g->add_option("--freeze", o->freeze,
                "parameters that do not train, by a regular expression over their names "
                "(e.g. '^features\\.'; a TorchScript file's requires_grad=False ones are frozen "
                "too): they stay as the model file or seed made them and never travel");
  g->add_option("--local-params", o->local_params,
                "personal parameters, by a regular expression over their names (e.g. '^fc\\.'): "
                "each client trains and keeps its own, never uploaded or overwritten "
                "(FedPer/FedRep heads; evaluate with --eval clients)");
  g->add_option("--loss", o->loss,
                "auto (a module's own loss(output, target) method, else cross_entropy for class "
                "labels and mse for float targets), cross_entropy or mse");
}

}  // namespace

void AddJobFlags(CLI::App& app, CoordinatorOptions* o) {
  CLI::Option_group* g = app.add_option_group("Job", "what the federation trains and how");
  AddModelFlags(g, o);
  std::string modes;
  for (const ModeInfo& m : kModes) {
    StrAppend(&modes, modes.empty() ? "" : ", ", m.name, " (", m.summary, ")");
  }
  g->add_option("--mode", o->mode, StrCat("aggregation (docs/modes.md): ", modes));
  g->add_option("--rounds", o->rounds, "rounds to run");
  g->add_option("--min-clients", o->min_clients, "connected clients needed to open a round");
  g->add_option("--fraction", o->fraction,
                "share of the connected clients asked per round (at least one)");
  g->add_option("--round-timeout", o->round_timeout_s,
                "seconds before a round closes with what arrived");
  g->add_option("--max-client-weight", o->max_client_weight,
                "largest share of a round's total weight one client may hold (its weight is its "
                "sample count at Join; 1: no cap; with 1/share participants or fewer, equal "
                "weights)");
  g->add_option("--aggregator", o->aggregator,
                "how a round combines updates: mean, streaming (O(dim) memory), median, "
                "trimmed_mean(trim=0.1), krum(f=1,select=1) or bulyan(f=1) "
                "(docs/robustness.md)");
  g->add_option("--clip-multiplier", o->clip_multiplier,
                "clip each update's L2 norm at this many times the lower median of the "
                "round's norms (0: no clipping)");
  CLI::Option* codec = g->add_option("--codec", o->plan.codec,
                                     "codec spec for updates, e.g. "
                                     "'topk(ratio=0.01,values=qsgd(bits=8))' (docs/codecs.md)");
  g->add_option_function<std::string>(
       "--codec-ladder",
       [o, codec](const std::string& text) {
         o->codec_ladder = SplitSpecs(text);
         if (o->codec_ladder.empty()) return;
         if (codec->count() > 0 && o->plan.codec != o->codec_ladder.front()) {
           throw CLI::ValidationError("--codec-ladder",
                                      "its first rung is the job codec; leave --codec out");
         }
         o->plan.codec = o->codec_ladder.front();
       },
       "';'-separated codecs, densest first, e.g. "
       "'fp32;qsgd(bits=8);qsgd(bits=4);topk(ratio=0.01,values=qsgd(bits=8))': each client "
       "is asked with the densest its measured link sends before the round's deadline "
       "(FedAvg; docs/codecs.md)")
      ->default_str(JoinSpecs(o->codec_ladder));
  g->add_option_function<std::string>(
       "--codec-warmup", [o](const std::string& text) { o->plan.warmup_codecs = SplitSpecs(text); },
       "';'-separated codec specs for rounds 1, 2, ... before --codec takes over")
      ->default_str(JoinSpecs(o->plan.warmup_codecs));
  g->add_option("--downlink-codec", o->downlink.codec,
                "codec of the global model's downloads: fp32 (the model whole), or deltas "
                "from the version a client holds through a stateless codec, e.g. "
                "'qsgd(bits=4,norm=linf)' (error feedback at the coordinator; "
                "docs/protocol.md)");
  g->add_option("--downlink-window", o->downlink.window,
                "deltas the coordinator keeps for clients that are behind (older: the model "
                "whole)");
  g->add_option("--local-epochs", o->plan.local_epochs, "local epochs per round");
  g->add_option("--local-steps", o->plan.local_steps,
                "local steps per round (overrides epochs when > 0)");
  g->add_option("--lr", o->plan.lr, "client learning rate");
  g->add_option("--batch", o->plan.batch_size, "client batch size");
  g->add_option("--chunk-bytes", o->plan.max_chunk_bytes, "largest update chunk in bytes");
  g->add_option("--upload-order", o->plan.upload_order,
                "order in which a client's chunks leave: index (coordinate order), layer "
                "(input-side tensors first, as P3) or magnitude (most energy per byte first), "
                "so a client cut off by the deadline has sent its most important part");
  g->add_option("--seed", o->seed, "seed for participant sampling and client rounds");
  g->add_option("--init-seed", o->init_seed, "seed of the initial model");
}

void AddGuardFlags(CLI::App& app, CoordinatorOptions* o) {
  CLI::Option_group* g =
      app.add_option_group("Model guard", "what a round's new model must pass to commit");
  fedlgc::AddBoolFlag(*g, "--guard", &o->guard.enabled,
                      "check each round's model before it commits; refused: commit without the "
                      "largest updates and quarantine their senders");
  g->add_option("--guard-max-growth", o->guard.max_growth,
                "largest growth of the model's L2 norm in one round (x max(norm, 1))");
  g->add_option("--guard-max-loss-ratio", o->guard.max_loss_ratio,
                "largest ratio of the new model's guard-set loss to the last one's (+0.1)");
  g->add_option("--guard-samples", o->guard.samples,
                "test examples of the guard set (0: no loss check)");
}

void AddExportFlags(CLI::App& app, CoordinatorOptions* o) {
  CLI::Option_group* g = app.add_option_group("Model out", "the trained model handed over");
  g->add_option("--export", o->export_path,
                "write the global model here after every committed round: PATH.pt (TorchScript "
                "that plain PyTorch loads), PATH.npz (its tensors by name) and PATH.json (the "
                "round and its evaluation) (docs/your-model.md)");
  fedlgc::AddBoolFlag(*g, "--export-best", &o->export_best,
                      "--export holds the best evaluated round by the job's metric (accuracy, or "
                      "the loss without classes) instead of the newest");
  g->add_option("--keep-models", o->keep_models,
                "committed rounds whose models <state-dir>/models keeps beside the best one, "
                "for fedlgc-export");
  g->add_option("--tensorboard", o->tensorboard,
                "write each committed round's accuracy and loss (server and federated), bytes "
                "and compression ratios each way, participants, seconds and privacy spent as "
                "TensorBoard scalars into a new event file in this folder "
                "(docs/deployment.md#tensorboard); empty: none");
}

void AddEvaluationFlags(CLI::App& g, CoordinatorOptions* o) {
  g.add_option("--eval", o->eval,
               "where the global model is evaluated: server (on --test-data), clients (each "
               "asked client on its own held-out data, weighed by examples), both, or auto "
               "(server, or clients with --test-data none or --local-params, where each client's "
               "model is its own)");
  g.add_option("--eval-every", o->eval_every, "evaluate every N rounds, and the last (0 = never)");
  g.add_option("--eval-fraction", o->eval_fraction,
               "with --eval clients or both: the share of each client's shard held out of "
               "training to evaluate on (a client with --eval-data trains on all of it)");
  g.add_option("--eval-clients", o->eval_clients,
               "clients asked per evaluation, a seeded sample of those connected (0: all)");
  g.add_option("--eval-timeout", o->eval_timeout_s,
               "seconds the clients' evaluations are waited for (later ones count as missing)");
  g.add_option("--bn-stats", o->bn_stats,
               "on: after each commit the round's counted clients re-estimate the model's "
               "batch normalisation statistics on their training data, and the coordinator "
               "commits the pooled statistics as a version of their own (docs/your-model.md); "
               "auto: on for a model with such statistics whose updates are compressed (a "
               "codec other than fp32, fp16 or bf16), where the mode and its options let "
               "clients send them (not under --dp, --secagg or buffered rounds); off");
  g.add_option("--bn-stats-batches", o->bn_stats_batches,
               "with --bn-stats on: batches each asked client passes forward");
  g.add_option("--bn-stats-batch", o->bn_stats_batch, "with --bn-stats on: examples a batch");
  g.add_option("--bn-stats-timeout", o->bn_stats_timeout_s,
               "with --bn-stats on: seconds the clients' statistics are waited for");
}

namespace {

void AddServiceFlags(CLI::App& app, CoordinatorOptions* o) {
  CLI::Option_group* g = app.add_option_group("Service", "where it listens and keeps state");
  g->add_option("--listen", o->listen,
                "gRPC address; the default is where an edge client dials by default (0.0.0.0:PORT "
                "serves other hosts; port 0 picks a free one)");
  g->add_option("--metrics-listen", o->metrics_listen,
                "Prometheus exposer address; empty disables it");
  g->add_option("--state-dir", o->state_dir,
                "checkpoints and rounds.jsonl; a restart resumes from here");
  g->add_option("--tls-ca", o->tls_ca, "CA certificate that signs client certificates");
  g->add_option("--tls-cert", o->tls_cert, "server certificate");
  g->add_option("--tls-key", o->tls_key, "server key");
  fedlgc::AddBoolFlag(*g, "--insecure", &o->insecure,
                      "plaintext, clients name themselves: local experiments only");
  g->add_option("--max-message-bytes", o->max_message_bytes,
                "largest message a client may send (larger: RESOURCE_EXHAUSTED, counted)");
  g->add_option("--max-streams-per-client", o->streams.per_client,
                "uploads, shares and downloads one client may have open at once");
  g->add_option("--max-streams", o->streams.total,
                "uploads, shares and downloads open at once, all clients together");
  g->add_option("--max-streams-per-connection", o->max_streams_per_connection,
                "concurrent calls per connection (HTTP/2; clients queue past it)");
  g->add_option("--stream-idle-timeout", o->streams.idle_timeout_s,
                "seconds an upload or download may go without a message before it is "
                "cancelled");
  g->add_option("--linger", o->linger_s,
                "seconds to keep serving /metrics after the last round (for a last scrape)");
  g->add_option("--max-client-series", o->max_client_series,
                "clients with per-client metric series of their own (the first to join); the "
                "others' counters add up under client=\"_other\" (0: every client)");
  g->add_option("--ratio-target", o->ratio_target,
                "compression ratio the job should reach; exported for alerting (0: none)");
}

void AddParentFlags(CLI::App& app, CoordinatorOptions* o) {
  CLI::Option_group* g = app.add_option_group(
      "Aggregator", "a coordinator that is a client of its parent (docs/scale.md)");
  g->add_option("--parent", o->parent,
                "the parent coordinator's address (a comma-separated list is tried in turn): "
                "run each of its rounds with this coordinator's clients and send one merged "
                "update up; empty: this is the root");
  g->add_option("--parent-id", o->parent_id,
                "this coordinator's client id at its parent (the CN of --parent-tls-cert)");
  g->add_option("--parent-tls-ca", o->parent_tls_ca,
                "CA of the parent's certificate (default: --tls-ca)");
  g->add_option("--parent-tls-cert", o->parent_tls_cert,
                "this coordinator's client certificate at its parent");
  g->add_option("--parent-tls-key", o->parent_tls_key, "its key");
  g->add_option("--parent-tls-server-name", o->parent_tls_server_name,
                "name in the parent's certificate");
  g->add_option("--parent-metrics-listen", o->parent_metrics_listen,
                "Prometheus exposer of the upstream client (what this aggregator sends up); "
                "empty: none");
  g->add_option("--parent-reserve", o->parent_reserve,
                "share of the time left in the parent's round kept for sending the merged "
                "update up (the rest is this aggregator's own round)");
}

void AddEvalFlags(CLI::App& app, CoordinatorOptions* o) {
  CLI::Option_group* g = app.add_option_group("Evaluation", "of the global model");
  AddEvaluationFlags(*g, o);
  g->add_option("--eval-limit", o->eval_limit, "test examples used (0 = all)");
  g->add_option("--test-data", o->test_data,
                "fashion-mnist, synthetic:N, npz:PATH (arrays x and y, or x_test and y_test), "
                "csv:PATH, images:DIR, or none: the coordinator holds no test set (the "
                "clients evaluate) (docs/your-model.md)");
  g->add_option("--data-dir", o->data_dir, "Fashion-MNIST folder");
  fedlgc::AddLabelFlags(*g, "the test set", &o->label_column, &o->targets);
  g->add_option("--inputs", o->inputs,
                "how the test set's features reach the model: auto, float or ids (as "
                "fedlgc-edge --inputs)");
  g->add_option("--torch-threads", o->torch_threads, "libtorch threads for evaluation");
}

}  // namespace

void AddCoordinatorFlags(CLI::App& app, CoordinatorOptions* o) {
  AddJobFlags(app, o);
  AddServiceFlags(app, o);
  AddGuardFlags(app, o);
  AddExportFlags(app, o);
  AddEvalFlags(app, o);
  AddParentFlags(app, o);
}

}  // namespace fedlgc::coordinator
