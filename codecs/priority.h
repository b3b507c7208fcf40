// The order in which the frames of an update leave the client, after P3 (Jayarajan et al.,
// "Priority-based Parameter Propagation for Distributed DNN Training", SysML 2019): what
// matters most goes first, so that a client cut off by the round's deadline has delivered
// its most important part (what it has not delivered goes back into its residual).
//
//   index      the encoder's order: coordinate order, the front of the model first
//   layer      P3's order: by the first tensor a frame covers, input-side layers first
//              (for the models of the zoo, whose parameters are laid out in forward order,
//              the same as index). Senders encode with EncodeOptions::cuts at the tensor
//              boundaries (P3's slices), so each frame lies in one tensor.
//   magnitude  by the decoded frame's squared L2 norm per byte: the most energy per
//              transmitted byte first
//
// Ties keep the encoder's order. The receiver needs nothing: chunks of an update may arrive
// in any index order (docs/protocol.md), and each frame names its own range.
#ifndef FEDLGC_CODECS_PRIORITY_H_
#define FEDLGC_CODECS_PRIORITY_H_

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/codec.h"
#include "codecs/layout.h"

namespace fedlgc::codecs {

enum class UploadOrder { kIndex, kLayer, kMagnitude };

// "index" (or empty), "layer" or "magnitude".
absl::StatusOr<UploadOrder> ParseUploadOrder(std::string_view name);

// One priority per frame, higher first. `decoder` decodes the frames (kMagnitude);
// `layout` places them (kLayer; a frame past the layout's end ranks last).
absl::StatusOr<std::vector<double>> FramePriorities(const Codec& decoder,
                                                    std::span<const Frame> frames,
                                                    UploadOrder order, const ModelLayout& layout);

// The stable permutation that lists frames by non-increasing priority.
std::vector<size_t> ByPriority(std::span<const double> priority);

// Reorders `frames` in place by `order` (kIndex: unchanged).
absl::Status OrderFrames(const Codec& decoder, UploadOrder order, const ModelLayout& layout,
                         std::vector<Frame>* frames);

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_PRIORITY_H_
