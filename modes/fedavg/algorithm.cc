// --algorithm (see algorithm.h).
#include "modes/fedavg/algorithm.h"

#include "base/spec.h"
#include "base/str.h"
#include "codecs/params.h"

namespace fedlgc::modes {

absl::StatusOr<Algorithm> Algorithm::Parse(const std::string& text) {
  Algorithm a;
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        StrCat("--algorithm '", text, "': ", why, " (expected fedavg or fedprox(mu=M))"));
  };
  auto node = ParseSpec(text.empty() ? "fedavg" : text);
  if (!node.ok()) return bad(std::string(node.status().message()));
  if (node->name == "fedavg") {
    if (!node->args.empty()) return bad("fedavg takes no parameters");
    return a;
  }
  if (node->name == "fedprox") {
    a.kind = Kind::kFedProx;
    codecs::ParamReader r(*node, {"mu"});
    if (!r.status().ok()) return bad(std::string(r.status().message()));
    auto mu = r.Real("mu", a.mu, 1e-12, 1000);
    if (!mu.ok()) return bad(std::string(mu.status().message()));
    a.mu = *mu;
    return a;
  }
  return bad(StrCat("unknown algorithm '", node->name, "'"));
}

std::string Algorithm::ToString() const {
  return kind == Kind::kFedProx ? StrCat("fedprox(mu=", FormatSpecNumber(mu), ")") : "fedavg";
}

}  // namespace fedlgc::modes
