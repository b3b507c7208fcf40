// The model's layout: which tensor each coordinate of the flat weight vector belongs to.
// Codecs that work per tensor (PowerSGD's matrices) receive it from the job through the
// registry (registry.h); every other codec ignores it.
//
// A layout is a list of tensors, each a name and a shape, laid end to end in the flat
// vector. Its hash (64-bit FNV-1a of the canonical text) names it in a codec's spec,
// `powersgd/1(rank=2,...,layout=l<16 hex digits>)`, and so in every frame the codec
// writes: a frame made for another layout names another spec and is refused.
#ifndef FEDLGC_CODECS_LAYOUT_H_
#define FEDLGC_CODECS_LAYOUT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::codecs {

// 64-bit FNV-1a of `s`: the hash that names a layout (and GradiVeQ's bases) in specs.
uint64_t Fnv1a64(std::string_view s);
// `v` as 16 lowercase hex digits (how hashes are written in specs).
std::string Hex16(uint64_t v);

struct TensorSlot {
  std::string name;             // e.g. "conv1.weight"
  std::vector<uint64_t> shape;  // outermost first; empty for a scalar
  uint64_t offset = 0;          // first coordinate in the flat vector
  uint64_t size = 0;            // product of shape (1 for a scalar)
};

// Immutable after Create; thread-safe.
class ModelLayout {
 public:
  ModelLayout() = default;  // no tensors, dimension 0

  // Tensors in flat order. Names are [A-Za-z0-9_./-]+, unique; every extent >= 1; at
  // most 2^16 tensors of up to 8 dimensions; the total below 2^40 coordinates.
  static absl::StatusOr<ModelLayout> Create(
      std::vector<std::pair<std::string, std::vector<uint64_t>>> tensors);
  // Parses Text()'s form back.
  static absl::StatusOr<ModelLayout> Parse(std::string_view text);
  // One slot of `dim` coordinates named "flat" (for synthetic vectors).
  static ModelLayout Flat(uint64_t dim);

  const std::vector<TensorSlot>& tensors() const { return tensors_; }
  uint64_t dim() const { return dim_; }
  uint64_t hash() const { return hash_; }
  // "l" and the hash as 16 lowercase hex digits: the value of a spec's layout= parameter.
  std::string HashWord() const;
  // "name:AxBxC;name:D;..." (a scalar as "name:"); the text the hash is computed over.
  const std::string& Text() const { return text_; }
  // Where each tensor after the first begins: the EncodeOptions::cuts of P3's slicing.
  std::vector<uint64_t> TensorCuts() const;

  bool operator==(const ModelLayout& o) const { return text_ == o.text_; }

 private:
  std::vector<TensorSlot> tensors_;
  uint64_t dim_ = 0;
  uint64_t hash_ = 0;
  std::string text_;
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_LAYOUT_H_
