// --secagg as a round protocol (secagg_rounds.h): it runs every round itself, on
// integer codes of a grid the round shares, which the coordinator only ever sums.
// Clipping moves to the clients, so nothing at the coordinator may clip, weigh or pick
// among updates; a randk(..., seed=round) code draws its kept set from the round's own
// rotation seed, so it needs no round seed of its own.
#include "base/log.h"
#include "base/str.h"
#include "modes/fedavg/round_protocol.h"
#include "modes/fedavg/secagg_rounds.h"

namespace fedlgc::modes {
namespace {

class SecAgg final : public RoundProtocol {
 public:
  explicit SecAgg(std::unique_ptr<SecAggRounds> rounds) : rounds_(std::move(rounds)) {}
  ProtocolId id() const override { return ProtocolId::kSecAgg; }
  bool AllowsClientStatistics() const override { return false; }

  bool RunsRound(const RoundContext& /*round*/) const override { return true; }
  absl::Status RunRound(RoundContext& round) override {
    if (round.noise) rounds_->UseNoise(round.noise->variance, round.noise->on_sum);
    return rounds_->RunRound(round.host, round.participants, round.deadline, round.optimizer,
                             round.commit, round.report);
  }

  void DecorateRoundStart(const std::string& client, protos::RoundStart* start) override {
    rounds_->Decorate(client, start);
  }
  std::optional<absl::Status> AcceptReport(const std::string& client,
                                           const protos::ProgressReport& report) override {
    return rounds_->Accept(client, report);
  }

 private:
  const std::unique_ptr<SecAggRounds> rounds_;
};

// What secure aggregation asks of the job besides other protocols.
absl::Status CheckSecAggJob(const ProtocolJob& job) {
  if (!job.secagg) return absl::OkStatus();
  const coordinator::DriverEnv& env = *job.env;
  const char* why = nullptr;
  if (env.robust.kind != coordinator::AggregatorKind::kMean) {
    why = "a robust or streaming --aggregator (the coordinator sees only the sum: nothing to "
          "clip, trim or pick)";
  } else if (env.codec_ladder) {
    why = "--codec-ladder (codes of one grid for everyone, or they do not add up)";
  } else if (env.plan != nullptr && !env.plan->warmup_codecs.empty()) {
    why = "--codec-warmup";
  }
  if (why != nullptr) return absl::InvalidArgumentError(StrCat("--secagg does not run with ", why));
  if (env.plan != nullptr) return job.codec.sum_levels.status();
  return absl::OkStatus();
}

constexpr std::string_view kNotOnTheGrid =
    "its codes are not integers on a grid the round shares (give qsgd(bits=B), terngrad(...) "
    "or randk(..., values=one of them, seed=...))";

}  // namespace

const ProtocolEntry& SecAggProtocol() {
  static const ProtocolEntry kEntry{
      .id = ProtocolId::kSecAgg,
      .name = "--secagg",
      .wanted = [](const ProtocolJob& job) { return job.secagg.has_value(); },
      .check = &CheckSecAggJob,
      .conflicts = {{ProtocolId::kBuffered, "a masked sum is unmasked once, over one round's inputs"},
                    {ProtocolId::kSharedScale,
                     "its rounds share secure aggregation's own grid; give terngrad(...) without "
                     "shared=1"},
                    {ProtocolId::kBasis, kNotOnTheGrid},
                    {ProtocolId::kTwoPhase, kNotOnTheGrid}},
      .absorbs = {ProtocolId::kRoundSeed},
      .make = [](const ProtocolJob& job) -> absl::StatusOr<std::unique_ptr<RoundProtocol>> {
        const coordinator::DriverEnv& env = *job.env;
        auto rounds =
            SecAggRounds::Create(*job.secagg, env.plan != nullptr ? env.plan->codec : "", env.dim);
        if (!rounds.ok()) return rounds.status();
        log::Info("coordinator",
                  "--secagg: clients cut their updates to norm %g and mask their codes%s; "
                  "--clip-multiplier does not apply",
                  job.secagg->clip, job.secagg->masks ? "" : " (masks=0: unmasked)");
        return std::make_unique<SecAgg>(*std::move(rounds));
      },
  };
  return kEntry;
}

}  // namespace fedlgc::modes
