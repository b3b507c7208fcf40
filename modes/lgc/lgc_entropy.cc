// LGC's learned entropy model and its range coder (see lgc_entropy.h).
#include "modes/lgc/lgc_entropy.h"

#include <bit>
#include <cassert>

#include "absl/status/status.h"
#include "base/str.h"

namespace fedlgc::lgc {
namespace {

constexpr int kFastShift = 4;  // the fast estimate moves 1/16 of the way a decision
constexpr int kSlowShift = 7;  // the slow one 1/128
constexpr uint32_t kTop = 1u << 24;
// Bytes a decoder may read past its stream before it stops early. A whole stream is read
// to its last byte and not past it, so any bytes read past it make the stream refused.
constexpr size_t kMaxOverrun = 8;

// Both estimates of `ctx` learn from one decision.
void Learn(EntropyModel* m, size_t ctx, int bit) {
  uint16_t& f = m->fast[ctx];
  uint16_t& s = m->slow[ctx];
  if (bit == 0) {
    f = static_cast<uint16_t>(f + ((65536u - f) >> kFastShift));
    s = static_cast<uint16_t>(s + ((65536u - s) >> kSlowShift));
  } else {
    f = static_cast<uint16_t>(f - (f >> kFastShift));
    s = static_cast<uint16_t>(s - (s >> kSlowShift));
  }
}

// P(bit = 0) of `ctx` in 1/65536: within [71, 65465], so both halves of a split are wide.
uint32_t Zero(const EntropyModel& m, size_t ctx) {
  return (static_cast<uint32_t>(m.fast[ctx]) + m.slow[ctx]) >> 1;
}

// A binary range coder with carry propagation (low is 33 bits, the byte that a carry may
// still reach is held back with the 0xFF bytes behind it). Its first byte is always 0 and
// is not written.
class RangeEncoder {
 public:
  explicit RangeEncoder(std::string* out) : out_(out) {}

  void Put(EntropyModel* m, size_t ctx, int bit) {
    const uint32_t bound = (range_ >> 16) * Zero(*m, ctx);
    if (bit == 0) {
      range_ = bound;
    } else {
      low_ += bound;
      range_ -= bound;
    }
    Learn(m, ctx, bit);
    while (range_ < kTop) {
      range_ <<= 8;
      ShiftLow();
    }
  }

  void Finish() {
    for (int i = 0; i < 5; ++i) ShiftLow();
  }

 private:
  void ShiftLow() {
    if (static_cast<uint32_t>(low_) < 0xFF000000u || (low_ >> 32) != 0) {
      const auto carry = static_cast<uint8_t>(low_ >> 32);
      uint8_t byte = cache_;
      do {
        if (!first_) out_->push_back(static_cast<char>(static_cast<uint8_t>(byte + carry)));
        first_ = false;
        byte = 0xFF;
      } while (--pending_ != 0);
      cache_ = static_cast<uint8_t>(low_ >> 24);
    }
    ++pending_;
    low_ = (low_ & 0x00FFFFFFu) << 8;
  }

  std::string* out_;
  uint64_t low_ = 0;
  uint32_t range_ = 0xFFFFFFFFu;
  uint8_t cache_ = 0;
  uint64_t pending_ = 1;
  bool first_ = true;
};

class RangeDecoder {
 public:
  explicit RangeDecoder(std::span<const uint8_t> in) : in_(in) {
    for (int i = 0; i < 4; ++i) code_ = (code_ << 8) | Next();
  }

  int Get(EntropyModel* m, size_t ctx) {
    const uint32_t bound = (range_ >> 16) * Zero(*m, ctx);
    int bit;
    if (code_ < bound) {
      range_ = bound;
      bit = 0;
    } else {
      code_ -= bound;
      range_ -= bound;
      bit = 1;
    }
    Learn(m, ctx, bit);
    while (range_ < kTop) {
      range_ <<= 8;
      code_ = (code_ << 8) | Next();
    }
    return bit;
  }

  bool overran() const { return over_ > kMaxOverrun; }
  // The stream ended where it should: every byte read, none past it.
  absl::Status Done(std::string_view what) const {
    if (over_ > 0) return absl::InvalidArgumentError(StrCat("lgc entropy: truncated ", what));
    if (pos_ != in_.size()) {
      return absl::InvalidArgumentError(
          StrCat("lgc entropy: ", in_.size() - pos_, " bytes left after the ", what));
    }
    return absl::OkStatus();
  }

