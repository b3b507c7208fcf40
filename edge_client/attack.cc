// Attacks for robustness experiments (see attack.h).
#include "edge_client/attack.h"

#include <random>

#include "base/spec.h"
#include "base/str.h"
#include "codecs/params.h"

namespace fedlgc::edge_client {

absl::StatusOr<Attack> Attack::Parse(std::string_view spec) {
  auto node = ParseSpec(spec);
  if (!node.ok()) return node.status();
  Attack a;
  if (node->name == "none") {
    codecs::ParamReader p(*node, {});
    if (!p.status().ok()) return p.status();
    return a;
  }
  if (node->name == "scale" || node->name == "signflip") {
    a.kind = node->name == "scale" ? Kind::kScale : Kind::kSignFlip;
    codecs::ParamReader p(*node, {"factor"});
    if (!p.status().ok()) return p.status();
    auto factor = p.Real("factor", a.kind == Kind::kScale ? 100 : 1, 0, 1e300);
    if (!factor.ok()) return factor.status();
    a.factor = *factor;
    return a;
  }
  if (node->name == "noise") {
    a.kind = Kind::kNoise;
    codecs::ParamReader p(*node, {"std"});
    if (!p.status().ok()) return p.status();
    auto std = p.Real("std", 1, 0, 1e300);
    if (!std.ok()) return std.status();
    a.std = *std;
    return a;
  }
  return absl::InvalidArgumentError(StrCat("unknown attack \"", node->name,
                                           "\": expected none, scale, signflip or noise"));
}

std::string Attack::Spec() const {
  switch (kind) {
    case Kind::kNone:
      return "none";
    case Kind::kScale:
      return StrCat("scale(factor=", FormatSpecNumber(factor), ")");
    case Kind::kSignFlip:
      return StrCat("signflip(factor=", FormatSpecNumber(factor), ")");
    case Kind::kNoise:
      return StrCat("noise(std=", FormatSpecNumber(std), ")");
  }
  return "none";
}

void Attack::Apply(std::span<const float> start, std::span<float> trained, uint64_t seed) const {
  if (kind == Kind::kNone) return;
  std::mt19937_64 rng(seed ^ 0xA77AC4ull);
  std::normal_distribution<double> gauss(0.0, std);
  for (size_t i = 0; i < trained.size() && i < start.size(); ++i) {
    const double d = double(trained[i]) - start[i];
    double changed = d;
    switch (kind) {
      case Kind::kScale:
        changed = factor * d;
        break;
      case Kind::kSignFlip:
        changed = -factor * d;
        break;
      case Kind::kNoise:
        changed = gauss(rng);
        break;
      case Kind::kNone:
        break;
    }
    trained[i] = static_cast<float>(start[i] + changed);
  }
}

}  // namespace fedlgc::edge_client
