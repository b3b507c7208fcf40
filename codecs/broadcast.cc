// Compressed broadcasts with error feedback at the sender (see broadcast.h).
#include "codecs/broadcast.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/crc32c.h"
#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/byte_io.h"
#include "codecs/input_error.h"
#include "codecs/registry.h"

namespace fedlgc::codecs {
namespace {

constexpr char kMagic[4] = {'F', 'L', 'G', 'B'};
constexpr char kChainMagic[4] = {'F', 'L', 'G', 'C'};
constexpr char kStateMagic[4] = {'F', 'L', 'G', 'S'};
constexpr uint8_t kFormat = 1;
constexpr size_t kHeaderBytes = 4 + 1 + 8 + 8 + 4 + 4 + 4;
constexpr size_t kChainHeaderBytes = 4 + 1 + 8 + 4 + 4;

absl::Status Malformed(std::string_view what, std::string_view detail) {
  return InputErrorStatus(InputError::kMalformed, StrCat(what, ": ", detail));
}

// Reads `count` length-prefixed deltas; each takes at least its 4-byte length, so a count
// the remaining bytes cannot hold is refused before anything is reserved.
absl::Status ReadDeltas(ByteReader* in, size_t left, uint32_t count, const FrameLimits& limits,
                        std::string_view what, std::vector<BroadcastDelta>* out) {
  if (count > left / 4) return Malformed(what, StrCat(count, " deltas"));
  out->reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t n = 0;
    std::span<const uint8_t> bytes;
    if (!in->Get(&n) || !in->Take(n, &bytes)) {
      return Malformed(what, StrCat("delta ", i, " is truncated"));
    }
    auto d = ParseDelta(std::string_view(reinterpret_cast<const char*>(bytes.data()), n), limits);
    if (!d.ok()) return d.status();
    if (!out->empty() && d->from != out->back().to) {
      return Malformed(what, StrCat("delta ", i, " goes from version ", d->from, ", not ",
                                    out->back().to));
    }
    out->push_back(*std::move(d));
  }
  return absl::OkStatus();
}

void PutDelta(std::string* out, const BroadcastDelta& d) {
  PutScalar<uint32_t>(out, static_cast<uint32_t>(d.wire_bytes()));
  out->append(SerializeDelta(d));
}

// The decoded delta of `frames` over `dim` coordinates, into `out` (zeroed first): the
// one decoding both ends run, so their additions see the same values. The frames must
// tile [0, dim) without overlap.
absl::Status DecodeDelta(const Codec& codec, std::span<const std::string> frames,
                         const FrameLimits& limits, std::span<float> out) {
  std::fill(out.begin(), out.end(), 0.0f);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const std::string& f : frames) {
    FrameView view;
    FEDLGC_RETURN_IF_ERROR(DecodeFrameInto(codec, f, limits, out, &view));
    ranges.emplace_back(view.begin, view.length);
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t next = 0;
  for (const auto& [begin, length] : ranges) {
    if (begin != next) {
      return InputErrorStatus(InputError::kMalformed,
                              StrCat("the delta's frames do not tile the model: a frame starts at ",
                                     begin, " where ", next, " was expected"));
    }
    next = begin + length;
  }
  if (next != out.size()) {
    return InputErrorStatus(InputError::kMalformed,
                            StrCat("the delta's frames cover ", next, " of ", out.size(),
                                   " coordinates"));
  }
  for (float v : out) {
    if (!std::isfinite(v)) return NonFiniteError("the delta decodes to a value that is not finite");
  }
  return absl::OkStatus();
}

void AddInto(float scale, std::span<const float> delta, std::span<float> model) {
  for (size_t j = 0; j < model.size(); ++j) model[j] += scale * delta[j];
}

// <x, d> / <d, d>: the multiple of d nearest x (1 when d is 0).
float LeastSquaresScale(std::span<const float> x, std::span<const float> d) {
  double xd = 0, dd = 0;
  for (size_t j = 0; j < x.size(); ++j) {
    xd += double(x[j]) * d[j];
    dd += double(d[j]) * d[j];
  }
  const double s = dd > 0 ? xd / dd : 1.0;
  // A decoded delta pointing away from x (possible for a tiny x) adds nothing useful.
  return std::isfinite(s) && s > 0 ? static_cast<float>(s) : 1.0f;
}

FrameLimits LimitsFor(uint64_t dim) {
  FrameLimits limits;
  limits.max_dim = std::max<uint64_t>(limits.max_dim, dim);
  return limits;
}

}  // namespace

