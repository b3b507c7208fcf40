// randk(seed=round) as a round protocol: each round whose codec draws its kept set from
// the round's seed names that seed in the round's spec (RoundEngine::SharedSeed) and
// decodes with the codec of that seed, whose codes add up; the next round's spec is the
// plan's again. It runs in the job codec's rounds and in --codec-warmup rounds alike.
#include "base/str.h"
#include "codecs/registry.h"
#include "codecs/sparse_codec.h"
#include "modes/fedavg/fedavg_driver.h"
#include "modes/fedavg/round_protocol.h"

namespace fedlgc::modes {
namespace {

class RoundSeed final : public RoundProtocol {
 public:
  explicit RoundSeed(codecs::ModelLayout layout) : layout_(std::move(layout)) {}
  ProtocolId id() const override { return ProtocolId::kRoundSeed; }

  absl::Status BeginRound(RoundContext& round) override {
    coordinator::RoundEngine& engine = round.host.engine();
    const std::string& plan_spec = engine.terms().plan().CodecFor(round.round);
    if (!codecs::Present(codecs::RoundKindOf(plan_spec).round_seed)) {
      if (seeded_) engine.terms().UseCodec("", nullptr);
      seeded_ = false;
      return absl::OkStatus();
    }
    auto plan_codec = codecs::MakeCodec(plan_spec, &layout_);  // canonical: `seed=round`
    if (!plan_codec.ok()) return plan_codec.status();
    auto sender = codecs::MakeCodec(
        codecs::WithRoundSeed((*plan_codec)->spec(), engine.terms().SharedSeed(round.round)), &layout_);
    if (!sender.ok()) return sender.status();
    auto decoder = codecs::MakeCodec((*sender)->wire_spec(), &layout_);
    if (!decoder.ok()) return decoder.status();
    std::shared_ptr<const codecs::Codec> shared = *std::move(decoder);
    engine.terms().UseCodec((*sender)->spec(), shared);
    seeded_ = true;
    if (shared->traits().summable) {
      round.summed->code = dynamic_cast<const codecs::LinearCode*>(shared.get());
    }
    held_ = std::move(shared);
    return absl::OkStatus();
  }

 private:
  const codecs::ModelLayout layout_;
  bool seeded_ = false;  // the last round named its seed (UseCodec in force)
  std::shared_ptr<const codecs::Codec> held_;  // the seeded decoder the summed code points into
};

}  // namespace

const ProtocolEntry& RoundSeedProtocol() {
  static const ProtocolEntry kEntry{
      .id = ProtocolId::kRoundSeed,
      .name = "randk(seed=round)",
      .wanted = [](const ProtocolJob& job) {
        return codecs::Present(job.codec.round_seed) || job.warmup_round_seed;
      },
      .conflicts = {{ProtocolId::kBasis,
                     "--codec-warmup randk(seed=round) cannot warm up a gradiveq job (its bases "
                     "name the rounds' codecs); warm up with another codec"}},
      .make = [](const ProtocolJob& job) -> absl::StatusOr<std::unique_ptr<RoundProtocol>> {
        return std::make_unique<RoundSeed>(job.env->layout);
      },
  };
  return kEntry;
}

}  // namespace fedlgc::modes
