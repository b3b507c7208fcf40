// The leveled logger (see log.h).
#include "base/log.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <mutex>

#include "base/str.h"

namespace fedlgc::log {

namespace {

std::atomic<int> g_level{static_cast<int>(Level::kInfo)};

std::mutex& SinkMutex() {
  static std::mutex mu;
  return mu;
}
Sink& TestSink() {
  static Sink sink;
  return sink;
}

constexpr char kLetters[] = {'D', 'I', 'W', 'E'};
constexpr std::string_view kNames[] = {"debug", "info", "warning", "error"};

// "2026-11-28T19:30:01.123Z"
std::string UtcNow() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const long long ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];  // room for any int the fields could hold (-Wformat-truncation)
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

void WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to report a failed log write
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

void SetLevel(Level level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }

Level GetLevel() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }

absl::StatusOr<Level> ParseLevel(std::string_view name) {
  for (int i = 0; i < 4; ++i) {
    if (name == kNames[i]) return static_cast<Level>(i);
  }
  return absl::InvalidArgumentError(
      StrCat("log level '", name, "': expected debug, info, warning or error"));
}

std::string_view LevelName(Level level) { return kNames[static_cast<int>(level)]; }

void Write(Level level, std::string_view who, std::string_view message) {
  std::string line;
  line.reserve(32 + who.size() + message.size());
  line += kLetters[static_cast<int>(level)];
  line += ' ';
  line += UtcNow();
  line += ' ';
  if (!who.empty()) {
    line += who;
    line += ": ";
  }
  line += message;
  if (line.back() != '\n') line += '\n';
  std::lock_guard<std::mutex> lock(SinkMutex());
  if (TestSink()) {
    TestSink()(level, line);
    return;
  }
  WriteAll(STDERR_FILENO, line);
}

void SetSinkForTest(Sink sink) {
  std::lock_guard<std::mutex> lock(SinkMutex());
  TestSink() = std::move(sink);
}

}  // namespace fedlgc::log