uint64_t BroadcastDelta::wire_bytes() const {
  uint64_t n = kHeaderBytes;
  for (const std::string& f : frames) n += 4 + f.size();
  return n;
}

std::string SerializeDelta(const BroadcastDelta& delta) {
  std::string out;
  out.reserve(delta.wire_bytes());
  out.append(kMagic, 4);
  PutScalar<uint8_t>(&out, kFormat);
  PutScalar<uint64_t>(&out, delta.from);
  PutScalar<uint64_t>(&out, delta.to);
  PutScalar<uint32_t>(&out, delta.model_crc);
  PutScalar<float>(&out, delta.scale);
  PutScalar<uint32_t>(&out, static_cast<uint32_t>(delta.frames.size()));
  for (const std::string& f : delta.frames) {
    PutScalar<uint32_t>(&out, static_cast<uint32_t>(f.size()));
    out.append(f);
  }
  return out;
}

absl::StatusOr<BroadcastDelta> ParseDelta(std::string_view bytes, const FrameLimits& limits) {
  auto malformed = [](std::string_view what) {
    return InputErrorStatus(InputError::kMalformed, StrCat("broadcast delta: ", what));
  };
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return malformed("not a delta (bad magic or too short)");
  }
  ByteReader in(bytes.substr(4));
  uint8_t format = 0;
  BroadcastDelta d;
  uint32_t count = 0;
  // The header's size was checked: these reads cannot fail.
  in.Get(&format);
  in.Get(&d.from);
  in.Get(&d.to);
  in.Get(&d.model_crc);
  in.Get(&d.scale);
  in.Get(&count);
  if (format != kFormat) return malformed(StrCat("format version ", int{format}, " is not 1"));
  if (d.to <= d.from) return malformed(StrCat("goes from version ", d.from, " to ", d.to));
  if (!(std::isfinite(d.scale) && d.scale > 0)) {
    return NonFiniteError(StrCat("broadcast delta: scale ", d.scale, " is not finite and > 0"));
  }
  // Each frame takes at least its 4-byte length: a count the bytes cannot hold is a lie.
  if (count == 0 || count > (bytes.size() - kHeaderBytes) / 4) {
    return malformed(StrCat(count, " frames"));
  }
  d.frames.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t n = 0;
    std::span<const uint8_t> frame;
    if (!in.Get(&n) || n > limits.max_frame_bytes || !in.Take(n, &frame)) {
      return malformed(StrCat("frame ", i, " is truncated or over the limit"));
    }
    d.frames.emplace_back(reinterpret_cast<const char*>(frame.data()), frame.size());
  }
  if (!in.done()) return malformed("bytes after the last frame");
  return d;
}

uint32_t ModelCrc(std::span<const float> model) {
  return Crc32c(model.data(), model.size() * sizeof(float));
}

std::string SerializeChain(uint64_t to, uint32_t model_crc,
                           std::span<const BroadcastDelta* const> deltas) {
  std::string out(kChainMagic, 4);
  PutScalar<uint8_t>(&out, kFormat);
  PutScalar<uint64_t>(&out, to);
  PutScalar<uint32_t>(&out, model_crc);
  PutScalar<uint32_t>(&out, static_cast<uint32_t>(deltas.size()));
  for (const BroadcastDelta* d : deltas) PutDelta(&out, *d);
  return out;
}

absl::StatusOr<BroadcastChain> ParseChain(std::string_view bytes, const FrameLimits& limits) {
  constexpr std::string_view kWhat = "broadcast chain";
  if (bytes.size() < kChainHeaderBytes || std::memcmp(bytes.data(), kChainMagic, 4) != 0) {
    return Malformed(kWhat, "not a chain (bad magic or too short)");
  }
  ByteReader in(bytes.substr(4));
  uint8_t format = 0;
  uint32_t count = 0;
  BroadcastChain c;
  in.Get(&format);
  in.Get(&c.to);
  in.Get(&c.model_crc);
  in.Get(&count);
  if (format != kFormat) return Malformed(kWhat, StrCat("format version ", int{format}, " is not 1"));
  FEDLGC_RETURN_IF_ERROR(
      ReadDeltas(&in, bytes.size() - kChainHeaderBytes, count, limits, kWhat, &c.deltas));
  if (!in.done()) return Malformed(kWhat, "bytes after the last delta");
  if (!c.deltas.empty() &&
      (c.deltas.back().to != c.to || c.deltas.back().model_crc != c.model_crc)) {
    return Malformed(kWhat, StrCat("the last delta ends at version ", c.deltas.back().to,
                                   ", the chain at ", c.to));
  }
  return c;
}

