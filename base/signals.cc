// Signals through a self-pipe (see signals.h).
#include "base/signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace fedlgc {
namespace {

int g_pipe[2] = {-1, -1};

void OnSignal(int signal) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signal);
  [[maybe_unused]] const ssize_t n = ::write(g_pipe[1], &byte, 1);
  errno = saved;
}

void Handle(void (*handler)(int)) {
  struct sigaction action = {};
  action.sa_handler = handler;
  ::sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

}  // namespace

StopOnSignals::StopOnSignals(std::function<void()> stop) : stop_(std::move(stop)) {
  if (::pipe2(g_pipe, O_CLOEXEC) != 0) return;  // no pipe: the default handlers stay
  thread_ = std::thread([this] {
    bool stopped = false;
    for (;;) {
      unsigned char byte = 0;
      const ssize_t n = ::read(g_pipe[0], &byte, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || byte == 0) return;  // the destructor's byte, or the pipe is gone
      signal_ = byte;
      if (!stopped) {
        stopped = true;
        stop_();
      }
    }
  });
  Handle(&OnSignal);
}

StopOnSignals::~StopOnSignals() {
  if (!thread_.joinable()) return;
  Handle(SIG_DFL);
  const unsigned char quit = 0;
  [[maybe_unused]] const ssize_t n = ::write(g_pipe[1], &quit, 1);
  thread_.join();
  ::close(g_pipe[0]);
  ::close(g_pipe[1]);
  g_pipe[0] = g_pipe[1] = -1;
}

}  // namespace fedlgc
