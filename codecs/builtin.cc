// RegisterBuiltinCodecs: the table of codecs this library ships.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "base/status_macros.h"
#include "codecs/adacomp.h"
#include "codecs/adaptive_levels.h"
#include "codecs/dgc.h"
#include "codecs/error_feedback.h"
#include "codecs/float_codecs.h"
#include "codecs/gradiveq.h"
#include "codecs/level_quantizer.h"
#include "codecs/natural.h"
#include "codecs/powersgd.h"
#include "codecs/registry.h"
#include "codecs/sign.h"
#include "codecs/sparse_codec.h"
#include "codecs/terngrad.h"
#include "codecs/zstd_codec.h"

namespace fedlgc::codecs {
namespace {

// Adapts a factory that needs no registry.
template <typename F>
CodecFactory Leaf(F f) {
  return [f](const SpecNode& node, const CodecContext&) { return f(node); };
}

CodecFactory FloatFactory(FloatFormat format) {
  return [format](const SpecNode& node, const CodecContext&) {
    return FloatCodec::Create(format, node);
  };
}

// What a codec needs of its round (round_kind.h), read from its own spec node: a number
// argument `key` other than 0, or a word argument `key` equal to `word`.
bool NumberArg(const SpecNode& node, std::string_view key) {
  for (const SpecArg& a : node.args) {
    if (a.key == key && a.is_number && a.number != 0) return true;
  }
  return false;
}
bool WordArg(const SpecNode& node, std::string_view key, std::string_view word) {
  for (const SpecArg& a : node.args) {
    if (a.key == key && a.node != nullptr && a.node->IsWord() && a.node->name == word) return true;
  }
  return false;
}
// terngrad(shared=1): the participants agree on each round's scale first.
RoundNeeds SharedScale(const SpecNode& node) { return {.shared_scale = NumberArg(node, "shared")}; }
// randk(seed=round): the kept set is drawn from the seed each round names.
RoundNeeds RoundSeed(const SpecNode& node) {
  return {.round_seed = WordArg(node, "seed", "round")};
}
// powersgd(..., phases=2): P, summed, then Q against it.
RoundNeeds TwoPhases(const SpecNode& node) {
  bool two = false;
  for (const SpecArg& a : node.args) two |= a.key == "phases" && a.is_number && a.number == 2;
  return {.two_phase = two};
}
// gradiveq: codes against the bases the job fits and serves.
RoundNeeds Basis(const SpecNode&) { return {.basis = true}; }

// The dense codecs, one entry each: {name, wire version, summary, factory, examples
// [, needs_layout [, round_needs]]}. The examples are what the shared codec tests run (registry.h):
// small buckets and high ratios keep them meaningful on short vectors.
std::vector<CodecEntry> QuantizerEntries() {
  return {
      {"fp32", 1, "identity, 32 bits per coordinate", FloatFactory(FloatFormat::kFp32), {"fp32"}},
      {"fp16",
       1,
       "IEEE half precision, saturating, 16 bits",
       FloatFactory(FloatFormat::kFp16),
       {"fp16"}},
      {"bf16",
       1,
       "bfloat16, round to nearest even, 16 bits",
       FloatFactory(FloatFormat::kBf16),
       {"bf16"}},
      {"qsgd",
       1,
       "QSGD: stochastic uniform levels per bucket (bits|s, bucket, norm=l2|linf, elias)",
       Leaf(&LevelQuantizer::CreateQsgd),
       {"qsgd(bits=4)", "qsgd(bits=8,bucket=128)", "qsgd(bits=2,norm=linf,bucket=64)",
        "qsgd(bits=4,elias=1)", "qsgd(s=3,elias=1,bucket=256)", "qsgd(bits=8,elias=1,bucket=64)"}},
      {"nuqsgd",
       1,
       "NUQSGD: stochastic exponential levels p^j (bits|s, p, bucket, norm, elias)",
       Leaf(&LevelQuantizer::CreateNuqsgd),
       {"nuqsgd(bits=4)", "nuqsgd(s=6,p=0.3)", "nuqsgd(bits=3,bucket=64,norm=linf,elias=1)"}},
      {"alq",
       1,
       "ALQ: QSGD with levels fitted to the update by coordinate descent on the variance, sent "
       "in each frame (bits|s, bucket, norm, elias, sweeps, sample)",
       Leaf(&AdaptiveQuantizer::CreateAlq),
       {"alq(bits=3)", "alq(bits=3,bucket=64)", "alq(s=5,norm=linf,sweeps=5,sample=2048)"}},
      {"amq",
       1,
       "AMQ: QSGD with levels p^(s-j), p fitted to the update by gradient descent on the "
       "variance (bits|s, bucket, norm, elias, epochs, sample)",
       Leaf(&AdaptiveQuantizer::CreateAmq),
       {"amq(bits=4,bucket=128,elias=1)", "amq(bits=4,bucket=64,elias=1)",
        "amq(bits=3,norm=linf,epochs=5,sample=2048)"}},
      {"natdither",
       1,
       "natural dithering: levels 2^-j of the norm (s, bucket, norm)",
       Leaf(&LevelQuantizer::CreateNatDither),
       {"natdither(s=8,norm=linf)", "natdither(s=5,bucket=64,elias=1)", "natdither(s=4)"}},
      {"terngrad",
       1,
       "TernGrad: {-s,0,s} per bucket (bucket, clip, shared)",
       Leaf(&TernGrad::Create),
       // shared=1 needs the round's shared scale (EncodeOptions), which the suites lack.
       {"terngrad(bucket=256)", "terngrad(bucket=64,clip=0)"},
       /*needs_layout=*/false,
       &SharedScale},
      {"natural",
       1,
       "natural compression: random power of two, 9 bits",
       Leaf(&NaturalCompression::Create),
       {"natural"}},
      {"sign",
       1,
       "signSGD: 1 bit (+ l1 scale per bucket)",
       Leaf(&SignCodec::Create),
       {"sign", "sign(bucket=64)", "sign(scale=none,bucket=64)"}},
  };
}

// The sparsifiers, the matrix and basis codecs, and the stages around another codec.
std::vector<CodecEntry> SparseAndWrapperEntries() {
  return {
      {"topk",
       1,
       "top-k by magnitude (ratio|k, values, sampled, sample)",
       &SparseCodec::CreateTopK,
       {"topk(ratio=0.01)", "topk(ratio=0.1)", "topk(ratio=0.05,values=qsgd(bits=8,bucket=64))",
        "topk(k=300,values=natural,sampled=1)", "topk(ratio=0.2,values=fp16,sampled=1)",
        "topk(ratio=0.05,values=natdither(s=6,bucket=16))",
        "topk(ratio=0.1,values=alq(bits=3,bucket=8))"}},
      {"randk",
       1,
       "uniform random-k (ratio|k, values, scale)",
       &SparseCodec::CreateRandomK,
       {"randk(ratio=0.02,values=qsgd(bits=4,bucket=32))", "randk(k=50)",
        "randk(ratio=0.05,values=qsgd(bits=4,bucket=16),seed=99)",
        "randk(ratio=0.2,values=qsgd(bits=8,elias=1,bucket=16))",
        "randk(ratio=0.1,values=fp16,scale=0)"},
       /*needs_layout=*/false,
       &RoundSeed},
      {"adacomp",
       1,
       "AdaComp: per bin, what reaches the bin's largest |x|, as signs and a scale; use inside "
       "ef(...) (bin)",
       Leaf(&AdaComp::Create),
       {"adacomp(bin=50)", "adacomp(bin=7)"}},
      {"dgc",
       1,
       "Deep Gradient Compression: top-k with momentum correction, its own residual and a "
       "warm-up (ratio, momentum, clip, warmup, sample, values)",
       &Dgc::Create,
       {"dgc(ratio=0.1,warmup=0)", "dgc(ratio=0.05,values=qsgd(bits=4,bucket=8))",
        "dgc(ratio=0.01,momentum=0.9,clip=1,warmup=2)"}},
      {"powersgd",
       1,
       "PowerSGD: rank-r factors P, Q per matrix of the model, warm-started, with its own "
       "residual; needs the model's layout (rank, min_ratio, warm)",
       &PowerSgd::Create,
       // Not phases=2: a round protocol that makes no frames (powersgd_two_phase.h).
       {"powersgd(rank=2)", "powersgd(rank=1,min_ratio=1,warm=0,iters=2)"},
       /*needs_layout=*/true,
       &TwoPhases},
      {"gradiveq",
       1,
       "GradiVeQ: PCA codes of tensor slices, summable; bases fitted by the coordinator and "
       "served; use inside ef(...); needs the model's layout (dims, slice, refit)",
       &GradiVeQ::Create,
       // Without a fitted basis it sends fp32 rounds, which is what a suite can build.
       {"gradiveq(dims=3,slice=8)", "gradiveq(dims=2,slice=4,refit=5)"},
       /*needs_layout=*/true,
       &Basis},
      {"ef",
       1,
       "error feedback around a codec without its own residual: ef(codec)",
       &ErrorFeedback::Create,
       {"ef(topk(ratio=0.01,values=qsgd(bits=8)))", "ef(qsgd(bits=2))", "ef(sign)",
        "ef(adacomp(bin=50))", "ef(zstd(topk(ratio=0.05)))", "ef(topk(ratio=0.1),error=0)",
        "ef(gradiveq(dims=3,slice=8))"}},
      {"zstd",
       1,
       "lossless Zstandard stage after a stateless codec (codec, level)",
       &ZstdCodec::Create,
       {"zstd(qsgd(bits=4,norm=linf))",
        "zstd(topk(ratio=0.05,values=qsgd(bits=8,bucket=64)),level=1)", "zstd(fp32)"}},
  };
}

}  // namespace

absl::Status RegisterBuiltinCodecs(Registry& r) {
  for (auto* entries : {&QuantizerEntries, &SparseAndWrapperEntries}) {
    for (CodecEntry& e : entries()) FEDLGC_RETURN_IF_ERROR(r.Register(std::move(e)));
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