 private:
  uint8_t Next() {
    if (pos_ < in_.size()) return in_[pos_++];
    ++over_;
    return 0;
  }

  std::span<const uint8_t> in_;
  size_t pos_ = 0, over_ = 0;
  uint32_t range_ = 0xFFFFFFFFu, code_ = 0;
};

// The contexts of the support bitmap: ones among the last 8 coordinates (0-8), ones among
// the last 64 in five bands, and the prior's bit.
constexpr size_t kSupportContexts = 9 * 5 * 2;
size_t SupportContext(uint64_t history, int prior_bit) {
  const int near = std::popcount(history & 0xFFu);
  const int far = std::popcount(history);
  const int band = far == 0 ? 0 : far == 1 ? 1 : far < 4 ? 2 : far < 8 ? 3 : 4;
  return static_cast<size_t>((near * 5 + band) * 2 + prior_bit);
}

constexpr size_t kSignContexts = 4;
constexpr size_t kMagnitudeContexts = 8 * 8;

// The context of node `node` (1 .. 2^bits - 1) of a correction code.
size_t CorrectionContext(int bits, uint32_t prev, uint8_t leader_code, uint32_t node) {
  const uint32_t band = (leader_code & 7u) >> 1;
  return ((static_cast<size_t>(prev) * 4 + band) << bits) + node;
}

// Symbols of `bits` bits as a binary tree, most significant bit first.
template <typename PutBit>
void PutTree(uint32_t symbol, int bits, PutBit put) {
  uint32_t node = 1;
  for (int b = bits - 1; b >= 0; --b) {
    const int bit = static_cast<int>((symbol >> b) & 1u);
    put(node, bit);
    node = (node << 1) | static_cast<uint32_t>(bit);
  }
}
template <typename GetBit>
uint32_t GetTree(int bits, GetBit get) {
  uint32_t node = 1;
  for (int b = 0; b < bits; ++b) node = (node << 1) | static_cast<uint32_t>(get(node));
  return node - (1u << bits);
}

}  // namespace

EntropyModel EntropyModel::Fresh(size_t contexts) {
  return EntropyModel{std::vector<uint16_t>(contexts, 32768),
                      std::vector<uint16_t>(contexts, 32768)};
}

LeaderModels LeaderModels::Fresh() {
  return LeaderModels{EntropyModel::Fresh(kSupportContexts), EntropyModel::Fresh(kSignContexts),
                      EntropyModel::Fresh(kMagnitudeContexts)};
}

EntropyModel FreshCorrectionModel(int bits) {
  return EntropyModel::Fresh((size_t{1} << bits) * 4 * (size_t{1} << bits));
}

std::string EncodeSupportAndCells(std::span<const uint32_t> support, std::span<const uint8_t> codes,
                                  uint64_t dim, std::span<const uint8_t> prior,
                                  LeaderModels* models) {
  assert(codes.size() == support.size());
  assert(prior.empty() || prior.size() == dim);
  assert(support.empty() || support.back() < dim);
  (void)dim;
  std::string out;
  RangeEncoder enc(&out);
  // The bitmap up to its last index: the decoder stops at the k-th.
  uint64_t history = 0;
  size_t next = 0;
  for (uint64_t i = 0; next < support.size() && i < dim; ++i) {
    const int bit = support[next] == i ? 1 : 0;
    const int pb = prior.empty() ? 0 : (prior[i] != 0);
    enc.Put(&models->support, SupportContext(history, pb), bit);
    history = (history << 1) | static_cast<uint64_t>(bit);
    next += static_cast<size_t>(bit);
  }
  uint32_t prev_sign = 0, prev_cell = 0;
  for (size_t j = 0; j < codes.size(); ++j) {
    assert(codes[j] < 16);
    const uint32_t sign = codes[j] >> 3, cell = codes[j] & 7u;
    const uint32_t adjacent = j > 0 && support[j] == support[j - 1] + 1;
    enc.Put(&models->sign, prev_sign + 2 * adjacent, static_cast<int>(sign));
    PutTree(cell, 3, [&](uint32_t node, int bit) {
      enc.Put(&models->magnitude, prev_cell * 8 + node, bit);
    });
    prev_sign = sign;
    prev_cell = cell;
  }
  enc.Finish();
  return out;
}

absl::StatusOr<SupportAndCells> DecodeSupportAndCells(std::span<const uint8_t> stream, size_t k,
                                                      uint64_t dim, std::span<const uint8_t> prior,
                                                      LeaderModels* models) {
  if (!prior.empty() && prior.size() != dim) {
    return absl::InvalidArgumentError("lgc entropy: a prior support of another dimension");
  }
  if (dim > (uint64_t{1} << 32) || k > dim) {
    return absl::InvalidArgumentError(
        StrCat("lgc entropy: a support of ", k, " indices of ", dim, " coordinates"));
  }
  if (models->support.contexts() != kSupportContexts || models->sign.contexts() != kSignContexts ||
      models->magnitude.contexts() != kMagnitudeContexts) {
    return absl::InvalidArgumentError("lgc entropy: a leader model of another shape");
  }
  RangeDecoder dec(stream);
  SupportAndCells out;
  out.support.reserve(k);
  uint64_t history = 0;
  for (uint64_t i = 0; out.support.size() < k; ++i) {
    if (i == dim || dec.overran()) {
      return absl::InvalidArgumentError(StrCat("lgc entropy: the support stream holds ",
                                               out.support.size(), " of ", k, " indices"));
    }
    const int pb = prior.empty() ? 0 : (prior[i] != 0);
    const int bit = dec.Get(&models->support, SupportContext(history, pb));
    history = (history << 1) | static_cast<uint64_t>(bit);
    if (bit) out.support.push_back(static_cast<uint32_t>(i));
  }
  out.codes.resize(k);
  uint32_t prev_sign = 0, prev_cell = 0;
  for (size_t j = 0; j < k; ++j) {
    const uint32_t adjacent = j > 0 && out.support[j] == out.support[j - 1] + 1;
    const auto sign = static_cast<uint32_t>(dec.Get(&models->sign, prev_sign + 2 * adjacent));
    const uint32_t cell = GetTree(
        3, [&](uint32_t node) { return dec.Get(&models->magnitude, prev_cell * 8 + node); });
    out.codes[j] = static_cast<uint8_t>(sign << 3 | cell);
    prev_sign = sign;
    prev_cell = cell;
  }
  if (absl::Status st = dec.Done("leader stream"); !st.ok()) return st;
  return out;
}

std::string EncodeCorrectionCodes(std::span<const uint8_t> codes, int bits,
                                  std::span<const uint8_t> leader_codes, EntropyModel* model) {
  assert(leader_codes.empty() || leader_codes.size() == codes.size());
  std::string out;
  RangeEncoder enc(&out);
  uint32_t prev = 0;
  for (size_t j = 0; j < codes.size(); ++j) {
    assert(codes[j] < (1u << bits));
    PutTree(codes[j], bits, [&](uint32_t node, int bit) {
      enc.Put(model,
              CorrectionContext(bits, prev, leader_codes.empty() ? 0 : leader_codes[j], node), bit);
    });
    prev = codes[j];
  }
  enc.Finish();
  return out;
}

absl::StatusOr<std::vector<uint8_t>> DecodeCorrectionCodes(std::span<const uint8_t> stream,
                                                           size_t count, int bits,
                                                           std::span<const uint8_t> leader_codes,
                                                           EntropyModel* model) {
  if (bits != 1 && bits != 2 && bits != 4) {
    return absl::InvalidArgumentError(StrCat("lgc entropy: ", bits, "-bit corrections"));
  }
  if ((!leader_codes.empty() && leader_codes.size() != count) ||
      model->contexts() != FreshCorrectionModel(bits).contexts()) {
    return absl::InvalidArgumentError("lgc entropy: a correction model of another shape");
  }
  RangeDecoder dec(stream);
  std::vector<uint8_t> codes(count);
  uint32_t prev = 0;
  for (size_t j = 0; j < count; ++j) {
    codes[j] = static_cast<uint8_t>(GetTree(bits, [&](uint32_t node) {
      return dec.Get(
          model, CorrectionContext(bits, prev, leader_codes.empty() ? 0 : leader_codes[j], node));
    }));
    prev = codes[j];
    if (dec.overran()) break;
  }
  if (absl::Status st = dec.Done("correction stream"); !st.ok()) return st;
  return codes;
}

}  // namespace fedlgc::lgc
