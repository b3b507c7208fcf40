// terngrad(shared=1) as a round protocol (terngrad_rounds.h): in each round of the job
// codec the participants report the scale they would use, the round's is the largest,
// and the round's decoder takes only frames of that scale, whose codes it sums.
#include "modes/fedavg/fedavg_driver.h"
#include "modes/fedavg/round_protocol.h"
#include "modes/fedavg/terngrad_rounds.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {
namespace {

class SharedScale final : public RoundProtocol {
 public:
  explicit SharedScale(std::unique_ptr<TernGradRounds> rounds) : rounds_(std::move(rounds)) {}
  ProtocolId id() const override { return ProtocolId::kSharedScale; }

  absl::Status BeginRound(RoundContext& round) override {
    running_ = round.job_codec;
    if (!running_) return absl::OkStatus();
    auto decoder =
        rounds_->BeginRound(round.round, round.participants, round.host.Now(), round.deadline);
    if (!decoder.ok()) {
      running_ = false;
      return decoder.status();
    }
    round.host.engine().terms().UseCodec((*decoder)->spec(), *decoder);
    round.summed->code = decoder->get();
    decoder_ = *std::move(decoder);
    coordinator::RoundHost* host = &round.host;
    round.ticks.push_back([this, host] { rounds_->Tick(*host); });
    return absl::OkStatus();
  }

  absl::Status EndRound(RoundContext& round, absl::Status ran) override {
    if (!running_) return ran;
    round.host.engine().terms().UseCodec("", nullptr);
    rounds_->EndRound(round.report);
    decoder_.reset();
    running_ = false;
    return ran;
  }

  void DecorateRoundStart(const std::string& /*client*/, protos::RoundStart* start) override {
    rounds_->Decorate(start);
  }
  std::optional<absl::Status> AcceptReport(const std::string& client,
                                           const protos::ProgressReport& report) override {
    return rounds_->Accept(client, report);
  }

 private:
  const std::unique_ptr<TernGradRounds> rounds_;
  bool running_ = false;  // the round loop's: this round is a shared-scale one
  std::shared_ptr<codecs::TernGradRoundCodec> decoder_;
};

}  // namespace

const ProtocolEntry& SharedScaleProtocol() {
  static const ProtocolEntry kEntry{
      .id = ProtocolId::kSharedScale,
      .name = "terngrad(shared=1)",
      .wanted =
          [](const ProtocolJob& job) {
            return job.codec.shared_scale == codecs::Placement::kTop;
          },
      .conflicts = {{ProtocolId::kTwoPhase,
                     "each is a protocol of the job codec itself, and a job has one"}},
      .make = [](const ProtocolJob& job) -> absl::StatusOr<std::unique_ptr<RoundProtocol>> {
        auto rounds = TernGradRounds::Create(job.env->plan->codec, job.env->dim,
                                             job.env->robust.clip);
        if (!rounds.ok()) return rounds.status();
        return std::make_unique<SharedScale>(*std::move(rounds));
      },
  };
  return kEntry;
}

}  // namespace fedlgc::modes
