// RegisterBuiltinCodecs: the table of codecs this library ships.
#include <cstdio>
#include <cstdlib>

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

}  // namespace

absl::Status RegisterBuiltinCodecs(Registry& r) {
  FEDLGC_RETURN_IF_ERROR(r.Register(
      {"fp32", 1, "identity, 32 bits per coordinate", FloatFactory(FloatFormat::kFp32)}));
  FEDLGC_RETURN_IF_ERROR(r.Register(
      {"fp16", 1, "IEEE half precision, saturating, 16 bits", FloatFactory(FloatFormat::kFp16)}));
  FEDLGC_RETURN_IF_ERROR(r.Register(
      {"bf16", 1, "bfloat16, round to nearest even, 16 bits", FloatFactory(FloatFormat::kBf16)}));
  FEDLGC_RETURN_IF_ERROR(r.Register({"qsgd", 1,
                                     "QSGD: stochastic uniform levels per bucket "
                                     "(bits|s, bucket, norm=l2|linf, elias)",
                                     Leaf(&LevelQuantizer::CreateQsgd)}));
  FEDLGC_RETURN_IF_ERROR(r.Register({"nuqsgd", 1,
                                     "NUQSGD: stochastic exponential levels p^j "
                                     "(bits|s, p, bucket, norm, elias)",
                                     Leaf(&LevelQuantizer::CreateNuqsgd)}));
  FEDLGC_RETURN_IF_ERROR(r.Register({"alq", 1,
                                     "ALQ: QSGD with levels fitted to the update by coordinate "
                                     "descent on the variance, sent in each frame "
                                     "(bits|s, bucket, norm, elias, sweeps, sample)",
                                     Leaf(&AdaptiveQuantizer::CreateAlq)}));
  FEDLGC_RETURN_IF_ERROR(r.Register({"amq", 1,
                                     "AMQ: QSGD with levels p^(s-j), p fitted to the update by "
                                     "gradient descent on the variance (bits|s, bucket, norm, "
                                     "elias, epochs, sample)",
                                     Leaf(&AdaptiveQuantizer::CreateAmq)}));
  FEDLGC_RETURN_IF_ERROR(
      r.Register({"natdither", 1, "natural dithering: levels 2^-j of the norm (s, bucket, norm)",
                  Leaf(&LevelQuantizer::CreateNatDither)}));
  FEDLGC_RETURN_IF_ERROR(
      r.Register({"terngrad", 1, "TernGrad: {-s,0,s} per bucket (bucket, clip, shared)",
                  Leaf(&TernGrad::Create)}));
  FEDLGC_RETURN_IF_ERROR(
      r.Register({"natural", 1, "natural compression: random power of two, 9 bits",
                  Leaf(&NaturalCompression::Create)}));
  FEDLGC_RETURN_IF_ERROR(
      r.Register({"sign", 1, "signSGD: 1 bit (+ l1 scale per bucket)", Leaf(&SignCodec::Create)}));
  FEDLGC_RETURN_IF_ERROR(
      r.Register({"topk", 1, "top-k by magnitude (ratio|k, values, sampled, sample)",
                  &SparseCodec::CreateTopK}));
  FEDLGC_RETURN_IF_ERROR(r.Register(
      {"randk", 1, "uniform random-k (ratio|k, values, scale)", &SparseCodec::CreateRandomK}));
  FEDLGC_RETURN_IF_ERROR(r.Register({"adacomp", 1,
                                     "AdaComp: per bin, what reaches the bin's largest |x|, "
                                     "as signs and a scale; use inside ef(...) (bin)",
                                     Leaf(&AdaComp::Create)}));
  FEDLGC_RETURN_IF_ERROR(r.Register({"dgc", 1,
                                     "Deep Gradient Compression: top-k with momentum correction, "
                                     "its own residual and a warm-up (ratio, momentum, clip, "
                                     "warmup, sample, values)",
                                     &Dgc::Create}));
  FEDLGC_RETURN_IF_ERROR(r.Register({"powersgd", 1,
                                     "PowerSGD: rank-r factors P, Q per matrix of the model, "
                                     "warm-started, with its own residual; needs the model's "
                                     "layout (rank, min_ratio, warm)",
                                     &PowerSgd::Create}));
  FEDLGC_RETURN_IF_ERROR(r.Register({"gradiveq", 1,
                                     "GradiVeQ: PCA codes of tensor slices, summable; bases "
                                     "fitted by the coordinator and served; use inside ef(...); "
                                     "needs the model's layout (dims, slice, refit)",
                                     &GradiVeQ::Create}));
  FEDLGC_RETURN_IF_ERROR(
      r.Register({"ef", 1, "error feedback around a codec without its own residual: ef(codec)",
                  &ErrorFeedback::Create}));
  FEDLGC_RETURN_IF_ERROR(r.Register({"zstd", 1,
                                     "lossless Zstandard stage after a stateless codec "
                                     "(codec, level)",
                                     &ZstdCodec::Create}));
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