absl::StatusOr<std::unique_ptr<BroadcastEncoder>> BroadcastEncoder::Create(
    const BroadcastOptions& options, std::vector<float> initial, uint64_t version) {
  FEDLGC_ASSIGN_OR_RETURN(std::unique_ptr<Codec> codec, MakeCodec(options.codec));
  if (codec->traits().stateful) {
    return absl::InvalidArgumentError(
        StrCat("broadcast codec ", codec->spec(),
               " keeps state of its own: the broadcast's error feedback is the sender's held "
               "model, give the codec without ef(...)"));
  }
  if (options.window == 0) return absl::InvalidArgumentError("broadcast window must be >= 1");
  for (float v : initial) {
    if (!std::isfinite(v)) return NonFiniteError("the initial model is not finite");
  }
  return std::unique_ptr<BroadcastEncoder>(
      new BroadcastEncoder(std::move(codec), options, std::move(initial), version));
}

absl::StatusOr<std::unique_ptr<BroadcastEncoder>> BroadcastEncoder::Restore(
    const BroadcastOptions& options, std::string_view state) {
  constexpr std::string_view kWhat = "broadcast state";
  constexpr size_t kHead = 4 + 1 + 8 + 8;
  if (state.size() < kHead || std::memcmp(state.data(), kStateMagic, 4) != 0) {
    return Malformed(kWhat, "not a broadcast state (bad magic or too short)");
  }
  ByteReader in(state.substr(4));
  uint8_t format = 0;
  uint64_t version = 0, dim = 0;
  in.Get(&format);
  in.Get(&version);
  in.Get(&dim);
  if (format != kFormat) return Malformed(kWhat, StrCat("format version ", int{format}, " is not 1"));
  std::span<const uint8_t> raw;
  if (dim > (state.size() - kHead) / sizeof(float) || !in.Take(dim * sizeof(float), &raw)) {
    return Malformed(kWhat, StrCat("a model of ", dim, " coordinates does not fit"));
  }
  std::vector<float> held(dim);
  if (dim > 0) std::memcpy(held.data(), raw.data(), raw.size());
  uint32_t count = 0;
  if (!in.Get(&count)) return Malformed(kWhat, "truncated before the deltas");
  std::vector<BroadcastDelta> kept;
  FrameLimits limits = LimitsFor(dim);
  FEDLGC_RETURN_IF_ERROR(ReadDeltas(&in, state.size() - kHead - raw.size() - 4, count, limits,
                                    kWhat, &kept));
  if (!in.done()) return Malformed(kWhat, "bytes after the last delta");
  FEDLGC_ASSIGN_OR_RETURN(std::unique_ptr<BroadcastEncoder> enc,
                          Create(options, std::move(held), version));
  if (!kept.empty() && (kept.back().to != version || kept.back().model_crc != enc->held_crc_)) {
    return Malformed(kWhat, "the kept deltas do not end at the held model");
  }
  while (kept.size() > options.window) kept.erase(kept.begin());
  enc->kept_.assign(std::make_move_iterator(kept.begin()), std::make_move_iterator(kept.end()));
  return enc;
}

std::string BroadcastEncoder::SaveState() const {
  std::string out(kStateMagic, 4);
  PutScalar<uint8_t>(&out, kFormat);
  PutScalar<uint64_t>(&out, version_);
  PutScalar<uint64_t>(&out, held_.size());
  out.append(reinterpret_cast<const char*>(held_.data()), held_.size() * sizeof(float));
  PutScalar<uint32_t>(&out, static_cast<uint32_t>(kept_.size()));
  for (const BroadcastDelta& d : kept_) PutDelta(&out, d);
  return out;
}

BroadcastEncoder::BroadcastEncoder(std::unique_ptr<Codec> codec, BroadcastOptions options,
                                   std::vector<float> initial, uint64_t version)
    : codec_(std::move(codec)),
      options_(std::move(options)),
      held_(std::move(initial)),
      version_(version),
      held_crc_(ModelCrc(held_)) {}

