// Zstandard stage after a stateless codec (see zstd_codec.h).
#include "codecs/zstd_codec.h"

#include <zstd.h>

#include <cstring>
#include <limits>

#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/input_error.h"
#include "codecs/params.h"

namespace fedlgc::codecs {
namespace {

constexpr uint8_t kStored = 0;
constexpr uint8_t kCompressed = 1;
constexpr int64_t kMaxLevel = 19;  // beyond this zstd wants --ultra amounts of memory

absl::Status Malformed(std::string_view what) {
  return InputErrorStatus(InputError::kMalformed, StrCat("zstd: ", what));
}

}  // namespace

ZstdCodec::ZstdCodec(std::string spec, std::string wire_spec, std::unique_ptr<Codec> inner,
                     int level)
    : Codec(std::move(spec)),
      wire_spec_(std::move(wire_spec)),
      inner_(std::move(inner)),
      level_(level) {}

absl::StatusOr<std::unique_ptr<Codec>> ZstdCodec::Create(const SpecNode& node,
                                                         const CodecContext& context) {
  ParamReader params(node, {"level"}, 1);
  FEDLGC_RETURN_IF_ERROR(params.status());
  FEDLGC_ASSIGN_OR_RETURN(const SpecNode* inner_node, params.Positional(0));
  if (inner_node == nullptr) {
    return absl::InvalidArgumentError(
        "zstd: needs the codec whose frames it compresses, e.g. zstd(qsgd(bits=4))");
  }
  FEDLGC_ASSIGN_OR_RETURN(int64_t level, params.Int("level", 3, 1, kMaxLevel));
  FEDLGC_ASSIGN_OR_RETURN(std::unique_ptr<Codec> inner, context.Create(*inner_node));
  if (inner->traits().stateful) {
    return absl::InvalidArgumentError(
        "zstd: wraps only stateless codecs; put error feedback outside, e.g. ef(zstd(topk(...))), "
        "and use dgc(...) without zstd");
  }
  if (dynamic_cast<ZstdCodec*>(inner.get()) != nullptr) {
    return absl::InvalidArgumentError("zstd: zstd nested in zstd");
  }
  const std::string tail = StrCat(",level=", level, ")");
  std::string spec = StrCat("zstd/1(", inner->spec(), tail);
  std::string wire = StrCat("zstd/1(", inner->wire_spec(), tail);
  return std::unique_ptr<Codec>(
      new ZstdCodec(std::move(spec), std::move(wire), std::move(inner), static_cast<int>(level)));
}

CodecTraits ZstdCodec::traits() const {
  CodecTraits t = inner_->traits();
  t.fixed_size = false;
  t.summable = false;  // its frames are no LinearCode's
  return t;
}

uint64_t ZstdCodec::ExtraBytes() const {
  return wire_spec_.size() - inner_->wire_spec().size() + 1;
}

uint64_t ZstdCodec::MaxFrameBytes(uint64_t n) const {
  return inner_->MaxFrameBytes(n) + ExtraBytes();
}

absl::Status ZstdCodec::Encode(std::span<const float> x, const EncodeOptions& opts,
                               std::vector<Frame>* frames) {
  EncodeOptions inner_opts = opts;
  if (opts.max_frame_bytes != 0) {
    if (opts.max_frame_bytes <= ExtraBytes()) {
      return absl::InvalidArgumentError(StrCat("zstd: a frame budget of ", opts.max_frame_bytes,
                                               " bytes leaves nothing for the inner codec"));
    }
    inner_opts.max_frame_bytes = opts.max_frame_bytes - ExtraBytes();
  }
  std::vector<Frame> inner_frames;
  FEDLGC_RETURN_IF_ERROR(inner_->Encode(x, inner_opts, &inner_frames));

  FrameLimits limits;
  limits.max_dim = std::numeric_limits<uint64_t>::max();
  limits.max_frame_bytes = std::numeric_limits<uint64_t>::max();
  const size_t first = frames->size();
  for (const Frame& f : inner_frames) {
    FEDLGC_ASSIGN_OR_RETURN(FrameView view, ParseFrame(f.bytes, limits));
    auto packed = ZstdPack(view.body, level_);
    if (!packed.ok()) {
      frames->resize(first);
      return packed.status();
    }
    Frame out{f.begin, f.length, {}};
    const size_t body = BeginFrame(wire_spec_, view.dim, view.begin, view.length, &out.bytes);
    out.bytes += *packed;
    FinishFrame(body, &out.bytes);
    frames->push_back(std::move(out));
  }
  return absl::OkStatus();
}

absl::Status ZstdCodec::Decode(const FrameView& frame, std::span<float> out) const {
  FrameView inner = frame;
  inner.spec = inner_->wire_spec();
  // The inner body is shorter than the inner codec's largest frame for this length.
  FEDLGC_ASSIGN_OR_RETURN(std::vector<uint8_t> body,
                          ZstdUnpack(frame.body, inner_->MaxRangeFrameBytes(frame.length)));
  inner.body = body;
  return inner_->Decode(inner, out);
}

absl::StatusOr<std::string> ZstdPack(std::span<const uint8_t> body, int level) {
  std::string packed(ZSTD_compressBound(body.size()), '\0');
  const size_t n = ZSTD_compress(packed.data(), packed.size(), body.data(), body.size(), level);
  if (ZSTD_isError(n)) return absl::InternalError(StrCat("zstd: ", ZSTD_getErrorName(n)));
  std::string out;
  if (n < body.size()) {
    out.push_back(static_cast<char>(kCompressed));
    out.append(packed.data(), n);
  } else {
    out.push_back(static_cast<char>(kStored));
    out.append(reinterpret_cast<const char*>(body.data()), body.size());
  }
  return out;
}

absl::StatusOr<std::vector<uint8_t>> ZstdUnpack(std::span<const uint8_t> packed, uint64_t cap) {
  if (packed.empty()) return Malformed("empty body");
  const uint8_t mode = packed[0];
  const std::span<const uint8_t> data = packed.subspan(1);
  if (mode == kStored) {
    if (data.size() > cap) return Malformed(StrCat("a stored body of ", data.size(), " bytes"));
    return std::vector<uint8_t>(data.begin(), data.end());
  }
  if (mode != kCompressed) return Malformed(StrCat("unknown body mode ", int{mode}));
  // A regular frame of this format only (no skippable or legacy frames).
  uint32_t magic = 0;
  if (data.size() >= 4) std::memcpy(&magic, data.data(), 4);
  if (magic != ZSTD_MAGICNUMBER) return Malformed("not a zstd frame");
  const unsigned long long declared = ZSTD_getFrameContentSize(data.data(), data.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR || declared == ZSTD_CONTENTSIZE_UNKNOWN) {
    return Malformed("not a zstd frame with its content size");
  }
  const uint64_t size = declared;
  if (size > cap) {
    return Malformed(StrCat("inflates to ", size, " bytes where at most ", cap, " may be"));
  }
  const size_t whole = ZSTD_findFrameCompressedSize(data.data(), data.size());
  if (ZSTD_isError(whole) || whole != data.size()) {
    return Malformed("bytes before or after the zstd frame");
  }
  std::vector<uint8_t> body(size);
  const size_t n = ZSTD_decompress(body.data(), body.size(), data.data(), data.size());
  if (ZSTD_isError(n)) return Malformed(ZSTD_getErrorName(n));
  if (n != size) return Malformed("inflated size differs from the declared one");
  return body;
}

}  // namespace fedlgc::codecs
