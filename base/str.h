// String building for messages. Debian's abseil is built with its own string_view
// (ABSL_OPTION_USE_STD_STRING_VIEW 0), so absl::StrCat does not take std::string_view;
// this small variadic StrCat takes strings, string views, integers and floats.
#ifndef FEDLGC_BASE_STR_H_
#define FEDLGC_BASE_STR_H_

#include <charconv>
#include <concepts>
#include <cstdio>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace fedlgc {
namespace str_internal {

inline void Append(std::string* out, std::string_view s) { out->append(s); }
inline void Append(std::string* out, const std::string& s) { out->append(s); }
#if !ABSL_USES_STD_STRING_VIEW
// Statuses' messages.
inline void Append(std::string* out, absl::string_view s) { out->append(s.data(), s.size()); }
#endif
inline void Append(std::string* out, const char* s) { out->append(s); }
inline void Append(std::string* out, char c) { out->push_back(c); }
inline void Append(std::string* out, bool b) { out->append(b ? "true" : "false"); }
template <std::integral T>
requires(!std::same_as<T, char> && !std::same_as<T, bool>) void Append(std::string* out, T v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}
template <std::floating_point T>
void Append(std::string* out, T v) {
  char buf[32];
  const int n = std::snprintf(buf, sizeof(buf), "%.6g", static_cast<double>(v));
  out->append(buf, static_cast<size_t>(n));
}

}  // namespace str_internal

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (str_internal::Append(&out, args), ...);
  return out;
}

template <typename... Args>
void StrAppend(std::string* out, const Args&... args) {
  (str_internal::Append(out, args), ...);
}

// Joins the elements of a range of string-like values with `sep`.
template <typename Range>
std::string StrJoin(const Range& range, std::string_view sep) {
  std::string out;
  bool first = true;
  for (const auto& e : range) {
    if (!first) out.append(sep);
    first = false;
    str_internal::Append(&out, e);
  }
  return out;
}

}  // namespace fedlgc

#endif  // FEDLGC_BASE_STR_H_
