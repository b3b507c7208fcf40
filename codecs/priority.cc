// Upload order of an update's frames (see priority.h).
#include "codecs/priority.h"

#include <algorithm>
#include <numeric>

#include "base/status_macros.h"
#include "base/str.h"

namespace fedlgc::codecs {

absl::StatusOr<UploadOrder> ParseUploadOrder(std::string_view name) {
  if (name.empty() || name == "index") return UploadOrder::kIndex;
  if (name == "layer") return UploadOrder::kLayer;
  if (name == "magnitude") return UploadOrder::kMagnitude;
  return absl::InvalidArgumentError(
      StrCat("upload order '", name, "': known orders are index, layer and magnitude"));
}

absl::StatusOr<std::vector<double>> FramePriorities(const Codec& decoder,
                                                    std::span<const Frame> frames,
                                                    UploadOrder order, const ModelLayout& layout) {
  std::vector<double> priority(frames.size(), 0.0);
  const auto& tensors = layout.tensors();
  std::vector<float> values;
  for (size_t i = 0; i < frames.size(); ++i) {
    const Frame& f = frames[i];
    if (order == UploadOrder::kIndex) {
      priority[i] = -static_cast<double>(i);
    } else if (order == UploadOrder::kLayer) {
      // The tensor holding the frame's first coordinate: earlier tensors first.
      const auto it =
          std::upper_bound(tensors.begin(), tensors.end(), f.begin,
                           [](uint64_t c, const TensorSlot& t) { return c < t.offset + t.size; });
      priority[i] = -static_cast<double>(it - tensors.begin());
    } else {
      FrameLimits limits;
      limits.max_dim = ~uint64_t{0};
      limits.max_frame_bytes = ~uint64_t{0};
      FEDLGC_ASSIGN_OR_RETURN(FrameView view, ParseFrame(f.bytes, limits));
      if (view.spec != decoder.wire_spec()) {
        return absl::InvalidArgumentError(
            StrCat("frame ", i, " is of ", view.spec, ", not ", decoder.wire_spec()));
      }
      values.assign(view.length, 0.0f);
      FEDLGC_RETURN_IF_ERROR(decoder.Decode(view, values));
      double energy = 0;
      for (float v : values) energy += static_cast<double>(v) * v;
      priority[i] = energy / static_cast<double>(std::max<size_t>(1, f.bytes.size()));
    }
  }
  return priority;
}

std::vector<size_t> ByPriority(std::span<const double> priority) {
  std::vector<size_t> order(priority.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return priority[a] > priority[b]; });
  return order;
}

absl::Status OrderFrames(const Codec& decoder, UploadOrder order, const ModelLayout& layout,
                         std::vector<Frame>* frames) {
  if (order == UploadOrder::kIndex || frames->size() < 2) return absl::OkStatus();
  FEDLGC_ASSIGN_OR_RETURN(std::vector<double> priority,
                          FramePriorities(decoder, *frames, order, layout));
  std::vector<Frame> sorted;
  sorted.reserve(frames->size());
  for (size_t i : ByPriority(priority)) sorted.push_back(std::move((*frames)[i]));
  frames->swap(sorted);
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
