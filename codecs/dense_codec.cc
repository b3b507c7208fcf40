// DenseCodec framing and chunking.
#include "codecs/dense_codec.h"

#include <algorithm>
#include <cmath>

#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/input_error.h"
#include "codecs/simd.h"

namespace fedlgc::codecs {

size_t FindNonFinite(std::span<const float> x) {
  // Cheap vectorizable screen first; the exact position only on failure.
  uint32_t any = 0;
  for (float f : x) any |= ((FloatBits(f) & 0x7F800000u) == 0x7F800000u) ? 1u : 0u;
  if (any == 0) return x.size();
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return i;
  }
  return x.size();
}

absl::Status DenseCodec::NonFiniteInput(std::span<const float> values) {
  const size_t i = FindNonFinite(values);
  if (i == values.size()) return absl::InternalError("non-finite check found no culprit");
  return NonFiniteError(
      StrCat("input value ", i, " is not finite (", values[i], "); nothing was encoded"));
}

absl::Status DenseCodec::ExpectBodyBytes(std::span<const uint8_t> body, uint64_t n) const {
  if (body.size() == MaxBodyBytes(n)) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat(spec(), ": body of ", body.size(), " bytes for ", n,
                                           " values, expected ", MaxBodyBytes(n)));
}

absl::Status DenseCodec::Encode(std::span<const float> x, const EncodeOptions& opts,
                                std::vector<Frame>* frames) {
  const uint64_t n = x.size();
  const uint64_t block = traits_.block;
  const size_t overhead = FrameOverhead(wire_spec().size());
  uint64_t chunk = n;  // coordinates per frame
  if (opts.max_frame_bytes != 0) {
    if (opts.max_frame_bytes <= overhead ||
        MaxBodyBytes(std::min(n, block)) > opts.max_frame_bytes - overhead) {
      return absl::InvalidArgumentError(
          StrCat("frame budget of ", opts.max_frame_bytes, " bytes is too small for ", wire_spec(),
                 ": one block of ", block, " coordinates needs ",
                 overhead + MaxBodyBytes(std::min(n, block)), " bytes"));
    }
    // Largest multiple of block whose worst-case body fits (binary search over blocks).
    const uint64_t budget = opts.max_frame_bytes - overhead;
    uint64_t lo = 1;
    uint64_t hi = std::max<uint64_t>(1, (n + block - 1) / block);
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo + 1) / 2;
      if (MaxBodyBytes(std::min(n, mid * block)) <= budget) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    chunk = std::min(n, lo * block);
  }
  if (MaxBodyBytes(chunk) > kMaxBodyBytes) {
    return absl::InvalidArgumentError(StrCat(wire_spec(), ": ", n,
                                             " coordinates make a body over 4 GiB;",
                                             " set EncodeOptions::max_frame_bytes to chunk it"));
  }
  if (!opts.fresh.empty() && opts.fresh.size() != n) {
    return absl::InvalidArgumentError(StrCat(wire_spec(), ": the update alone has ",
                                             opts.fresh.size(), " coordinates, the input ", n));
  }
  FEDLGC_ASSIGN_OR_RETURN(const std::vector<uint64_t> bounds, RequiredBounds(opts.cuts, n));
  std::vector<float> fitted;
  FEDLGC_RETURN_IF_ERROR(Fit(x, &fitted));
  const size_t first = frames->size();
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    const uint64_t end = bounds[s + 1];
    uint64_t begin = bounds[s];
    do {
      const uint64_t len = std::min(chunk, end - begin);
      Frame f;
      f.begin = begin;
      f.length = len;
      const size_t body = BeginFrame(wire_spec(), n, begin, len, &f.bytes);
      BodyContext ctx{opts.seed, FirstBlockKey(begin, block, n), opts.shared_scale,
                      opts.fresh.empty() ? opts.fresh : opts.fresh.subspan(begin, len), fitted};
      absl::Status st = EncodeBody(x.subspan(begin, len), ctx, &f.bytes);
      if (!st.ok()) {
        frames->resize(first);
        return st;
      }
      FinishFrame(body, &f.bytes);
      frames->push_back(std::move(f));
      begin += len;
    } while (begin < end);
  }
  return absl::OkStatus();
}

absl::Status DenseCodec::Decode(const FrameView& frame, std::span<float> out) const {
  if (out.size() != frame.length) {
    return absl::InvalidArgumentError(
        StrCat("output holds ", out.size(), " values, the frame covers ", frame.length));
  }
  const uint64_t max_body = MaxBodyBytes(frame.length);
  if (frame.body.size() > max_body || (traits_.fixed_size && frame.body.size() != max_body)) {
    return absl::InvalidArgumentError(StrCat(wire_spec(), ": body of ", frame.body.size(),
                                             " bytes for ", frame.length, " values, expected ",
                                             traits_.fixed_size ? "" : "at most ", max_body));
  }
  return DecodeBody(frame.body, out);
}

}  // namespace fedlgc::codecs
