// What a codec needs of the round it is sent in, beyond decoding its own frames. Each
// codec's registry entry declares its part from its own parsed spec node
// (CodecEntry::round_needs); RoundKindOf assembles a whole spec's from its tree. The
// round protocols that serve these needs are FedAvg's (modes/fedavg/round_protocol.h);
// nothing outside codecs/ reads a spec's text to find them.
#ifndef FEDLGC_CODECS_ROUND_KIND_H_
#define FEDLGC_CODECS_ROUND_KIND_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"

namespace fedlgc {
struct SpecNode;
}

namespace fedlgc::codecs {

// What one codec node needs of its round, as its registry entry declares it.
struct RoundNeeds {
  bool round_seed = false;    // draws its kept set from a seed each round names
  bool shared_scale = false;  // its senders agree on one scale before anyone encodes
  bool basis = false;         // codes against bases the job fits and serves
  bool two_phase = false;     // sends in two phases, each the reply to a summed first one
};
using RoundNeedsFn = RoundNeeds (*)(const SpecNode& node);

// Where in a spec the codec with a need sits: the spec's outermost codec, or inside one.
enum class Placement : uint8_t { kAbsent, kTop, kNested };

// A whole spec's needs. A spec that does not parse needs nothing (building it reports
// the error).
struct RoundKind {
  Placement round_seed = Placement::kAbsent;    // randk(seed=round)
  Placement shared_scale = Placement::kAbsent;  // terngrad(shared=1)
  Placement basis = Placement::kAbsent;         // gradiveq(...)
  Placement two_phase = Placement::kAbsent;     // powersgd(..., phases=2)
  // The served basis a gradiveq spec names (basis=v<version>h<hex>): (version, word).
  std::optional<std::pair<uint64_t, std::string>> basis_named;
  // The levels s of a code secure aggregation can sum (qsgd(bits=B) without elias,
  // terngrad(...), or randk(..., values=one of them, seed=...)), or why it cannot.
  absl::StatusOr<int> sum_levels = 0;

  // Whether frames of the spec decode differently from round to round (a round
  // protocol, or a seed each round names): a codec a client's own decoder, a warm-up,
  // a codec ladder, a buffered round or another mode cannot follow.
  bool VariesByRound() const;
  // The first need's name as a user writes it ("gradiveq", "powersgd(..., phases=2)",
  // "terngrad(shared=1)", "randk(seed=round)"); "" when none.
  std::string_view NeedName() const;
  // The coordinates a summed code keeps of `dim`: k for randk(...), else dim.
  absl::StatusOr<uint64_t> SumKept(uint64_t dim) const;

  std::string spec;  // what it was read from
};

RoundKind RoundKindOf(std::string_view spec);

inline bool Present(Placement p) { return p != Placement::kAbsent; }

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_ROUND_KIND_H_
