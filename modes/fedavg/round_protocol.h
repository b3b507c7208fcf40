// The seam of FedAvg's round protocols at the coordinator (docs/adding-a-protocol.md):
// what makes a round of a FedAvg job differ from the plain summed round (RunSummedRound
// in fedavg_driver.h). A codec's round needs (codecs/round_kind.h: a round seed, a shared
// scale, served bases, two phases) and the job's own options (--dp, --secagg,
// --rounds-mode buffered(...)) each have a RoundProtocol. Each lives in a file of its own
// with its ProtocolEntry (what it is, when a job wants it, its checks, what it does not
// run with or needs, and how it is made); round_protocols.cc holds the table the driver
// assembles a job's protocols from.
//
// A round, as FedAvgDriver::RunRound runs it over the job's protocols in table order:
//   1. BeginRound of each (set the round's codec, the code a summed round sums, ticks,
//      a narrower sample of participants);
//   2. the first protocol whose RunsRound holds runs the round from opening to commit
//      (RunRound); when none does, the plain summed round runs;
//   3. EndRound of each that began, in reverse order, with the round's status.
//
// Thread-safety, as RoundDriver's (coordinator/round_driver.h): BeginRound, RunsRound,
// RunRound, EndRound, Save, KeepVersions and Exhausted run on the round loop's thread;
// DecorateRoundStart, AcceptReport, Blob and Broadcasts on gRPC threads, concurrently with
// them.
#ifndef FEDLGC_MODES_FEDAVG_ROUND_PROTOCOL_H_
#define FEDLGC_MODES_FEDAVG_ROUND_PROTOCOL_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "codecs/round_kind.h"
#include "coordinator/round_driver.h"
#include "modes/fedavg/algorithm.h"
#include "modes/fedavg/buffered_rounds.h"
#include "modes/fedavg/dp_rounds.h"
#include "modes/fedavg/secagg_rounds.h"

namespace fedlgc::modes {

struct FedAvgOptions;
struct SummedRoundState;

// FedAvg's round protocols, in the order a round consults them (the table's order).
enum class ProtocolId : uint8_t {
  kRoundSeed,    // randk(seed=round): the round names the seed of its kept set
  kBasis,        // gradiveq(...): bases fitted, served and saved (gradiveq_bases.h)
  kSharedScale,  // terngrad(shared=1): the participants agree on a scale first
  kTwoPhase,     // powersgd(..., phases=2): P summed, then Q (powersgd_rounds.h)
  kDp,           // --dp: DP-FedAvg (dp_rounds.h)
  kSecAgg,       // --secagg: secure aggregation of integer codes (secagg_rounds.h)
  kBuffered,     // --rounds-mode buffered(...): rolling rounds (buffered_rounds.h)
  kFedProx,      // --algorithm fedprox(mu=M): the clients' proximal term (algorithm.h)
  kScaffold,     // --algorithm scaffold: control variates, a second part (scaffold_rounds.h)
};

// What a job asks of FedAvg, read once from its options and codecs: what the table's
// entries decide from and are made from.
struct ProtocolJob {
  const FedAvgOptions* options = nullptr;
  const coordinator::DriverEnv* env = nullptr;
  codecs::RoundKind codec;         // the job codec's (empty without a plan)
  bool warmup_round_seed = false;  // a --codec-warmup codec names seed=round
  std::optional<BufferedOptions> buffered;
  std::optional<DpOptions> dp;
  std::optional<SecAggOptions> secagg;
  Algorithm algorithm;

