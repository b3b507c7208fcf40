// The one seam of an aggregation mode at the coordinator (docs/adding-a-mode.md): a
// RoundDriver owns how a round of its mode is run and collected, what it adds to each
// participant's RoundStart, which blobs and reports it takes, and what it saves beside a
// checkpoint. The round loop (coordinator.h), the service (service.h) and main know only
// this interface; modes/ holds one implementation per mode and the factory that picks one
// from the job's options (modes/drivers.h). The shape is PyTorch c10d's communication
// hooks: one object per mode, handed the machinery it may use (RoundHost).
#ifndef FEDLGC_COORDINATOR_ROUND_DRIVER_H_
#define FEDLGC_COORDINATOR_ROUND_DRIVER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/mode_traits.h"
#include "coordinator/model_guard.h"
#include "coordinator/robust.h"
#include "coordinator/round_engine.h"
#include "core/protocol.h"
#include "core/round_report.h"

namespace fedlgc::monitoring {
class Metrics;
}
namespace fedlgc::protos {
class RoundStart;
class ProgressReport;
class ServerEvent;
}  // namespace fedlgc::protos

namespace fedlgc::coordinator {

// What a driver may use of the coordinator while it runs a round. Thread-safe.
class RoundHost {
 public:
  virtual ~RoundHost() = default;
  virtual RoundEngine& engine() = 0;
  virtual monitoring::Metrics& metrics() = 0;
  // Opens the engine's next round for `participants`, collecting with `collector`
  // (`uploaders`: who sends updates; nullptr: all of them), and sends each participant
  // its RoundStart.
  virtual absl::Status StartRound(const std::vector<std::string>& participants,
                                  Clock::time_point deadline, std::shared_ptr<Collector> collector,
                                  const std::set<std::string>* uploaders = nullptr) = 0;
  // Buffered rounds: opens the engine's rolling round (RoundEngine::OpenRound) with
  // `participants`, each uploading by `deadline`, and sends each its RoundStart.
  virtual absl::Status StartRollingRound(const std::vector<std::string>& participants,
                                         Clock::time_point deadline,
                                         std::shared_ptr<Collector> collector) = 0;
  // Buffered rounds: asks `clients` into the open rolling round from the current model
  // version (RoundEngine::AddParticipants), each uploading by `deadline`, and sends each
  // added its RoundStart. Returns how many were added.
  virtual absl::StatusOr<size_t> AskMore(const std::vector<std::string>& clients,
                                         Clock::time_point deadline) = 0;
  // Returns once `done` holds, the deadline passes or the coordinator stops, checking
  // `done` whenever a chunk or report arrives and every 100 ms; `tick` (when given) runs
  // every 100 ms and after each wake-up. `done` runs with the coordinator's lock held: it
  // must be quick and must not call the host; `tick` runs without it and may.
  virtual void WaitUntil(Clock::time_point deadline, const std::function<bool()>& done,
                         const std::function<void()>& tick = nullptr) = 0;
  // The coordinator is stopping: a driver returns OK at once, committing nothing.
  virtual bool stopped() const = 0;
  // Clients with an open event stream.
  virtual std::vector<std::string> Connected() const = 0;
  // Of `watched`, the clients with neither an event stream nor a call for 3 s, counting
  // from `since` at the earliest (a reconnect is briefly absent).
  virtual std::set<std::string> Vanished(const std::set<std::string>& watched,
                                         Clock::time_point since) const = 0;
  // Queues an event on a client's event stream; false when it has none.
  virtual bool Push(const std::string& client, const protos::ServerEvent& event) = 0;
  // Measured downlink throughput of a client (bytes/s, smoothed); 0 when unknown.
  virtual double LinkBytesPerSecond(const std::string& client) const = 0;
  // The model guard's verdict on `candidate` as the round's new model (model_guard.h);
  // a refusal is logged and counted (fedlgc_guard_refusals_total{check}).
  virtual absl::StatusOr<GuardVerdict> CheckModel(std::span<const float> candidate) = 0;
  // Bars `clients` from the rest of the job (engine, checkpoint, log, metrics).
  virtual void Quarantine(const std::set<std::string>& clients, const std::string& why) = 0;
  // The global model as clients hold it at the current version: the engine's model, or
  // under a compressed downlink (downlink.h) the one its deltas rebuild. A mode whose
  // clients send something relative to the model they downloaded (SGP's reference) adds
  // this back, not the engine's.
  virtual std::vector<float> ServedModel() const = 0;
  // The time a driver's decisions read (half of a round gone, a leader late or gone):
  // the coordinator's clock (CoordinatorOptions::clock); a test's host moves a fake one
  // instead of sleeping.
  virtual Clock::time_point Now() const = 0;
};

// What a round commits under the model guard (ChooseUnderGuard).
struct GuardedChoice {
  std::vector<float> model;        // the candidate that passed; empty: none did
  std::set<std::string> excluded;  // suspects left out for it to pass
  GuardVerdict first;              // the verdict on the round's full candidate
  GuardVerdict last;               // on the one chosen (or the last tried)
};
// The model the round would commit without the clients in `excluded`.
using CandidateFn =
    std::function<absl::StatusOr<std::vector<float>>(const std::set<std::string>& excluded)>;
// Tries the round's candidate with nobody excluded, then without the first 1, 2, ...,
// `max_excluded` of `suspects` (largest update norm first), and returns the first that
// passes the guard. The caller quarantines `excluded` and commits `model`, or commits
// nothing when no candidate passed. Reports the verdicts in *report ("guard", "guard_step",
// "guard_growth",
// "guard_loss", "guard_excluded").
absl::StatusOr<GuardedChoice> ChooseUnderGuard(RoundHost& host,
                                               const std::vector<std::string>& suspects,
                                               size_t max_excluded, const CandidateFn& candidate,
                                               RoundReport* report);
// Clients by norm, largest first (ties: by id).
std::vector<std::string> ByNormDescending(const std::map<std::string, double>& norms);
// Quarantines `choice.excluded` for `round` with the first verdict's reason.
void QuarantineExcluded(RoundHost& host, uint64_t round, const GuardedChoice& choice);

// What the factory gives a driver to start from.
struct DriverEnv {
  uint64_t dim = 0;
  std::vector<float> initial_model;  // the job's initial model (from its init seed)
  std::string state_dir;             // where Save writes, beside the checkpoint
  uint64_t committed_round = 0;      // the checkpoint's round: Load its state when > 0
  const RoundPlan* plan = nullptr;   // the job's codecs and local training
  codecs::ModelLayout layout;        // the model's (per-tensor codecs need it)
  uint64_t init_seed = 1;
  AggregatorOptions robust;  // clipping and the aggregator (--aggregator)
  double fraction = 1;       // --fraction: the share of connected clients a round asks
  bool codec_ladder = false;  // --codec-ladder: each client may send with a codec of its own
  uint64_t rounds = 0;       // --rounds
  // The process's metrics, where a mode registers its own series when it is made (the
  // host's metrics() later); nullptr in tools that make a driver only to read its state.
  monitoring::Metrics* metrics = nullptr;
};

// Thread-safety: RunRound runs on the round loop's thread; DecorateRoundStart, Blob,
// AcceptReport and ObserveChunk run on gRPC threads, concurrently with it.
class RoundDriver {
 public:
  virtual ~RoundDriver() = default;