absl::StatusOr<const BroadcastDelta*> BroadcastEncoder::Advance(uint64_t version,
                                                                std::span<const float> model) {
  if (version <= version_) {
    return absl::InvalidArgumentError(
        StrCat("broadcast version ", version, " is not after ", version_));
  }
  if (model.size() != held_.size()) {
    return absl::InvalidArgumentError(
        StrCat("model of ", model.size(), " coordinates, the broadcast's is ", held_.size()));
  }
  // The error feedback: what earlier deltas lost is part of this input.
  std::vector<float> diff(held_.size()), decoded(held_.size());
  for (size_t j = 0; j < diff.size(); ++j) diff[j] = model[j] - held_[j];
  std::vector<Frame> frames;
  EncodeOptions eo;
  eo.seed = version;
  eo.max_frame_bytes = options_.max_frame_bytes;
  eo.cuts = options_.cuts;
  FEDLGC_RETURN_IF_ERROR(codec_->Encode(diff, eo, &frames));
  BroadcastDelta d;
  d.from = version_;
  d.to = version;
  for (Frame& f : frames) d.frames.push_back(std::move(f.bytes));
  // Rebuild exactly as a receiver does.
  FEDLGC_RETURN_IF_ERROR(DecodeDelta(*codec_, d.frames, LimitsFor(held_.size()), decoded));
  d.scale = LeastSquaresScale(diff, decoded);
  AddInto(d.scale, decoded, held_);
  version_ = version;
  held_crc_ = ModelCrc(held_);
  d.model_crc = held_crc_;
  kept_.push_back(std::move(d));
  while (kept_.size() > options_.window) kept_.pop_front();
  return &kept_.back();
}

const BroadcastDelta* BroadcastEncoder::DeltaTo(uint64_t to) const {
  for (const BroadcastDelta& d : kept_) {
    if (d.to == to) return &d;
  }
  return nullptr;
}

std::vector<const BroadcastDelta*> BroadcastEncoder::ChainFrom(uint64_t from) const {
  std::vector<const BroadcastDelta*> chain;
  if (from >= version_) return chain;
  uint64_t at = from, bytes = 0;
  for (const BroadcastDelta& d : kept_) {
    if (d.to <= at) continue;
    if (d.from != at) return {};  // the window no longer reaches back to `from`
    chain.push_back(&d);
    bytes += d.wire_bytes();
    at = d.to;
  }
  if (at != version_ || bytes >= held_.size() * sizeof(float)) return {};
  return chain;
}

absl::Status ApplyDelta(const Codec& codec, const BroadcastDelta& delta, uint64_t* version,
                        std::vector<float>* model) {
  if (delta.from != *version) {
    return absl::FailedPreconditionError(StrCat("the delta goes from version ", delta.from,
                                                "; this model is version ", *version));
  }
  std::vector<float> d(model->size());
  FEDLGC_RETURN_IF_ERROR(DecodeDelta(codec, delta.frames, LimitsFor(model->size()), d));
  if (!(std::isfinite(delta.scale) && delta.scale > 0)) {
    return NonFiniteError(StrCat("broadcast delta: scale ", delta.scale, " is not finite and > 0"));
  }
  std::vector<float> next = *model;
  AddInto(delta.scale, d, next);
  for (float v : next) {
    if (!std::isfinite(v)) return NonFiniteError("the model rebuilt from the delta is not finite");
  }
  const uint32_t crc = ModelCrc(next);
  if (crc != delta.model_crc) {
    return absl::DataLossError(StrCat("the model rebuilt from the delta to version ", delta.to,
                                      " has CRC32C ", crc, ", the sender's ", delta.model_crc,
                                      ": fetch the full model"));
  }
  *model = std::move(next);
  *version = delta.to;
  return absl::OkStatus();
}

absl::Status ApplyChain(const Codec& codec, const BroadcastChain& chain, uint64_t* version,
                        std::vector<float>* model) {
  uint64_t v = *version;
  std::vector<float> m = *model;
  for (const BroadcastDelta& d : chain.deltas) FEDLGC_RETURN_IF_ERROR(ApplyDelta(codec, d, &v, &m));
  if (v != chain.to) {
    return absl::FailedPreconditionError(
        StrCat("the chain leads to version ", chain.to, "; this model is version ", v));
  }
  const uint32_t crc = ModelCrc(m);
  if (crc != chain.model_crc) {
    return absl::DataLossError(StrCat("the model of version ", v, " has CRC32C ", crc,
                                      ", the sender's ", chain.model_crc, ": fetch the full model"));
  }
  *model = std::move(m);
  *version = v;
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
