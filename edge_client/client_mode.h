// The one seam of an aggregation mode at the edge (docs/adding-a-mode.md): a ClientMode
// handles its mode's round starts, receipts and events, with the machinery of ClientEnv.
// EdgeClient (edge_client.h) runs the join, the event stream and reconnects, and knows
// only this interface; modes/ holds one implementation per mode and the factory that
// picks one from the job's mode (modes/clients.h).
#ifndef FEDLGC_EDGE_CLIENT_CLIENT_MODE_H_
#define FEDLGC_EDGE_CLIENT_CLIENT_MODE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/layout.h"
#include "core/model.h"
#include "core/protocol.h"
#include "core/round_report.h"
#include "edge_client/client_state.h"
#include "edge_client/transport.h"

namespace fedlgc::monitoring {
class Metrics;
}
namespace fedlgc::protos {
class RoundStart;
class RoundReceipt;
class ModeEvent;
}  // namespace fedlgc::protos

namespace fedlgc::edge_client {

// What a round's local training adds beyond its RoundStart (SCAFFOLD's correction), and
// what it tells back beside the loss.
struct LocalTerms {
  // After each optimizer step the trainable parameters move by -lr x correction, outside
  // the optimizer's momentum (core::TrainOptions::correction): SCAFFOLD's c - c_i, flat, of
  // the model's dimension; empty: none. Must outlive the call.
  std::span<const float> correction;
};
struct LocalTrained {
  double loss = 0;    // as TrainLocal returns it (NaN: the trainer gave none)
  int64_t steps = 0;  // optimizer steps taken (SCAFFOLD's K)
  double lr_sum = 0;  // their learning rates added up (K x lr at a fixed lr)
};

// What a mode may use of its client. Not thread-safe: a mode calls it from the event
// loop's thread (or from a thread it joins before the loop goes on).
class ClientEnv {
 public:
  virtual ~ClientEnv() = default;
  virtual const std::string& client_id() const = 0;
  virtual monitoring::Metrics& metrics() = 0;
  // The client's clock (EdgeClientOptions::clock): what a mode times its encode with and
  // reads the time from.
  virtual core::Clock& clock() = 0;
  // The persisted state (client_state.h) and its write to disk.
  virtual ClientState& state() = 0;
  virtual absl::Status Persist() = 0;
  virtual uint64_t dim() const = 0;
  // The job model's layout (names and shapes of its tensors), for per-tensor codecs.
  virtual const codecs::ModelLayout& layout() const = 0;
  // Where the model's buffers begin, one cut per buffer tensor (core/model.h ScaleCuts):
  // every encode of the flat vector passes them as EncodeOptions::cuts. Empty for models
  // without averaged buffers.
  virtual const std::vector<uint64_t>& scale_cuts() const {
    static const std::vector<uint64_t> kNone;
    return kNone;
  }
  virtual const std::string& device() const = 0;  // resolved: "cpu", "cuda:0", ...
  virtual uint64_t total_rounds() const = 0;      // of the job (Join)

