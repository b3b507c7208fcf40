// Recursive-descent parser for codec specs (grammar in spec.h).
#include "base/spec.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "base/str.h"

namespace fedlgc {
namespace {

bool IsIdentStart(char c) { return (c >= 'a' && c <= 'z') || c == '_'; }
bool IsIdentChar(char c) { return IsIdentStart(c) || (c >= '0' && c <= '9'); }
bool IsNumberStart(char c) { return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.'; }

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  absl::StatusOr<SpecNode> ParseTop() {
    SpecNode node;
    if (absl::Status st = ParseNode(0, &node); !st.ok()) return st;
    SkipSpace();
    if (pos_ != s_.size()) return Error("expected end of spec");
    return node;
  }

 private:
  absl::Status Error(std::string_view what) const {
    std::string found =
        pos_ < s_.size() ? StrCat("'", s_.substr(pos_, 1), "'") : std::string("end of spec");
    return absl::InvalidArgumentError(
        StrCat("codec spec \"", s_, "\": column ", pos_ + 1, ": ", what, ", found ", found));
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
  }
  bool Peek(char c) {
    SkipSpace();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  std::string Ident() {
    size_t b = pos_;
    while (pos_ < s_.size() && IsIdentChar(s_[pos_])) ++pos_;
    return std::string(s_.substr(b, pos_ - b));
  }

  absl::Status ParseNode(int depth, SpecNode* node) {
    if (depth >= kMaxSpecDepth) return Error("specs nest too deeply");
    SkipSpace();
    node->column = pos_ + 1;
    if (pos_ >= s_.size() || !IsIdentStart(s_[pos_])) return Error("expected a codec name");
    node->name = Ident();
    if (Peek('/')) {
      ++pos_;
      size_t b = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      uint32_t v = 0;
      auto r = std::from_chars(s_.data() + b, s_.data() + pos_, v);
      if (b == pos_ || r.ec != std::errc() || v == 0) {
        pos_ = b;
        return Error("expected a version number >= 1 after '/'");
      }
      node->version = v;
    }
    if (!Peek('(')) return absl::OkStatus();
    ++pos_;
    if (Peek(')')) {
      ++pos_;
      return absl::OkStatus();
    }
    for (;;) {
      SpecArg arg;
      if (absl::Status st = ParseArg(depth, &arg); !st.ok()) return st;
      node->args.push_back(std::move(arg));
      if (Peek(',')) {
        ++pos_;
        continue;
      }
      if (Peek(')')) {
        ++pos_;
        return absl::OkStatus();
      }
      return Error("expected ',' or ')'");
    }
  }

  absl::Status ParseArg(int depth, SpecArg* arg) {
    SkipSpace();
    arg->column = pos_ + 1;
    if (pos_ < s_.size() && IsIdentStart(s_[pos_])) {
      size_t save = pos_;
      std::string word = Ident();
      if (Peek('=')) {
        ++pos_;
        arg->key = std::move(word);
        SkipSpace();
      } else {
        pos_ = save;
      }
    }
    if (pos_ < s_.size() && IsNumberStart(s_[pos_])) return ParseNumber(arg);
    arg->node = std::make_unique<SpecNode>();
    return ParseNode(depth + 1, arg->node.get());
  }

  absl::Status ParseNumber(SpecArg* arg) {
    size_t b = pos_;
    while (pos_ < s_.size() && (IsNumberStart(s_[pos_]) || s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
    }
    std::string text(s_.substr(b, pos_ - b));
    double v = 0;
    const char* first = text.data();
    if (!text.empty() && text[0] == '+') ++first;
    if (first != text.data() && first < text.data() + text.size() &&
        (*first == '-' || *first == '+')) {
      pos_ = b;
      return Error("expected a number");
    }
    auto r = std::from_chars(first, text.data() + text.size(), v);
    if (r.ec != std::errc() || r.ptr != text.data() + text.size() || !std::isfinite(v)) {
      pos_ = b;
      return Error("expected a number");
    }
    arg->is_number = true;
    arg->number = v;
    arg->text = std::move(text);
    return absl::OkStatus();
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<SpecNode> ParseSpec(std::string_view text) {
  if (text.size() > kMaxSpecLength) {
    return absl::InvalidArgumentError(
        StrCat("codec spec is ", text.size(), " characters long; the limit is ", kMaxSpecLength));
  }
  return Parser(text).ParseTop();
}

std::string FormatSpecNumber(double v) {
  if (std::nearbyint(v) == v && std::fabs(v) < 1e15) {
    return StrCat(static_cast<int64_t>(v));
  }
  char buf[64];
  for (int prec = 6; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, v);
    double back = 0;
    std::from_chars(buf, buf + std::char_traits<char>::length(buf), back);
    if (back == v) break;
  }
  return buf;
}

std::string FormatSpec(const SpecNode& node) {
  std::string out = node.name;
  if (node.version != 0) StrAppend(&out, "/", node.version);
  if (node.args.empty()) return out;
  out += "(";
  for (size_t i = 0; i < node.args.size(); ++i) {
    const SpecArg& a = node.args[i];
    if (i > 0) out += ",";
    if (!a.key.empty()) StrAppend(&out, a.key, "=");
    out += a.is_number ? a.text : FormatSpec(*a.node);
  }
  return out + ")";
}

}  // namespace fedlgc
