// Residual bookkeeping shared by sender-side codecs (see residual_codec.h).
#include "codecs/residual_codec.h"

#include <algorithm>
#include <memory>

#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/registry.h"

namespace fedlgc::codecs {
namespace {

absl::StatusOr<FrameView> ParseOwnFrame(std::string_view frame_bytes, size_t dim) {
  FrameLimits limits;
  limits.max_dim = std::max<uint64_t>(limits.max_dim, dim);
  limits.max_frame_bytes = ~uint64_t{0};
  return ParseFrame(frame_bytes, limits);
}

}  // namespace

absl::Status ResidualCodec::PrepareResidual(size_t n) {
  if (residual_.empty()) residual_.assign(n, 0.0f);
  if (residual_.size() != n) {
    return absl::InvalidArgumentError(
        StrCat(spec(), ": input has ", n, " coordinates, the residual ", residual_.size()));
  }
  return absl::OkStatus();
}

absl::Status ResidualCodec::Restore(std::string_view frame_bytes) {
  FEDLGC_ASSIGN_OR_RETURN(FrameView view, ParseOwnFrame(frame_bytes, residual_.size()));
  if (view.spec != wire_spec() || view.dim != residual_.size()) {
    return absl::InvalidArgumentError(
        StrCat(spec(), ": Restore of a frame this codec did not produce"));
  }
  scratch_.assign(view.length, 0.0f);
  FEDLGC_RETURN_IF_ERROR(Decode(view, scratch_));
  for (uint64_t i = 0; i < view.length; ++i) residual_[view.begin + i] += scratch_[i];
  return absl::OkStatus();
}

absl::Status ResidualCodec::RestoreAny(std::string_view frame_bytes, const ModelLayout* layout,
                                       std::shared_ptr<const SliceBasis> basis) {
  FEDLGC_ASSIGN_OR_RETURN(FrameView view, ParseOwnFrame(frame_bytes, residual_.size()));
  if (view.spec == wire_spec()) return Restore(frame_bytes);
  if (residual_.empty()) residual_.assign(view.dim, 0.0f);
  if (view.dim != residual_.size()) {
    return absl::InvalidArgumentError(StrCat(spec(), ": frame for ", view.dim,
                                             " coordinates; the residual has ", residual_.size()));
  }
  // Frames name their codec with its canonical spec, which the registry parses back.
  FEDLGC_ASSIGN_OR_RETURN(std::unique_ptr<Codec> codec,
                          MakeCodec(view.spec, layout, std::move(basis)));
  scratch_.assign(view.length, 0.0f);
  FEDLGC_RETURN_IF_ERROR(codec->Decode(view, scratch_));
  for (uint64_t i = 0; i < view.length; ++i) residual_[view.begin + i] += scratch_[i];
  return absl::OkStatus();
}

std::string ResidualCodec::BeginState(uint32_t magic, uint32_t version) const {
  std::string out;
  PutScalar(&out, magic);
  PutScalar(&out, version);
  PutScalar(&out, static_cast<uint32_t>(spec().size()));
  out.append(spec());
  return out;
}

absl::Status ResidualCodec::RefuseState(std::string_view why) const {
  return absl::InvalidArgumentError(StrCat(spec(), ": refusing sender state: ", why));
}

absl::Status ResidualCodec::ReadStateStart(ByteReader& r, uint32_t magic, uint32_t version,
                                           std::string_view kind) const {
  uint32_t m = 0, v = 0, spec_len = 0;
  std::span<const uint8_t> spec_bytes;
  if (!r.Get(&m) || !r.Get(&v) || m != magic) return RefuseState(StrCat("not ", kind, " state"));
  if (v != version) return RefuseState(StrCat("version ", v));
  if (!r.Get(&spec_len) || !r.Take(spec_len, &spec_bytes)) return RefuseState("truncated");
  if (std::string_view(reinterpret_cast<const char*>(spec_bytes.data()), spec_bytes.size()) !=
      spec()) {
    return RefuseState("written by another codec spec");
  }
  return absl::OkStatus();
}

absl::Status ResidualCodec::LoadState(std::string_view bytes) {
  if (bytes.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat(spec(), ": keeps no state besides its residual; refusing ", bytes.size(), " bytes"));
}

}  // namespace fedlgc::codecs
