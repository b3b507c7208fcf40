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
        StrCat("--algorithm '", text, "': ", why, " (expected fedavg, fedprox(mu=M) or scaffold)"));
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
  if (node->name == "scaffold") {
    // Option II with a server learning rate of 1 on c, as the paper's experiments and
    // Flower's niid_bench; the model's server lr is --server-lr's.
    if (!node->args.empty()) return bad("scaffold takes no parameters");
    a.kind = Kind::kScaffold;
    return a;
  }
  return bad(StrCat("unknown algorithm '", node->name, "'"));
}

std::string Algorithm::ToString() const {
  switch (kind) {
    case Kind::kFedProx:
      return StrCat("fedprox(mu=", FormatSpecNumber(mu), ")");
    case Kind::kScaffold:
      return "scaffold";
    case Kind::kFedAvg:
      break;
  }
  return "fedavg";
}

}  // namespace fedlgc::modes
