// Failpoints (see failpoint.h).
#include "core/failpoint.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace fedlgc::core {

void Failpoint(std::string_view name, uint64_t round) {
  const char* set = std::getenv("FEDLGC_FAILPOINT");
  if (set == nullptr) return;
  const std::string want = std::string(name) + ":" + std::to_string(round);
  if (want != set) return;
  std::fprintf(stderr, "failpoint %s reached: exiting\n", want.c_str());
  std::fflush(stderr);
  ::_exit(99);
}

}  // namespace fedlgc::core
