// Error-feedback decorator (see error_feedback.h).
#include "codecs/error_feedback.h"

#include <algorithm>

#include "codecs/params.h"
#include "codecs/status_macros.h"
#include "codecs/str.h"

namespace fedlgc::codecs {

ErrorFeedback::ErrorFeedback(std::string spec, std::unique_ptr<Codec> inner, bool feed_back_error)
    : Codec(std::move(spec)), inner_(std::move(inner)), feed_back_error_(feed_back_error) {}

absl::StatusOr<std::unique_ptr<Codec>> ErrorFeedback::Create(const SpecNode& node,
                                                             const Registry& registry) {
  ParamReader params(node, {"error"}, 1);
  FEDLGC_RETURN_IF_ERROR(params.status());
  FEDLGC_ASSIGN_OR_RETURN(const SpecNode* inner_node, params.Positional(0));
  if (inner_node == nullptr) {
    return absl::InvalidArgumentError("ef: needs the codec it wraps, e.g. ef(topk(ratio=0.01))");
  }
  FEDLGC_ASSIGN_OR_RETURN(std::unique_ptr<Codec> inner, registry.Create(*inner_node));
  if (dynamic_cast<ErrorFeedback*>(inner.get()) != nullptr) {
    return absl::InvalidArgumentError("ef: error feedback nested in error feedback");
  }
  FEDLGC_ASSIGN_OR_RETURN(bool error, params.Flag("error", true));
  std::string spec = StrCat("ef/1(", inner->spec(), error ? ")" : ",error=0)");
  return std::unique_ptr<Codec>(new ErrorFeedback(std::move(spec), std::move(inner), error));
}

CodecTraits ErrorFeedback::traits() const {
  CodecTraits t = inner_->traits();
  t.stateful = true;
  t.unbiased = false;
  return t;
}

absl::Status ErrorFeedback::Encode(std::span<const float> x, const EncodeOptions& opts,
                                   std::vector<Frame>* frames) {
  if (residual_.empty()) residual_.assign(x.size(), 0.0f);
  if (residual_.size() != x.size()) {
    return absl::InvalidArgumentError(
        StrCat("ef: input has ", x.size(), " coordinates, the residual ", residual_.size()));
  }
  scratch_.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) scratch_[i] = x[i] + residual_[i];
  const size_t first = frames->size();
  EncodeOptions inner_opts = opts;
  inner_opts.fresh = x;  // what the update alone is, for codecs that weigh it (AdaComp)
  FEDLGC_RETURN_IF_ERROR(inner_->Encode(scratch_, inner_opts, frames));
  if (!feed_back_error_) {
    // The residual carried only restored frames; they are sent now.
    std::fill(residual_.begin(), residual_.end(), 0.0f);
    return absl::OkStatus();
  }
  // The residual becomes (x + e) minus what the receiver will decode.
  recon_.resize(x.size());
  absl::Status st = DecodeAll(*inner_, std::span<const Frame>(*frames).subspan(first), recon_);
  if (!st.ok()) {
    frames->resize(first);
    return st;
  }
  for (size_t i = 0; i < x.size(); ++i) residual_[i] = scratch_[i] - recon_[i];
  return absl::OkStatus();
}

absl::Status ErrorFeedback::Restore(std::string_view frame_bytes) {
  FrameLimits limits;
  limits.max_dim = std::max<uint64_t>(limits.max_dim, residual_.size());
  limits.max_frame_bytes = ~uint64_t{0};
  FEDLGC_ASSIGN_OR_RETURN(FrameView view, ParseFrame(frame_bytes, limits));
  if (view.spec != wire_spec() || view.dim != residual_.size()) {
    return absl::InvalidArgumentError("ef: Restore of a frame this codec did not produce");
  }
  scratch_.assign(view.length, 0.0f);
  FEDLGC_RETURN_IF_ERROR(inner_->Decode(view, scratch_));
  for (uint64_t i = 0; i < view.length; ++i) residual_[view.begin + i] += scratch_[i];
  return absl::OkStatus();
}

absl::Status ErrorFeedback::RestoreAny(std::string_view frame_bytes) {
  FrameLimits limits;
  limits.max_dim = std::max<uint64_t>(limits.max_dim, residual_.size());
  limits.max_frame_bytes = ~uint64_t{0};
  FEDLGC_ASSIGN_OR_RETURN(FrameView view, ParseFrame(frame_bytes, limits));
  if (view.spec == wire_spec()) return Restore(frame_bytes);
  if (residual_.empty()) residual_.assign(view.dim, 0.0f);
  if (view.dim != residual_.size()) {
    return absl::InvalidArgumentError(
        StrCat("ef: frame for ", view.dim, " coordinates; the residual has ", residual_.size()));
  }
  // Frames name their codec with its canonical spec, which the registry parses back.
  FEDLGC_ASSIGN_OR_RETURN(std::unique_ptr<Codec> codec, MakeCodec(view.spec));
  scratch_.assign(view.length, 0.0f);
  FEDLGC_RETURN_IF_ERROR(codec->Decode(view, scratch_));
  for (uint64_t i = 0; i < view.length; ++i) residual_[view.begin + i] += scratch_[i];
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
