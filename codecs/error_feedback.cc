// Error-feedback decorator (see error_feedback.h).
#include "codecs/error_feedback.h"

#include <algorithm>

#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/params.h"

namespace fedlgc::codecs {

ErrorFeedback::ErrorFeedback(std::string spec, std::unique_ptr<Codec> inner, bool feed_back_error)
    : ResidualCodec(std::move(spec)), inner_(std::move(inner)), feed_back_error_(feed_back_error) {}

absl::StatusOr<std::unique_ptr<Codec>> ErrorFeedback::Create(const SpecNode& node,
                                                             const CodecContext& context) {
  ParamReader params(node, {"error"}, 1);
  FEDLGC_RETURN_IF_ERROR(params.status());
  FEDLGC_ASSIGN_OR_RETURN(const SpecNode* inner_node, params.Positional(0));
  if (inner_node == nullptr) {
    return absl::InvalidArgumentError("ef: needs the codec it wraps, e.g. ef(topk(ratio=0.01))");
  }
  FEDLGC_ASSIGN_OR_RETURN(std::unique_ptr<Codec> inner, context.Create(*inner_node));
  if (dynamic_cast<ErrorFeedback*>(inner.get()) != nullptr) {
    return absl::InvalidArgumentError("ef: error feedback nested in error feedback");
  }
  if (dynamic_cast<ResidualCodec*>(inner.get()) != nullptr) {
    return absl::InvalidArgumentError(
        StrCat("ef: ", inner->spec(), " keeps its own residual; use it without ef(...)"));
  }
  FEDLGC_ASSIGN_OR_RETURN(bool error, params.Flag("error", true));
  std::string spec = StrCat("ef/1(", inner->spec(), error ? ")" : ",error=0)");
  return std::unique_ptr<Codec>(new ErrorFeedback(std::move(spec), std::move(inner), error));
}

CodecTraits ErrorFeedback::traits() const {
  CodecTraits t = inner_->traits();
  t.stateful = true;
  t.unbiased = false;
  t.summable = false;  // its frames are the inner codec's, but ef itself is no LinearCode
  return t;
}

absl::Status ErrorFeedback::Encode(std::span<const float> x, const EncodeOptions& opts,
                                   std::vector<Frame>* frames) {
  FEDLGC_RETURN_IF_ERROR(PrepareResidual(x.size()));
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

}  // namespace fedlgc::codecs
