// Codec rules shared by modes (see mode_rules.h).
#include "modes/mode_rules.h"

#include "base/str.h"
#include "codecs/registry.h"
#include "codecs/round_kind.h"

namespace fedlgc::modes {

absl::Status RefuseFedAvgRoundProtocols(const coordinator::RoundPlan& plan, Mode mode) {
  const codecs::RoundKind kind = codecs::RoundKindOf(plan.codec);
  if (codecs::Present(kind.two_phase)) {
    return absl::InvalidArgumentError(StrCat(
        "powersgd(..., phases=2) is a round protocol of --mode fedavg, not ", ModeName(mode)));
  }
  if (codecs::Present(kind.basis)) {
    return absl::InvalidArgumentError(
        StrCat("gradiveq(...) runs with --mode fedavg (its bases are fitted and served by the "
               "FedAvg coordinator), not ",
               ModeName(mode)));
  }
  if (codecs::Present(kind.shared_scale)) {
    return absl::InvalidArgumentError(
        StrCat("terngrad(shared=1) runs with --mode fedavg (its clients agree on each round's "
               "scale through the FedAvg coordinator), not ",
               ModeName(mode)));
  }
  bool seeded = codecs::Present(kind.round_seed);
  for (const std::string& spec : plan.warmup_codecs) {
    seeded |= codecs::Present(codecs::RoundKindOf(spec).round_seed);
  }
  if (seeded) {
    return absl::InvalidArgumentError(
        StrCat("randk(seed=round) runs with --mode fedavg (the FedAvg coordinator names each "
               "round's seed), not ",
               ModeName(mode)));
  }
  return absl::OkStatus();
}

absl::Status RefuseStatefulCodecs(const coordinator::RoundPlan& plan,
                                  const codecs::ModelLayout& layout, Mode mode) {
  auto c = codecs::MakeCodec(plan.codec, &layout);
  if (!c.ok()) return c.status();
  if ((*c)->traits().stateful) {
    return absl::InvalidArgumentError(
        StrCat((*c)->spec(), " keeps sender state (a residual); --mode ", ModeName(mode),
               " encodes with stateless codecs only (use it with --mode fedavg)"));
  }
  return absl::OkStatus();
}

absl::Status CheckOwnProtocolCodecs(const coordinator::RoundPlan& plan,
                                    const codecs::ModelLayout& layout, Mode mode) {
  if (absl::Status st = RefuseFedAvgRoundProtocols(plan, mode); !st.ok()) return st;
  return RefuseStatefulCodecs(plan, layout, mode);
}

}  // namespace fedlgc::modes
