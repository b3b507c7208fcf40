// The model's layout (see layout.h).
#include "codecs/layout.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "base/str.h"

namespace fedlgc::codecs {

uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

namespace {

constexpr size_t kMaxTensors = size_t{1} << 16;
constexpr size_t kMaxRank = 8;
constexpr uint64_t kMaxDim = uint64_t{1} << 40;

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '/' || c == '-';
}

absl::Status Refuse(std::string_view why) {
  return absl::InvalidArgumentError(StrCat("model layout: ", why));
}

// Reads a decimal extent in [1, kMaxDim).
bool ParseExtent(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 13) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v == 0 || v >= kMaxDim) return false;
  *out = v;
  return true;
}

}  // namespace

absl::StatusOr<ModelLayout> ModelLayout::Create(
    std::vector<std::pair<std::string, std::vector<uint64_t>>> tensors) {
  if (tensors.size() > kMaxTensors) return Refuse(StrCat(tensors.size(), " tensors"));
  ModelLayout l;
  std::set<std::string_view> names;
  for (auto& [name, shape] : tensors) {
    if (name.empty() || name.size() > 256) return Refuse("a tensor name of 1-256 characters");
    for (char c : name) {
      if (!NameChar(c)) return Refuse(StrCat("tensor name '", name, "' has a reserved character"));
    }
    if (shape.size() > kMaxRank) return Refuse(StrCat(name, ": more than 8 dimensions"));
    uint64_t size = 1;
    for (uint64_t e : shape) {
      if (e == 0 || e >= kMaxDim || size >= kMaxDim / e) {
        return Refuse(StrCat(name, ": an extent of 0 or a tensor of 2^40 coordinates"));
      }
      size *= e;
    }
    if (l.dim_ + size >= kMaxDim) return Refuse("2^40 coordinates or more in all");
    StrAppend(&l.text_, l.tensors_.empty() ? "" : ";", name, ":");
    for (size_t i = 0; i < shape.size(); ++i) StrAppend(&l.text_, i ? "x" : "", shape[i]);
    l.tensors_.push_back(TensorSlot{std::move(name), std::move(shape), l.dim_, size});
    l.dim_ += size;
  }
  for (const TensorSlot& t : l.tensors_) {
    if (!names.insert(t.name).second) return Refuse(StrCat("tensor '", t.name, "' twice"));
  }
  l.hash_ = Fnv1a64(l.text_);
  return l;
}

absl::StatusOr<ModelLayout> ModelLayout::Parse(std::string_view text) {
  std::vector<std::pair<std::string, std::vector<uint64_t>>> tensors;
  if (!text.empty() && text.back() == ';') return Refuse("a ';' after the last tensor");
  while (!text.empty()) {
    const size_t end = std::min(text.find(';'), text.size());
    std::string_view item = text.substr(0, end);
    text = end < text.size() ? text.substr(end + 1) : std::string_view();
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos) return Refuse(StrCat("'", item, "' has no ':'"));
    std::vector<uint64_t> shape;
    std::string_view dims = item.substr(colon + 1);
    while (!dims.empty()) {
      const size_t x = std::min(dims.find('x'), dims.size());
      uint64_t e = 0;
      if (!ParseExtent(dims.substr(0, x), &e)) return Refuse(StrCat("bad shape in '", item, "'"));
      shape.push_back(e);
      if (x == dims.size()) break;
      dims = dims.substr(x + 1);
      if (dims.empty()) return Refuse(StrCat("bad shape in '", item, "'"));
    }
    if (tensors.size() >= kMaxTensors) return Refuse("too many tensors");
    tensors.emplace_back(std::string(item.substr(0, colon)), std::move(shape));
  }
  return Create(std::move(tensors));
}

ModelLayout ModelLayout::Flat(uint64_t dim) {
  if (dim == 0) return ModelLayout();
  return Create({{"flat", {dim}}}).value();
}

std::string Hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::vector<uint64_t> ModelLayout::TensorCuts() const {
  std::vector<uint64_t> cuts;
  for (size_t i = 1; i < tensors_.size(); ++i) cuts.push_back(tensors_[i].offset);
  return cuts;
}

std::string ModelLayout::HashWord() const { return StrCat("l", Hex16(hash_)); }

}  // namespace fedlgc::codecs
