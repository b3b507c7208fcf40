// Stopping a process on SIGINT or SIGTERM without doing work in a signal handler: the
// handler only writes the signal's number into a pipe (async-signal-safe), and a thread of
// the watcher's own reads it and calls the stop function, which may take locks, cancel
// calls and log.
#ifndef FEDLGC_BASE_SIGNALS_H_
#define FEDLGC_BASE_SIGNALS_H_

#include <atomic>
#include <functional>
#include <thread>

namespace fedlgc {

// At most one at a time per process. Thread-safe: signal() from any thread.
class StopOnSignals final {
 public:
  // Calls `stop` once, on the watcher's thread, at the first SIGINT or SIGTERM.
  explicit StopOnSignals(std::function<void()> stop);
  // Puts the default handlers back and joins the thread.
  ~StopOnSignals();
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

  // The signal that arrived; 0 while none has.
  int signal() const { return signal_; }

 private:
  std::function<void()> stop_;
  std::atomic<int> signal_{0};
  std::thread thread_;
};

}  // namespace fedlgc

#endif  // FEDLGC_BASE_SIGNALS_H_
