// Optimizer specs (see optimizer.h).
#include "core/optimizer.h"

#include "base/spec.h"
#include "base/str.h"
#include "codecs/params.h"

namespace fedlgc::core {
namespace {

constexpr double kAdamLr = 0.001;

}  // namespace

absl::StatusOr<OptimizerSpec> OptimizerSpec::Parse(const std::string& text) {
  OptimizerSpec o;
  if (text.empty()) return o;
  auto node = ParseSpec(text);
  auto bad = [&](const absl::Status& st) {
    return absl::InvalidArgumentError(StrCat("--optimizer '", text, "': ", st.message()));
  };
  if (!node.ok()) return bad(node.status());
  if (node->name == "sgd") {
    codecs::ParamReader r(*node, {"lr", "momentum", "weight_decay", "nesterov"});
    if (!r.status().ok()) return bad(r.status());
    if (r.Has("lr")) {
      auto lr = r.Real("lr", 0, 1e-12, 1e3);
      if (!lr.ok()) return bad(lr.status());
      o.lr = *lr;
    }
    auto momentum = r.Real("momentum", 0.9, 0, 1);
    auto wd = r.Real("weight_decay", 0, 0, 1);
    auto nesterov = r.Flag("nesterov", false);
    for (const absl::Status& st : {momentum.status(), wd.status(), nesterov.status()}) {
      if (!st.ok()) return bad(st);
    }
    o.momentum = *momentum;
    o.weight_decay = *wd;
    o.nesterov = *nesterov;
    if (o.nesterov && o.momentum == 0) {
      return bad(absl::InvalidArgumentError("nesterov needs a momentum above 0"));
    }
    return o;
  }
  if (node->name == "adam") {
    o.kind = Kind::kAdam;
    codecs::ParamReader r(*node, {"lr", "beta1", "beta2", "eps", "weight_decay"});
    if (!r.status().ok()) return bad(r.status());
    auto lr = r.Real("lr", kAdamLr, 1e-12, 1e3);
    auto b1 = r.Real("beta1", 0.9, 0, 0.999999);
    auto b2 = r.Real("beta2", 0.999, 0, 0.999999999);
    auto eps = r.Real("eps", 1e-8, 1e-30, 1);
    auto wd = r.Real("weight_decay", 0, 0, 1);
    for (const absl::Status& st : {lr.status(), b1.status(), b2.status(), eps.status(), wd.status()}) {
      if (!st.ok()) return bad(st);
    }
    o.lr = *lr;
    o.beta1 = *b1;
    o.beta2 = *b2;
    o.eps = *eps;
    o.weight_decay = *wd;
    return o;
  }
  return absl::InvalidArgumentError(
      StrCat("--optimizer '", text, "': unknown optimizer '", node->name, "' (known: sgd, adam)"));
}

double OptimizerSpec::LearningRate(double round_lr) const {
  if (lr) return *lr;
  return kind == Kind::kAdam ? kAdamLr : round_lr;
}

std::string OptimizerSpec::ToString() const {
  std::string lr_text = lr ? StrCat("lr=", FormatSpecNumber(*lr), ",") : "";
  if (kind == Kind::kSgd) {
    return StrCat("sgd(", lr_text, "momentum=", FormatSpecNumber(momentum),
                  ",weight_decay=", FormatSpecNumber(weight_decay), ",nesterov=", nesterov ? 1 : 0,
                  ")");
  }
  return StrCat("adam(", lr_text, "beta1=", FormatSpecNumber(beta1), ",beta2=",
                FormatSpecNumber(beta2), ",eps=", FormatSpecNumber(eps), ",weight_decay=",
                FormatSpecNumber(weight_decay), ")");
}

}  // namespace fedlgc::core
