// --algorithm scaffold as a round protocol (Karimireddy et al. 2020; scaffold_rounds.h):
// every participant's RoundStart names the version of the server control variate c
// (RoundStart.objective.scaffold), served as blob "scaffold-control" and, under
// --downlink-codec, compressed like the model (Broadcasts). The round is the plain summed
// round (RunSummedRound, with the job's aggregator, clipping and model guard) whose
// collector takes a second part, the clients' changes of their control variates; once it
// commits, c moves by the counted changes. The clients' half: scaffold_client.h.
#include "absl/strings/match.h"
#include "base/str.h"
#include "codecs/registry.h"
#include "codecs/residual_codec.h"
#include "coordinator/robust.h"
#include "modes/fedavg/fedavg_driver.h"
#include "modes/fedavg/fedavg_state.h"
#include "modes/fedavg/round_protocol.h"
#include "modes/fedavg/scaffold_rounds.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {
namespace {

class Scaffold final : public RoundProtocol {
 public:
  explicit Scaffold(std::unique_ptr<ScaffoldRounds> rounds) : rounds_(std::move(rounds)) {}
  ProtocolId id() const override { return ProtocolId::kScaffold; }

  absl::Status BeginRound(RoundContext& round) override {
    rounds_->BeginRound(round.host.engine());
    return absl::OkStatus();
  }
  // Every round: the summed round, of two parts.
  bool RunsRound(const RoundContext& /*round*/) const override { return true; }
  absl::Status RunRound(RoundContext& round) override {
    const CollectorWrap wrap = [this](std::shared_ptr<coordinator::Collector> model_part) {
      return rounds_->Wrap(std::move(model_part));
    };
    absl::Status st =
        RunSummedRound(round.host, round.participants, round.deadline, round.optimizer,
                       round.robust, round.summed, round.commit, round.report, round.Tick(), wrap);
    // Stopped (OK, nothing committed: commit->round is not this round's) or failed: the
    // changes are dropped; no receipt follows, and each client resends its update if this
    // round opens again, or puts it back into its residuals when another round starts.
    if (!st.ok() || round.commit->round != round.round) {
      rounds_->Drop();
      return st;
    }
    // A round whose candidates the guard refused committed the model as it was, counting
    // nothing (guarded_commit.h): no receipt counts a chunk, and c keeps its values under
    // the new version.
    return rounds_->Commit(*round.commit, round.host.engine(), round.report);
  }

  absl::Status Save(uint64_t round) override { return rounds_->Save(round); }

  // Runs on gRPC threads (ScaffoldRounds locks).
  void DecorateRoundStart(const std::string& /*client*/, protos::RoundStart* start) override {
    rounds_->Decorate(start);
  }
  bool Broadcasts(const std::string& name) const override { return name == kScaffoldControlBlob; }
  std::optional<absl::StatusOr<std::shared_ptr<const coordinator::ModelBlob>>> Blob(
      const std::string& /*client*/, const std::string& name, uint64_t version) override {
    if (name != kScaffoldControlBlob) return std::nullopt;
    return rounds_->Blob(version);
  }

 private:
  const std::unique_ptr<ScaffoldRounds> rounds_;
};

bool Wanted(const ProtocolJob& job) { return job.algorithm.kind == Algorithm::Kind::kScaffold; }

// A checkpoint of a SCAFFOLD job goes on only as one: without it the clients' control
// variates would stay as they are while c is forgotten (the dp_protocol.cc rule). The
// changes go through ef(...) of the round's codec, whose residual keeps what a frame did
// not carry; a codec that keeps a residual of its own (dgc(...): momentum in it) would not
// return the changes' mass.
absl::Status CheckScaffoldJob(const ProtocolJob& job) {
  const coordinator::DriverEnv& env = *job.env;
  if (!Wanted(job)) {
    if (env.committed_round > 0 &&
        !absl::IsNotFound(LoadScaffoldControl(env.state_dir, env.committed_round).status())) {
      return absl::FailedPreconditionError(
          StrCat("the checkpoint of round ", env.committed_round, " is a SCAFFOLD job's (",
                 ScaffoldControlPath(env.state_dir, env.committed_round),
                 "): restart it with --algorithm scaffold"));
    }
    return absl::OkStatus();
  }
  if (env.codec_ladder) {
    return absl::InvalidArgumentError(
        "--algorithm scaffold does not run with --codec-ladder: the ladder sizes each client's "
        "codec for one model-sized vector a round, and a SCAFFOLD update carries two");
  }
  if (env.robust.kind != coordinator::AggregatorKind::kMean &&
      env.robust.kind != coordinator::AggregatorKind::kStreaming) {
    return absl::InvalidArgumentError(
        "--algorithm scaffold runs with --aggregator mean or streaming: a robust aggregator "
        "bounds the model updates only, while the control variates' changes it would sum "
        "beside them stay unbounded");
  }
  if (env.plan == nullptr) return absl::OkStatus();
  std::vector<std::string> specs = env.plan->warmup_codecs;
  specs.push_back(env.plan->codec);
  for (const std::string& spec : specs) {
    auto codec = codecs::MakeCodec(spec, &env.layout);
    if (!codec.ok()) return codec.status();
    if (dynamic_cast<const codecs::ResidualCodec*>(codec->get()) != nullptr) {
      // ef(...) is what SCAFFOLD does itself, with the error kept whole; dgc and
      // single-phase powersgd keep a momentum-like residual a change cannot go through.
      const bool ef = absl::StartsWith(spec, "ef(");
      return absl::InvalidArgumentError(StrCat(
          "--algorithm scaffold sends each client's control variate change through the "
          "round's codec with error feedback of its own; \"",
          spec, "\"",
          ef ? " is error feedback already: give the codec inside ef(...), and both parts keep "
               "their error"
             : " keeps a residual of its own (momentum): give a codec without one"));
    }
  }
  return absl::OkStatus();
}

constexpr std::string_view kNotAPart =
    "its round is not a summed round that takes a second part (SCAFFOLD's control variates)";

}  // namespace

const ProtocolEntry& ScaffoldProtocol() {
  static const ProtocolEntry kEntry{
      .id = ProtocolId::kScaffold,
      .name = "--algorithm scaffold",
      .wanted = &Wanted,
      .check = &CheckScaffoldJob,
      .conflicts =
          {{ProtocolId::kBasis,
            "GradiVeQ's bases are fitted to the model's steps and its clients keep no error: "
            "what of a control variate's change falls outside them would be lost"},
           {ProtocolId::kSharedScale,
            "the round's decoder takes frames of the one scale agreed for the model update"},
           {ProtocolId::kTwoPhase, kNotAPart},
           {ProtocolId::kDp,
            "a control variate's change is a second image of a client's data that DP neither "
            "clips nor noises"},
           {ProtocolId::kSecAgg,
            "a control variate's change would travel unmasked beside the masked update"},
           {ProtocolId::kBuffered,
            "control variates move once per synchronous round, by that round's counted "
            "changes; a rolling round settles updates trained against older ones"}},
      .make = [](const ProtocolJob& job) -> absl::StatusOr<std::unique_ptr<RoundProtocol>> {
        const coordinator::DriverEnv& env = *job.env;
        auto rounds = ScaffoldRounds::Create(env.dim, env.state_dir, env.committed_round);
        if (!rounds.ok()) return rounds.status();
        return std::make_unique<Scaffold>(*std::move(rounds));
      },
  };
  return kEntry;
}

}  // namespace fedlgc::modes
