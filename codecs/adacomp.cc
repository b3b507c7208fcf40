// AdaComp (see adacomp.h).
#include "codecs/adacomp.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/bit_io.h"
#include "codecs/input_error.h"
#include "codecs/params.h"
#include "codecs/simd.h"

namespace fedlgc::codecs {
namespace {

// Bits of a position in a bin of `len` coordinates, and of a count 0..len.
int PositionBits(size_t len) { return len <= 1 ? 0 : std::bit_width(len - 1); }
int CountBits(size_t len) { return std::bit_width(len); }

// Whether the bitmap is the shorter code for `count` of `len` positions (never for 0).
bool UseBitmap(size_t len, size_t count) {
  const size_t p = static_cast<size_t>(PositionBits(len));
  return len < static_cast<size_t>(CountBits(len)) + count * p;
}

// The positions AdaComp sends in one bin, ascending: |G_i + g_i| >= max_j |G_j|, where G
// is the codec's input and g the update alone (`fresh`; empty: H = G), among the G_i
// that are not zero (a zero has no sign to send); the first largest |G| when none
// qualifies; nothing in a bin of zeros.
void SelectBin(std::span<const float> big_g, std::span<const float> fresh,
               std::vector<uint32_t>* picked) {
  picked->clear();
  size_t arg = 0;
  float gmax = 0;
  for (size_t i = 0; i < big_g.size(); ++i) {
    if (std::fabs(big_g[i]) > gmax) {
      gmax = std::fabs(big_g[i]);
      arg = i;
    }
  }
  if (gmax == 0) return;
  for (size_t i = 0; i < big_g.size(); ++i) {
    const float h = fresh.empty() ? big_g[i] : big_g[i] + fresh[i];
    if (big_g[i] != 0 && std::fabs(h) >= gmax) picked->push_back(static_cast<uint32_t>(i));
  }
  if (picked->empty()) picked->push_back(static_cast<uint32_t>(arg));
}

}  // namespace

AdaComp::AdaComp(std::string spec, uint32_t bin)
    : DenseCodec(std::move(spec), CodecTraits{.fixed_size = false,
                                              .unbiased = false,
                                              .stateful = false,
                                              .block = bin * kBinsPerScale}),
      bin_(bin) {}

absl::StatusOr<std::unique_ptr<Codec>> AdaComp::Create(const SpecNode& node) {
  ParamReader params(node, {"bin"});
  FEDLGC_RETURN_IF_ERROR(params.status());
  FEDLGC_ASSIGN_OR_RETURN(int64_t bin, params.Int("bin", 50, 2, 4096));
  return std::unique_ptr<Codec>(
      new AdaComp(StrCat("adacomp/1(bin=", bin, ")"), static_cast<uint32_t>(bin)));
}

uint64_t AdaComp::MaxBodyBytes(uint64_t n) const {
  const uint64_t bins = (n + bin_ - 1) / bin_;
  const uint64_t groups = (bins + kBinsPerScale - 1) / kBinsPerScale;
  // Per group a scale; per bin a mode bit; a bitmap and every sign at worst.
  return (32 * groups + bins + 2 * n + 7) / 8;
}

absl::Status AdaComp::EncodeBody(std::span<const float> values, const BodyContext& ctx,
                                 std::string* out) const {
  if (FindNonFinite(values) != values.size()) return NonFiniteInput(values);
  if (!ctx.fresh.empty() && ctx.fresh.size() != values.size()) {
    return absl::InvalidArgumentError(StrCat(spec(), ": the update alone has ", ctx.fresh.size(),
                                             " values, the body ", values.size()));
  }
  if (!ctx.fresh.empty() && FindNonFinite(ctx.fresh) != ctx.fresh.size()) {
    return NonFiniteInput(ctx.fresh);
  }
  const size_t n = values.size(), group = size_t{bin_} * kBinsPerScale;
  BitWriter w(out);
  std::vector<std::vector<uint32_t>> picked(kBinsPerScale);
  for (size_t g0 = 0; g0 < n; g0 += group) {
    const size_t bins = (std::min(n - g0, group) + bin_ - 1) / bin_;
    double sum = 0;
    size_t sent = 0;
    for (size_t b = 0; b < bins; ++b) {
      const size_t begin = g0 + b * bin_, len = std::min<size_t>(bin_, n - begin);
      SelectBin(values.subspan(begin, len),
                ctx.fresh.empty() ? std::span<const float>() : ctx.fresh.subspan(begin, len),
                &picked[b]);
      for (uint32_t i : picked[b]) sum += std::fabs(values[begin + i]);
      sent += picked[b].size();
    }
    // The mean sent magnitude; +0 when the group sends nothing.
    const float scale = sent == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(sent));
    w.Write(std::bit_cast<uint32_t>(scale), 32);
    for (size_t b = 0; b < bins; ++b) {
      const size_t begin = g0 + b * bin_;
      WriteBin(picked[b], std::min<size_t>(bin_, n - begin), values.subspan(begin), &w);
    }
  }
  w.Flush();
  return absl::OkStatus();
}