  virtual Mode mode() const = 0;
  // Changes what the engine asks of clients (LSGD: local steps of one period). Called
  // once, before the engine is built.
  virtual void AdjustPlan(RoundPlan* /*plan*/) const {}

  // Runs one round from opening to commit over `participants`, closing at `deadline`:
  // opens it through host.StartRound, waits, aggregates, and commits through the engine
  // into *commit. Fills *report with the mode's figures (RoundReport::figures, labels)
  // and hit_deadline. Returns OK with nothing committed when host.stopped().
  virtual absl::Status RunRound(RoundHost& host, const std::vector<std::string>& participants,
                                Clock::time_point deadline, CommitResult* commit,
                                RoundReport* report) = 0;

  // Sets the mode's parameters (the `mode` oneof) of a participant's RoundStart.
  virtual void DecorateRoundStart(const std::string& client, protos::RoundStart* start) = 0;
  // A blob other than the global model, by name, for `client`: NOT_FOUND when this mode
  // does not serve it now; INVALID_ARGUMENT for a name it never serves.
  virtual absl::StatusOr<std::shared_ptr<const ModelBlob>> Blob(const std::string& client,
                                                                const std::string& name,
                                                                uint64_t version);
  // Whether blob `name` is a model clients keep (float32, dim values) that a compressed
  // downlink sends as deltas from the version a client holds (downlink.h): LSGD's group
  // references. The global model always is.
  virtual bool Broadcasts(const std::string& /*name*/) const { return false; }
  // A participant's progress report; refused (FAILED_PRECONDITION) unless the mode
  // takes reports.
  virtual absl::Status AcceptReport(const std::string& client,
                                    const protos::ProgressReport& report);
  // A chunk of `client` arrived, before the engine takes it (SGP: the mail its sender
  // has added).
  virtual void ObserveChunk(const std::string& /*client*/, const ChunkIn& /*chunk*/) {}

  // Writes what survives a restart beside the checkpoint of `round` (before it).
  virtual absl::Status Save(uint64_t round) = 0;

  // Buffered rounds (a rolling round, round_engine.h): how many superseded model versions
  // clients asked from them may still download; 0 for a mode whose rounds close. Asked
  // once, before the engine is built.
  virtual size_t KeepVersions() const { return 0; }
  // Why the job must end before its next round, or nullopt (a DP job whose next round
  // would spend more privacy than it may). Asked by the round loop before each round; the
  // job then ends as if its rounds were done.
  virtual std::optional<std::string> Exhausted() const { return std::nullopt; }
  // Whether clients may send the statistics phase (statistics_phase.h) their data's
  // per-channel means and variances in the clear between rounds: not where updates are
  // private (DP, secure aggregation) or rounds never close (buffered). --bn-stats auto
  // runs the phase only where this holds (an explicit "on" there is refused earlier,
  // modes::CheckEvaluation).
  virtual bool AllowsClientStatistics() const { return true; }
};

// Makes the job's driver; modes::MakeRoundDriver is the one fedlgc-coordinator uses.
using DriverFactory =
    std::function<absl::StatusOr<std::unique_ptr<RoundDriver>>(const DriverEnv& env)>;

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_ROUND_DRIVER_H_