  // Parses the options (INVALID_ARGUMENT says what is wrong in which).
  static absl::StatusOr<ProtocolJob> Read(const FedAvgOptions& options,
                                          const coordinator::DriverEnv& env);
  const coordinator::RoundPlan* plan() const { return env->plan; }
};

// Distributed DP's noise in a secure round: the variance the clients' noise must sum to,
// and what the round charges once its noised sum is unmasked (DP sets it, secure
// aggregation uses it).
struct SumNoise {
  double variance = 0;
  std::function<void(size_t inputs, size_t asked)> on_sum;
};

// One round as the driver runs it, handed from protocol to protocol.
struct RoundContext {
  coordinator::RoundHost& host;
  std::vector<std::string> participants;  // a protocol may narrow them (DP's sample)
  coordinator::Clock::time_point deadline;
  coordinator::CommitResult* commit;
  RoundReport* report;
  const coordinator::ServerOptimizer& optimizer;
  const coordinator::AggregatorOptions& robust;
  uint64_t round = 0;
  // Whether the round's codec is the job codec (false in a --codec-warmup round).
  bool job_codec = true;
  // The summed round's state: the code it sums without decoding, the clip bound it
  // carries to the next round.
  SummedRoundState* summed = nullptr;
  // Run while the summed round waits (RoundHost::WaitUntil's tick).
  std::vector<std::function<void()>> ticks;
  // The ticks as RunSummedRound's one `tick` (null when there are none); valid while the
  // round runs.
  std::function<void()> Tick() const {
    if (ticks.empty()) return nullptr;
    return [this] {
      for (const auto& t : ticks) t();
    };
  }
  std::optional<SumNoise> noise;
};

class RoundProtocol {
 public:
  virtual ~RoundProtocol() = default;
  virtual ProtocolId id() const = 0;

  virtual absl::Status BeginRound(RoundContext& /*round*/) { return absl::OkStatus(); }
  // Whether this protocol runs `round` itself (RunRound).
  virtual bool RunsRound(const RoundContext& /*round*/) const { return false; }
  // From opening to commit, as RoundDriver::RunRound.
  virtual absl::Status RunRound(RoundContext& /*round*/) {
    return absl::InternalError("this round protocol runs no rounds");
  }
  // After the round (`ran`: how it went); returns what the round returns.
  virtual absl::Status EndRound(RoundContext& /*round*/, absl::Status ran) { return ran; }

  // As RoundDriver's: what survives a restart, superseded versions kept, why the job
  // must end.
  virtual absl::Status Save(uint64_t /*round*/) { return absl::OkStatus(); }
  virtual size_t KeepVersions() const { return 0; }
  virtual std::optional<std::string> Exhausted() const { return std::nullopt; }
  // As RoundDriver::AllowsClientStatistics: false where it keeps the clients' data private
  // or never closes a round.
  virtual bool AllowsClientStatistics() const { return true; }

  // What it adds to a participant's RoundStart.
  virtual void DecorateRoundStart(const std::string& /*client*/, protos::RoundStart* /*start*/) {}
  // A participant's report: nullopt when it is not this protocol's to take.
  virtual std::optional<absl::Status> AcceptReport(const std::string& /*client*/,
                                                   const protos::ProgressReport& /*report*/) {
    return std::nullopt;
  }
  // A blob it serves: nullopt for a name that is not its own.
  virtual std::optional<absl::StatusOr<std::shared_ptr<const coordinator::ModelBlob>>> Blob(
      const std::string& /*client*/, const std::string& /*name*/, uint64_t /*version*/) {
    return std::nullopt;
  }
  // Whether a blob of its own is a model-sized float32 vector that a compressed downlink
  // sends as deltas from the version a client holds (RoundDriver::Broadcasts: SCAFFOLD's
  // control variate).
  virtual bool Broadcasts(const std::string& /*name*/) const { return false; }
};

// A rule between two protocols, declared by one of them. `when` (null: always) narrows
// it to some jobs (--dp gaussian(...) with --secagg, not skellam(...)).
struct ProtocolRule {
  ProtocolId other;
  std::string_view why;
  bool (*when)(const ProtocolJob& job) = nullptr;
};

struct ProtocolEntry {
  ProtocolId id;
  // As a user asks for it ("--dp", "terngrad(shared=1)").
  std::string_view name;
  // Whether the job runs it.
  bool (*wanted)(const ProtocolJob& job);
  // Its checks of the job beyond other protocols (its aggregator, its codec); run for
  // every FedAvg job, wanted or not (a DP checkpoint resumed without --dp).
  absl::Status (*check)(const ProtocolJob& job) = nullptr;
  // Protocols it does not run with; protocols it needs; protocols it stands in for
  // (they are not made: secure aggregation draws its kept set from its own seed).
  std::vector<ProtocolRule> conflicts;
  std::vector<ProtocolRule> needs;
  std::vector<ProtocolId> absorbs;
  absl::StatusOr<std::unique_ptr<RoundProtocol>> (*make)(const ProtocolJob& job);
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_ROUND_PROTOCOL_H_
