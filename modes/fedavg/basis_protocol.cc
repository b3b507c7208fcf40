// gradiveq(...) as a round protocol: the coordinator fits, serves and saves the bases
// its codes are coded against (gradiveq_bases.h). A fit round carries whole updates and a
// coded round their projections: each kind keeps its own clip bound, the median of the
// last round of its kind.
#include <utility>

#include "modes/fedavg/fedavg_driver.h"
#include "modes/fedavg/gradiveq_bases.h"
#include "modes/fedavg/round_protocol.h"

namespace fedlgc::modes {
namespace {

class Basis final : public RoundProtocol {
 public:
  explicit Basis(std::unique_ptr<GradiveqBases> bases) : bases_(std::move(bases)) {}
  ProtocolId id() const override { return ProtocolId::kBasis; }

  absl::Status BeginRound(RoundContext& round) override {
    coordinator::RoundEngine& engine = round.host.engine();
    round.summed->code = bases_->BeginRound(engine, round.round);
    fitting_ = bases_->fitting();
    if (fitting_) before_ = engine.ModelVector();
    std::swap(round.summed->next_bound, fitting_ ? fit_bound_ : coded_bound_);
    return absl::OkStatus();
  }

  absl::Status EndRound(RoundContext& round, absl::Status ran) override {
    std::swap(round.summed->next_bound, fitting_ ? fit_bound_ : coded_bound_);
    if (!ran.ok() || round.commit->round != round.round) return ran;  // nothing committed
    std::vector<float> step;
    if (fitting_) {
      step = round.host.engine().ModelVector();
      for (size_t i = 0; i < step.size(); ++i) step[i] -= before_[i];
    }
    before_.clear();
    return bases_->EndRound(round.round, step, round.report);
  }

  absl::Status Save(uint64_t round) override { return bases_->Save(round); }

  std::optional<absl::StatusOr<std::shared_ptr<const coordinator::ModelBlob>>> Blob(
      const std::string& /*client*/, const std::string& name, uint64_t version) override {
    if (name != codecs::kGradiveqBasisBlob) return std::nullopt;
    return bases_->Blob(version);
  }

 private:
  const std::unique_ptr<GradiveqBases> bases_;
  bool fitting_ = false;
  std::vector<float> before_;              // a fit round's model before it
  double fit_bound_ = 0, coded_bound_ = 0;  // each kind's streaming clip bound
};

constexpr std::string_view kOneJobCodec =
    "each is a protocol of the job codec itself, and a job has one";

}  // namespace

const ProtocolEntry& BasisProtocol() {
  static const ProtocolEntry kEntry{
      .id = ProtocolId::kBasis,
      .name = "gradiveq(...)",
      .wanted = [](const ProtocolJob& job) { return codecs::Present(job.codec.basis); },
      .conflicts = {{ProtocolId::kSharedScale, kOneJobCodec},
                    {ProtocolId::kTwoPhase, kOneJobCodec}},
      .make = [](const ProtocolJob& job) -> absl::StatusOr<std::unique_ptr<RoundProtocol>> {
        const coordinator::DriverEnv& env = *job.env;
        auto bases =
            GradiveqBases::Create(env.plan->codec, env.layout, env.state_dir, env.committed_round);
        if (!bases.ok()) return bases.status();
        return std::make_unique<Basis>(*std::move(bases));
      },
  };
  return kEntry;
}

}  // namespace fedlgc::modes
