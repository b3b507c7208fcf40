// ParamReader: typed, range-checked access to a spec's arguments.
#include "codecs/params.h"

#include <cmath>

#include "base/str.h"

namespace fedlgc::codecs {

ParamReader::ParamReader(const SpecNode& node, std::initializer_list<std::string_view> known,
                         int positional)
    : node_(node) {
  std::vector<std::string_view> seen;
  for (const SpecArg& a : node.args) {
    if (a.key.empty()) {
      positional_.push_back(&a);
      continue;
    }
    bool ok = false;
    for (std::string_view k : known) ok |= (k == a.key);
    if (!ok) {
      status_ = absl::InvalidArgumentError(
          StrCat(node.name, ": unknown parameter '", a.key, "' (column ", a.column,
                 "); known: ", known.size() ? StrJoin(known, ", ") : "none"));
      return;
    }
    for (std::string_view s : seen) {
      if (s == a.key) {
        status_ = absl::InvalidArgumentError(
            StrCat(node.name, ": parameter '", a.key, "' given twice (column ", a.column, ")"));
        return;
      }
    }
    seen.push_back(a.key);
  }
  if (positional_.size() > static_cast<size_t>(positional)) {
    status_ = absl::InvalidArgumentError(StrCat(node.name, ": takes ", positional,
                                                " positional argument(s), got ", positional_.size(),
                                                " (column ", positional_.back()->column, ")"));
  }
}

const SpecArg* ParamReader::Find(std::string_view key) const {
  for (const SpecArg& a : node_.args) {
    if (a.key == key) return &a;
  }
  return nullptr;
}

absl::Status ParamReader::Error(std::string_view key, std::string_view what) const {
  return absl::InvalidArgumentError(StrCat(node_.name, ": parameter '", key, "' ", what));
}

absl::StatusOr<int64_t> ParamReader::Int(std::string_view key, int64_t def, int64_t lo,
                                         int64_t hi) const {
  const SpecArg* a = Find(key);
  if (a == nullptr) return def;
  if (!a->is_number || std::nearbyint(a->number) != a->number || a->number < lo || a->number > hi) {
    return Error(key, StrCat("must be an integer in [", lo, ", ", hi, "], got ",
                             a->is_number ? a->text : a->node->name));
  }
  return static_cast<int64_t>(a->number);
}

absl::StatusOr<double> ParamReader::Real(std::string_view key, double def, double lo,
                                         double hi) const {
  const SpecArg* a = Find(key);
  if (a == nullptr) return def;
  if (!a->is_number || !(a->number >= lo && a->number <= hi)) {
    return Error(key,
                 StrCat("must be a number in [", FormatSpecNumber(lo), ", ", FormatSpecNumber(hi),
                        "], got ", a->is_number ? a->text : a->node->name));
  }
  return a->number;
}

absl::StatusOr<bool> ParamReader::Flag(std::string_view key, bool def) const {
  const SpecArg* a = Find(key);
  if (a == nullptr) return def;
  if (a->is_number && (a->number == 0 || a->number == 1)) return a->number == 1;
  if (!a->is_number && a->node->IsWord()) {
    if (a->node->name == "true" || a->node->name == "on") return true;
    if (a->node->name == "false" || a->node->name == "off") return false;
  }
  return Error(key, "must be 0/1, true/false or on/off");
}

absl::StatusOr<std::string> ParamReader::Word(
    std::string_view key, std::string_view def,
    std::initializer_list<std::string_view> choices) const {
  const SpecArg* a = Find(key);
  if (a == nullptr) return std::string(def);
  if (!a->is_number && a->node->IsWord()) {
    for (std::string_view c : choices) {
      if (c == a->node->name) return std::string(c);
    }
  }
  return Error(key, StrCat("must be one of ", StrJoin(choices, ", "), ", got ",
                           a->is_number ? a->text : a->node->name));
}

absl::StatusOr<const SpecNode*> ParamReader::Node(std::string_view key) const {
  const SpecArg* a = Find(key);
  if (a == nullptr) return nullptr;
  if (a->is_number) return Error(key, StrCat("must be a codec spec, got ", a->text));
  return a->node.get();
}

absl::StatusOr<const SpecNode*> ParamReader::Positional(size_t i) const {
  if (i >= positional_.size()) return nullptr;
  const SpecArg* a = positional_[i];
  if (a->is_number) {
    return absl::InvalidArgumentError(
        StrCat(node_.name, ": expected a codec spec at column ", a->column, ", got ", a->text));
  }
  return a->node.get();
}

}  // namespace fedlgc::codecs
