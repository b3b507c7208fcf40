// powersgd(..., phases=2) as a round protocol (powersgd_rounds.h): each round of the job
// codec sends P, sums it, and sends Q against the summed P; a --codec-warmup round runs
// as a summed round.
#include <string>

#include "codecs/round_kind.h"
#include "modes/fedavg/powersgd_rounds.h"
#include "modes/fedavg/round_protocol.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {
namespace {

class TwoPhase final : public RoundProtocol {
 public:
  TwoPhase(std::unique_ptr<PowerSgdRounds> rounds, std::string job_codec)
      : rounds_(std::move(rounds)),
        job_codec_(std::move(job_codec)),
        job_two_phase_(codecs::RoundKindOf(job_codec_).two_phase == codecs::Placement::kTop) {}
  ProtocolId id() const override { return ProtocolId::kTwoPhase; }

  bool RunsRound(const RoundContext& round) const override { return round.job_codec; }
  absl::Status RunRound(RoundContext& round) override {
    return rounds_->RunRound(round.host, round.participants, round.deadline, round.optimizer,
                             round.robust, round.commit, round.report);
  }
  absl::Status Save(uint64_t round) override { return rounds_->Save(round); }

  void DecorateRoundStart(const std::string& /*client*/, protos::RoundStart* start) override {
    // A warm-up round's start is a plain one. The job codec's kind is read once, not for
    // every participant of every round.
    const bool two_phase = start->codec() == job_codec_
                               ? job_two_phase_
                               : codecs::RoundKindOf(start->codec()).two_phase ==
                                     codecs::Placement::kTop;
    if (two_phase) {
      rounds_->Decorate(start);
    }
  }

 private:
  const std::unique_ptr<PowerSgdRounds> rounds_;
  const std::string job_codec_;
  const bool job_two_phase_;
};

}  // namespace

const ProtocolEntry& TwoPhaseProtocol() {
  static const ProtocolEntry kEntry{
      .id = ProtocolId::kTwoPhase,
      .name = "powersgd(..., phases=2)",
      .wanted = [](const ProtocolJob& job) { return codecs::Present(job.codec.two_phase); },
      .make = [](const ProtocolJob& job) -> absl::StatusOr<std::unique_ptr<RoundProtocol>> {
        const coordinator::DriverEnv& env = *job.env;
        auto rounds =
            PowerSgdRounds::Create(env.plan->codec, env.layout, env.state_dir, env.committed_round);
        if (!rounds.ok()) return rounds.status();
        return std::make_unique<TwoPhase>(*std::move(rounds), env.plan->codec);
      },
  };
  return kEntry;
}

}  // namespace fedlgc::modes