absl::Status AdaComp::DecodeBody(std::span<const uint8_t> body, std::span<float> out) const {
  const size_t n = out.size(), group = size_t{bin_} * kBinsPerScale;
  std::fill(out.begin(), out.end(), 0.0f);
  BitReader r(body);
  std::vector<uint32_t> p;
  for (size_t g0 = 0; g0 < n; g0 += group) {
    uint64_t raw = 0;
    if (!r.Read(32, &raw)) return Malformed(g0 / bin_, "is cut short");
    const float scale = std::bit_cast<float>(static_cast<uint32_t>(raw));
    if (!std::isfinite(scale)) {
      return NonFiniteError(StrCat(spec(), ": bins from ", g0 / bin_, " have scale ", scale));
    }
    if (std::signbit(scale)) return Malformed(g0 / bin_, "starts a group with a negative scale");
    size_t sent = 0;
    for (size_t begin = g0; begin < std::min(n, g0 + group); begin += bin_) {
      const size_t len = std::min<size_t>(bin_, n - begin);
      FEDLGC_RETURN_IF_ERROR(ReadBin(len, begin / bin_, &r, &p));
      for (uint32_t i : p) {
        bool neg = false;
        if (!r.ReadBit(&neg)) return Malformed(begin / bin_, "is cut short");
        out[begin + i] = neg ? -scale : scale;
      }
      sent += p.size();
    }
    // A group that sends something has a positive scale, one that sends nothing +0.
    if ((sent > 0) != (scale > 0))
      return Malformed(g0 / bin_, "starts a group whose scale does not fit it");
  }
  if (r.BytesConsumed() != body.size() || !r.UnreadBitsAreZero()) {
    return InputErrorStatus(InputError::kMalformed,
                            StrCat(spec(), ": ", body.size() - r.BytesConsumed(),
                                   " bytes or padding bits after the last bin"));
  }
  return absl::OkStatus();
}

absl::Status AdaComp::Malformed(size_t bin, std::string_view what) const {
  return InputErrorStatus(InputError::kMalformed, StrCat(spec(), ": bin ", bin, " ", what));
}

void AdaComp::WriteBin(std::span<const uint32_t> p, size_t len, std::span<const float> values,
                       BitWriter* w) {
  const bool bitmap = UseBitmap(len, p.size());
  w->WriteBit(bitmap);
  if (bitmap) {
    size_t next = 0;
    for (size_t i = 0; i < len; ++i) {
      const bool on = next < p.size() && p[next] == i;
      w->WriteBit(on);
      next += on ? 1 : 0;
    }
  } else {
    w->Write(p.size(), CountBits(len));
    for (uint32_t i : p) w->Write(i, PositionBits(len));
  }
  for (uint32_t i : p) w->WriteBit(values[i] < 0);
}

// Reads a bin's positions (not its signs) into *p, checking that the encoder's choices
// were the only ones it could make: ascending positions in range and the shorter of the
// two codes.
absl::Status AdaComp::ReadBin(size_t len, size_t bin, BitReader* r,
                              std::vector<uint32_t>* p) const {
  p->clear();
  bool bitmap = false;
  if (!r->ReadBit(&bitmap)) return Malformed(bin, "is cut short");
  if (bitmap) {
    for (size_t i = 0; i < len; ++i) {
      bool on = false;
      if (!r->ReadBit(&on)) return Malformed(bin, "is cut short");
      if (on) p->push_back(static_cast<uint32_t>(i));
    }
    if (!UseBitmap(len, p->size())) return Malformed(bin, "has a bitmap a list codes shorter");
    return absl::OkStatus();
  }
  uint64_t count = 0, pos = 0;
  if (!r->Read(CountBits(len), &count) || count > len) return Malformed(bin, "has a bad count");
  for (uint64_t k = 0; k < count; ++k) {
    if (!r->Read(PositionBits(len), &pos)) return Malformed(bin, "is cut short");
    if (pos >= len || (!p->empty() && pos <= p->back())) {
      return Malformed(bin, "has positions out of order or range");
    }
    p->push_back(static_cast<uint32_t>(pos));
  }
  if (UseBitmap(len, p->size())) return Malformed(bin, "lists what a bitmap codes shorter");
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
