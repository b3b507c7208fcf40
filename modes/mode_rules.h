// Codec rules that more than one mode applies in its ModeTraits::check_codecs
// (coordinator/mode_traits.h): the FedAvg driver's round protocols, which only a FedAvg
// job runs, and codecs that keep sender state, which modes that account for a codec's
// loss themselves refuse.
#ifndef FEDLGC_MODES_MODE_RULES_H_
#define FEDLGC_MODES_MODE_RULES_H_

#include "absl/status/status.h"
#include "codecs/layout.h"
#include "coordinator/round_engine.h"
#include "core/protocol.h"

namespace fedlgc::modes {

// Refuses, for a job of `mode`, the codecs whose rounds the FedAvg driver runs:
// two-phase PowerSGD, GradiVeQ (its bases), TernGrad's shared scale, and rand-k drawn
// from the round's seed (in the job codec or a warm-up codec).
absl::Status RefuseFedAvgRoundProtocols(const coordinator::RoundPlan& plan, Mode mode);

// Builds the job codec with `layout` and refuses it, for a job of `mode`, when it keeps
// sender state (a residual): LSGD and SGP account for what a codec loses in their own
// protocol, so a codec's residual would count it twice.
absl::Status RefuseStatefulCodecs(const coordinator::RoundPlan& plan,
                                  const codecs::ModelLayout& layout, Mode mode);

// Both of the above: the codec rules of a mode with a protocol of its own that accounts for
// what a codec loses (LSGD, SGP).
absl::Status CheckOwnProtocolCodecs(const coordinator::RoundPlan& plan,
                                    const codecs::ModelLayout& layout, Mode mode);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_MODE_RULES_H_
