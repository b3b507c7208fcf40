// Failpoints (see failpoint.h).
#include "base/failpoint.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/log.h"

namespace fedlgc {

void Failpoint(std::string_view name, uint64_t round) {
  const char* set = std::getenv("FEDLGC_FAILPOINT");
  if (set == nullptr) return;
  const std::string want = std::string(name) + ":" + std::to_string(round);
  if (want != set) return;
  log::Error("", "failpoint %s reached: exiting", want);
  std::fflush(stderr);
  ::_exit(99);
}

}  // namespace fedlgc
