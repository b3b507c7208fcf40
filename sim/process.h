// A child process started with fork/exec, its output appended to a log file. Used by
// fedlgc-sim and the integration tests. Killed with SIGKILL if still running when
// destroyed, and sent SIGTERM by the kernel when the thread that started it ends (its
// parent died: PR_SET_PDEATHSIG), so a killed parent leaves no orphans.
#ifndef FEDLGC_SIM_PROCESS_H_
#define FEDLGC_SIM_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace fedlgc::sim {

// Not thread-safe.
class ChildProcess {
 public:
  ChildProcess(std::vector<std::string> argv, const std::string& log_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  void Kill(int signal);
  // Exit code (128 + signal when killed), or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

}  // namespace fedlgc::sim

#endif  // FEDLGC_SIM_PROCESS_H_