  // Trains the round's local period (epochs or steps, lr, batch, seed of `start`) from
  // `weights`, in place; returns the running loss. NOT_FOUND: nothing to send this round
  // (an aggregator whose own round counted no update).
  virtual absl::StatusOr<double> TrainLocal(const protos::RoundStart& start,
                                            std::vector<float>* weights) = 0;
  // TrainLocal with `terms`, saying the steps it took. A client that cannot apply them
  // refuses (FAILED_PRECONDITION, saying why): the default, for an env that trains only
  // through TrainLocal, takes no correction and knows no steps.
  virtual absl::StatusOr<LocalTrained> TrainLocalWith(const protos::RoundStart& start,
                                                      std::vector<float>* weights,
                                                      const LocalTerms& terms) {
    if (!terms.correction.empty()) {
      return absl::FailedPreconditionError("this client trains without SCAFFOLD's correction");
    }
    auto loss = TrainLocal(start, weights);
    if (!loss.ok()) return loss.status();
    return LocalTrained{.loss = *loss};
  }
  // Downloads the model of `version` (its float values).
  virtual absl::StatusOr<std::vector<float>> DownloadFloats(const std::string& blob,
                                                            uint64_t version,
                                                            SystemTime deadline) = 0;
  // A blob other than the model, resumably (Transport::DownloadBlob): its bytes.
  virtual absl::StatusOr<std::string> DownloadBlob(const std::string& name, uint64_t version,
                                                   SystemTime deadline) = 0;
  // Sends a progress report of this client (Transport::Report: OK once the round is over
  // or the deadline passed).
  virtual absl::Status Report(protos::ProgressReport report, SystemTime deadline) = 0;
  // An update in flight for `round`, with a fresh update id and this shard's weight.
  virtual PendingUpdate NewPending(uint64_t round, uint64_t model_version) = 0;
  // A fresh update id, for an update sent again as another (an LGC leader promoted).
  virtual uint64_t NewUpdateId() = 0;
  // Uploads state().pending until the coordinator holds it or the round closes (both
  // count as uploaded: the receipt will say what counted); through Gossip with `share`.
  // kFirstHalf: not the round's last upload (two-phase PowerSGD's P), which counts the
  // round as uploaded.
  enum class Half { kWhole, kFirstHalf };
  virtual absl::Status UploadPending(uint64_t round, SystemTime deadline,
                                     const std::optional<ShareFields>& share = std::nullopt,
                                     Half half = Half::kWhole) = 0;
  // Uploads a copy of an update on the caller's thread, which may be one of the mode's own
  // while the event loop goes on (an SGP share travelling beside training); the mode
  // counts it (CountUploaded) when it knows it arrived.
  virtual absl::Status UploadCopy(const PendingUpdate& p, const std::string& codec_label,
                                  SystemTime deadline, const ShareFields& share) = 0;
  // A round was uploaded by other means (an SGP share on a thread of its own).
  virtual void CountUploaded(uint64_t round) = 0;
  // Records an encode that began at t0 for `round`: the histogram, and the round's local
  // training and encode seconds in the client's rounds.jsonl.
  virtual void ObserveEncode(uint64_t round, core::Clock::time_point t0) = 0;
  virtual void AppendRoundLog(const ClientRoundRecord& record) = 0;
};

// Not thread-safe: the event loop calls one method at a time.
class ClientMode {
 public:
  virtual ~ClientMode() = default;
  // A round this client takes part in (its start may arrive again after a reconnect).
  virtual absl::Status OnRoundStart(const protos::RoundStart& start) = 0;
  // Which chunks of this client's update of a round counted.
  virtual absl::Status OnReceipt(const protos::RoundReceipt& receipt) = 0;
  // An event of this mode (ServerEvent.mode).
  virtual absl::Status OnModeEvent(const protos::ModeEvent& /*event*/) { return absl::OkStatus(); }
  // Before the next event is handled, and before a reconnect or the end: waits for work
  // the mode runs beside the event loop (an SGP share's upload).
  virtual void Settle() {}
  // The job is over; the coordinator may still read last words (SGP: the mail added).
  virtual absl::Status OnJobOver() { return absl::OkStatus(); }
  // The mode's own state in the client state file (ClientState::modes). LoadState runs
  // once, after the mode is made and before its first event: it reads its slot (or, from
  // a file older than slots, its part of state.legacy). SaveState runs with every
  // Persist and writes its slot; an error (a slot past protobuf's 2 GiB) fails the Persist.
  // A mode that keeps nothing across a restart needs neither.
  virtual absl::Status LoadState(const ClientState& /*state*/) { return absl::OkStatus(); }
  virtual absl::Status SaveState(std::map<std::string, std::string>* /*slots*/) const {
    return absl::OkStatus();
  }
};

// What a client contributes in place of training on a shard of its own: an aggregator
// (tier/tier.h) runs a round with its own clients. Called on the event loop's thread.
class LocalTrainer {
 public:
  virtual ~LocalTrainer() = default;
  // The samples behind this client's updates: its weight, sent in Join.
  virtual uint64_t NumSamples() = 0;
  // As ClientEnv::TrainLocal. NOT_FOUND: nothing to send this round (the client sends
  // nothing and waits for the next one).
  virtual absl::StatusOr<double> Train(const protos::RoundStart& start,
                                       std::vector<float>* weights) = 0;
  // As ClientEnv::TrainLocalWith. The default takes no correction (an aggregator, tier/:
  // its clients' rounds are its own) and knows no steps.
  virtual absl::StatusOr<LocalTrained> TrainWith(const protos::RoundStart& start,
                                                 std::vector<float>* weights,
                                                 const LocalTerms& terms) {
    if (!terms.correction.empty()) {
      return absl::FailedPreconditionError(
          "this trainer does not apply SCAFFOLD's correction: a root of --algorithm scaffold "
          "takes edge clients, not aggregators (an aggregator's rounds are its own)");
    }
    auto loss = Train(start, weights);
    if (!loss.ok()) return loss.status();
    return LocalTrained{.loss = *loss};
  }
  // The seconds the last Train spent training, when the trainer knows them apart from its
  // own bookkeeping (a Python client's copies of the weights count as the client's, not
  // as training); nullopt: all of Train's time.
  virtual std::optional<double> TrainSeconds() const { return std::nullopt; }
  // Figures of the last Train for the client's round log (<id>.rounds.jsonl): a Python
  // client's sample count and the metrics its train() returned. Names are the log's keys.
  virtual std::map<std::string, double> RoundFigures() const { return {}; }
  // Federated evaluation (EvalStart): the trainer's own evaluation of `weights` on its
  // held-out data (a Python client's evaluate(module, info)): examples, mean loss, the
  // accuracy or per-class counts. NOT_FOUND: it has none (the client declines, saying why).
  virtual absl::StatusOr<core::EvalResult> Evaluate(std::span<const float> /*weights*/,
                                                    uint64_t /*round*/, uint64_t /*version*/) {
    return absl::NotFoundError("the trainer does not evaluate");
  }
  // Whether Evaluate and ReestimateStatistics answer at all (a Python client with the hook;
  // not an aggregator): a trainer that says no is never handed the model, and the client
  // declines before it downloads one.
  virtual bool Evaluates() const { return false; }
  virtual bool ReestimatesStatistics() const { return false; }
  // Batch normalisation statistics (StatisticsStart): the trainer's own re-estimate for
  // `weights` on its training data (a Python client's statistics hook). NOT_FOUND: it has
  // none (the client declines, saying why).
  virtual absl::StatusOr<core::Statistics> ReestimateStatistics(
      std::span<const float> /*weights*/, const protos::StatisticsStart& /*start*/) {
    return absl::NotFoundError("the trainer does not re-estimate statistics");
  }
  // The job was started afresh (another instance, JoinReply.job_instance): what the
  // trainer keeps for the earlier run (an aggregator's round not yet handed up) is given up.
  virtual void OnJobStartedOver() {}
  // Whether the trainer takes the job's final global model when the job ends (a Python
  // client loads it into the user's module), and taking it.
  virtual bool WantsFinalModel() const { return false; }
  virtual absl::Status TakeFinalModel(std::span<const float> /*weights*/,
                                      uint64_t /*version*/) {
    return absl::OkStatus();
  }
};

// Makes the mode a job runs; modes::MakeClientMode is the one fedlgc-edge uses.
using ClientModeFactory =
    std::function<absl::StatusOr<std::unique_ptr<ClientMode>>(Mode mode, ClientEnv& env)>;

// The deadline of a round start.
SystemTime DeadlineOf(const protos::RoundStart& start);

}  // namespace fedlgc::edge_client

#endif  // FEDLGC_EDGE_CLIENT_CLIENT_MODE_H_
