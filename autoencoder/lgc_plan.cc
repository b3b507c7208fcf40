// LGC job specs (see lgc_plan.h).
#include "autoencoder/lgc_plan.h"

#include <cmath>

#include "codecs/dense_codec.h"
#include "codecs/params.h"
#include "codecs/registry.h"
#include "codecs/spec.h"
#include "codecs/str.h"

namespace fedlgc::autoencoder {

uint64_t LgcPlan::SupportSize(uint64_t dim) const {
  return std::min<uint64_t>(dim, std::max<uint64_t>(1, std::ceil(ratio * dim)));
}

uint64_t LgcPlan::SupportSizeAt(uint64_t dim, uint64_t lgc_round) const {
  if (!cells || lgc_round == 0 || lgc_round > ramp) return SupportSize(dim);
  const double r = std::min(1.0, ratio * std::ldexp(1.0, static_cast<int>(ramp - lgc_round + 1)));
  return std::min<uint64_t>(dim, std::max<uint64_t>(1, std::ceil(r * dim)));
}

uint64_t LgcPlan::InnovationSize(uint64_t support) const {
  return std::min<uint64_t>(support, std::max<uint64_t>(1, std::ceil(innovation * support)));
}

absl::StatusOr<std::optional<LgcPlan>> ParseLgcSpec(std::string_view spec) {
  auto node = codecs::ParseSpec(spec);
  if (!node.ok()) return node.status();
  if (node->name != "lgc") return std::optional<LgcPlan>();
  codecs::ParamReader params(*node, {"ratio", "innovation", "latent", "train", "ae_steps",
                                     "ae_optimizer", "ae_lr", "echo", "predict", "code", "bits", "ramp"});
  if (!params.status().ok()) return params.status();
  LgcPlan p;
  auto ratio = params.Real("ratio", p.ratio, 1e-6, 1.0);
  auto innovation = params.Real("innovation", p.innovation, 0.0, 1.0);
  auto train = params.Int("train", p.train_rounds, 1, 100000);
  auto steps = params.Int("ae_steps", p.ae_steps, 1, 10000);
  auto opt = params.Word("ae_optimizer", p.ae_optimizer, {"adam", "sgd"});
  auto lr = params.Real("ae_lr", p.ae_lr, 1e-9, 10.0);
  auto echo = params.Int("echo", p.echo ? 1 : 0, 0, 1);
  auto predict = params.Int("predict", p.predict ? 1 : 0, 0, 1);
  auto code = params.Word("code", "fp32", {"fp32", "cells"});
  auto bits = params.Int("bits", p.bits, 1, 4);
  auto ramp = params.Int("ramp", 0, 0, 20);
  auto latent = params.Node("latent");
  for (const absl::Status& st :
       {ratio.status(), innovation.status(), train.status(), steps.status(), opt.status(),
        lr.status(), echo.status(), predict.status(), code.status(), bits.status(), ramp.status(),
        latent.status()}) {
    if (!st.ok()) return st;
  }
  p.ratio = *ratio;
  p.innovation = *innovation;
  p.train_rounds = static_cast<uint32_t>(*train);
  p.ae_steps = static_cast<uint32_t>(*steps);
  p.ae_optimizer = *opt;
  p.ae_lr = *lr;
  p.echo = *echo == 1;
  p.predict = *predict == 1;
  p.cells = *code == "cells";
  p.bits = static_cast<int>(*bits);
  p.ramp = static_cast<uint32_t>(*ramp);
  if (p.ramp > 0 && !p.cells) return absl::InvalidArgumentError("lgc: ramp needs code=cells");
  if (p.bits == 3) return absl::InvalidArgumentError("lgc: bits must be 1, 2 or 4");
  if (p.cells && !p.predict) {
    return absl::InvalidArgumentError("lgc: code=cells needs predict=1 (the leader's values are "
                                      "the followers' prediction)");
  }
  auto codec = *latent ? codecs::DefaultRegistry().Create(**latent)
                       : codecs::MakeCodec("qsgd(bits=8,bucket=64)");
  if (!codec.ok()) return codec.status();
  if (dynamic_cast<const codecs::DenseCodec*>(codec->get()) == nullptr) {
    return absl::InvalidArgumentError(
        StrCat("lgc: latent=", (*codec)->wire_spec(), " is not a dense codec"));
  }
  p.latent = (*codec)->wire_spec();
  return std::optional<LgcPlan>(p);
}

}  // namespace fedlgc::autoencoder
