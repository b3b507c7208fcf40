// A small leveled logger: one line per message on stderr,
//
//   W 2026-11-28T19:30:01.123Z coordinator: round 7: 2 SGP sender(s) gone
//
// the level's letter (D, I, W, E), the UTC time to the millisecond, who speaks (the
// component, or a client's id where many clients share a log) and the message. Messages
// below the process's level (--log-level; info by default) are not formatted at all.
// Thread-safe: a line is written with one write(2), so lines from threads never interleave.
#ifndef FEDLGC_BASE_LOG_H_
#define FEDLGC_BASE_LOG_H_

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"

namespace fedlgc::log {

enum class Level : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// The process's level: messages below it are dropped. Default kInfo.
void SetLevel(Level level);
Level GetLevel();
inline bool Enabled(Level level) { return static_cast<int>(level) >= static_cast<int>(GetLevel()); }

// "debug", "info", "warning" or "error" (what --log-level takes).
absl::StatusOr<Level> ParseLevel(std::string_view name);
std::string_view LevelName(Level level);

// Writes one line (see above) to the sink, stderr unless a test set another.
void Write(Level level, std::string_view who, std::string_view message);

// Where lines go: a test captures them with SetSinkForTest and restores stderr with
// SetSinkForTest(nullptr). The sink gets the whole line, newline included.
using Sink = std::function<void(Level level, std::string_view line)>;
void SetSinkForTest(Sink sink);

template <typename... Args>
void Debug(std::string_view who, const absl::FormatSpec<Args...>& format, const Args&... args) {
  if (Enabled(Level::kDebug)) Write(Level::kDebug, who, absl::StrFormat(format, args...));
}
template <typename... Args>
void Info(std::string_view who, const absl::FormatSpec<Args...>& format, const Args&... args) {
  if (Enabled(Level::kInfo)) Write(Level::kInfo, who, absl::StrFormat(format, args...));
}
template <typename... Args>
void Warning(std::string_view who, const absl::FormatSpec<Args...>& format, const Args&... args) {
  if (Enabled(Level::kWarning)) Write(Level::kWarning, who, absl::StrFormat(format, args...));
}
template <typename... Args>
void Error(std::string_view who, const absl::FormatSpec<Args...>& format, const Args&... args) {
  if (Enabled(Level::kError)) Write(Level::kError, who, absl::StrFormat(format, args...));
}

}  // namespace fedlgc::log

#endif  // FEDLGC_BASE_LOG_H_
