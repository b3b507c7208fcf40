// --rounds-mode buffered(...) as a round protocol (buffered_rounds.h): one rolling round
// that commits every k updates, each weighed by its staleness. Every update is decoded
// with the job's one codec, whatever round it was asked in: no warm-up, and no codec whose
// rounds differ.
#include "base/str.h"
#include "modes/fedavg/buffered_rounds.h"
#include "modes/fedavg/round_protocol.h"

namespace fedlgc::modes {
namespace {

class Buffered final : public RoundProtocol {
 public:
  explicit Buffered(const BufferedOptions& options) : rounds_(options) {}
  ProtocolId id() const override { return ProtocolId::kBuffered; }

  bool RunsRound(const RoundContext& /*round*/) const override { return true; }
  absl::Status RunRound(RoundContext& round) override {
    return rounds_.RunRound(round.host, round.participants, round.deadline, round.optimizer,
                            round.robust, round.commit, round.report);
  }
  size_t KeepVersions() const override { return rounds_.options().MaxStaleness(); }
  bool AllowsClientStatistics() const override { return false; }

 private:
  BufferedRounds rounds_;
};

absl::Status CheckBufferedJob(const ProtocolJob& job) {
  if (!job.buffered || job.plan() == nullptr || job.plan()->warmup_codecs.empty()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      StrCat("--rounds-mode buffered(...) decodes every update with the job's one codec: it "
             "takes no --codec-warmup (",
             job.plan()->warmup_codecs.front(), ")"));
}

constexpr std::string_view kOneCodec =
    "a rolling round decodes every update with the job's one codec, whatever round it was "
    "asked in, and this codec's rounds differ";

}  // namespace

const ProtocolEntry& BufferedProtocol() {
  static const ProtocolEntry kEntry{
      .id = ProtocolId::kBuffered,
      .name = "--rounds-mode buffered(...)",
      .wanted = [](const ProtocolJob& job) { return job.buffered.has_value(); },
      .check = &CheckBufferedJob,
      .conflicts = {{ProtocolId::kRoundSeed, kOneCodec},
                    {ProtocolId::kBasis, kOneCodec},
                    {ProtocolId::kSharedScale, kOneCodec},
                    {ProtocolId::kTwoPhase, kOneCodec}},
      .make = [](const ProtocolJob& job) -> absl::StatusOr<std::unique_ptr<RoundProtocol>> {
        return std::make_unique<Buffered>(*job.buffered);
      },
  };
  return kEntry;
}

}  // namespace fedlgc::modes
