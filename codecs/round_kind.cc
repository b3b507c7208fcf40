// A spec's round kind, assembled from its codecs' registry entries (see round_kind.h).
#include "codecs/round_kind.h"

#include "base/spec.h"
#include "codecs/gradiveq.h"
#include "codecs/registry.h"
#include "codecs/sum_code.h"

namespace fedlgc::codecs {
namespace {

void Mark(bool needed, bool top, Placement* p) {
  if (!needed) return;
  if (*p != Placement::kTop) *p = top ? Placement::kTop : Placement::kNested;
}

// Adds the needs of `node` and of every codec below it.
void Walk(const Registry& registry, const SpecNode& node, bool top, RoundKind* kind) {
  const CodecEntry* entry = registry.Find(node.name);
  if (entry != nullptr && entry->round_needs != nullptr) {
    const RoundNeeds n = entry->round_needs(node);
    Mark(n.round_seed, top, &kind->round_seed);
    Mark(n.shared_scale, top, &kind->shared_scale);
    Mark(n.basis, top, &kind->basis);
    Mark(n.two_phase, top, &kind->two_phase);
  }
  for (const SpecArg& a : node.args) {
    if (a.node != nullptr) Walk(registry, *a.node, /*top=*/false, kind);
  }
}

}  // namespace

bool RoundKind::VariesByRound() const {
  return Present(round_seed) || Present(shared_scale) || Present(basis) || Present(two_phase);
}

std::string_view RoundKind::NeedName() const {
  if (Present(basis)) return "gradiveq";
  if (Present(two_phase)) return "powersgd(..., phases=2)";
  if (Present(shared_scale)) return "terngrad(shared=1)";
  if (Present(round_seed)) return "randk(seed=round)";
  return "";
}

absl::StatusOr<uint64_t> RoundKind::SumKept(uint64_t dim) const {
  return SumCode::KeptOf(spec, dim);
}

RoundKind RoundKindOf(std::string_view spec) {
  RoundKind kind;
  kind.spec = std::string(spec);
  kind.sum_levels = SumCode::LevelsOf(spec);
  auto node = ParseSpec(spec);
  if (!node.ok()) return kind;
  Walk(DefaultRegistry(), *node, /*top=*/true, &kind);
  // ef(gradiveq(...)) codes with the bases as gradiveq(...) does.
  if (Present(kind.basis)) kind.basis_named = GradiveqBasisOf(spec);
  return kind;
}

}  // namespace fedlgc::codecs
