// LGC job specs (see lgc_plan.h).
#include "modes/lgc/lgc_plan.h"

#include <cmath>

#include "base/spec.h"
#include "base/str.h"
#include "codecs/dense_codec.h"
#include "codecs/params.h"
#include "codecs/registry.h"

namespace fedlgc::lgc {

uint64_t LgcPlan::SupportSize(uint64_t dim) const {
  return std::min<uint64_t>(dim, std::max<uint64_t>(1, std::ceil(ratio * dim)));
}

uint64_t LgcPlan::SupportSizeAt(uint64_t dim, uint64_t lgc_round) const {
  if (lgc_round == 0 || lgc_round > ramp) return SupportSize(dim);
  const double r = std::min(1.0, ratio * std::ldexp(1.0, static_cast<int>(ramp - lgc_round + 1)));
  return std::min<uint64_t>(dim, std::max<uint64_t>(1, std::ceil(r * dim)));
}

uint64_t LgcPlan::InnovationSize(uint64_t support) const {
  return std::min<uint64_t>(support, std::max<uint64_t>(1, std::ceil(innovation * support)));
}

absl::StatusOr<std::optional<LgcPlan>> ParseLgcSpec(std::string_view spec) {
  auto node = ParseSpec(spec);
  if (!node.ok()) return node.status();
  if (node->name != "lgc") return std::optional<LgcPlan>();
  codecs::ParamReader params(
      *node, {"ratio", "bits", "ramp", "entropy", "zstd", "train", "ae_steps", "ae_optimizer", "ae_lr",
              "latent", "innovation", "ae_wait", "predict", "code", "echo"});
  if (!params.status().ok()) return params.status();
  LgcPlan p;
  auto ratio = params.Real("ratio", p.ratio, 1e-6, 1.0);
  auto bits = params.Int("bits", p.bits, 1, 4);
  auto ramp = params.Int("ramp", 0, 0, 20);
  auto entropy = params.Int("entropy", 1, 0, 1);
  auto zstd = params.Int("zstd", 1, 0, 1);
  auto train = params.Int("train", p.train_rounds, 0, 100000);
  auto steps = params.Int("ae_steps", p.ae_steps, 1, 10000);
  auto opt = params.Word("ae_optimizer", p.ae_optimizer, {"adam", "sgd"});
  auto lr = params.Real("ae_lr", p.ae_lr, 1e-9, 10.0);
  auto innovation = params.Real("innovation", p.innovation, 0.0, 1.0);
  auto wait = params.Int("ae_wait", 0, 0, 1);
  // Keys of the protocols LGC had before it had one (docs/results.md keeps their runs):
  // asking for a removed one is refused, naming what is now the only protocol is accepted.
  // (A spec that relied on the old defaults, predict=0 and code=fp32, runs this protocol.)
  auto predict = params.Int("predict", 1, 0, 1);
  auto code = params.Word("code", "cells", {"fp32", "cells"});
  auto echo = params.Int("echo", 0, 0, 1);
  auto latent = params.Node("latent");
  for (const absl::Status& st :
       {ratio.status(), bits.status(), ramp.status(), entropy.status(), zstd.status(), train.status(), steps.status(),
        opt.status(), lr.status(), innovation.status(), wait.status(), predict.status(), code.status(),
        echo.status(), latent.status()}) {
    if (!st.ok()) return st;
  }
  if (*predict == 0 || *code == "fp32" || *echo == 1) {
    return absl::InvalidArgumentError(
        "lgc: predict=0, code=fp32 and echo=1 were removed: LGC has one protocol now, the "
        "two-phase rounds in the compact codes (docs/lgc.md)");
  }
  if (*bits == 3) return absl::InvalidArgumentError("lgc: bits must be 1, 2 or 4");
  if (*train > 0 && *ramp >= *train) {
    return absl::InvalidArgumentError(
        "lgc: the ramp must end before the autoencoder's training does (ramp < train): it "
        "trains on rounds of the plan's support only");
  }
  p.ratio = *ratio;
  p.bits = static_cast<int>(*bits);
  p.ramp = static_cast<uint32_t>(*ramp);
  p.entropy = *entropy == 1;
  p.zstd = *zstd == 1;
  p.train_rounds = static_cast<uint32_t>(*train);
  p.ae_steps = static_cast<uint32_t>(*steps);
  p.ae_optimizer = *opt;
  p.ae_lr = *lr;
  p.innovation = *innovation;
  p.ae_wait = *wait == 1;
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

}  // namespace fedlgc::lgc
