// A fresh process for process_test.cc: megabyte buffers allocated on one thread and freed
// on another, round after round (as gRPC does with what it reads). Prints the minor page
// faults of the rounds after the first few. With "init", fedlgc::InitProcess() runs first.
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "base/flags.h"

namespace {

long MinorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "init") == 0) fedlgc::InitProcess();
  constexpr size_t kSizes[] = {256 << 10, 1 << 20, 3 << 20};
  constexpr int kBlocks = 24, kRounds = 30, kWarmRounds = 5;
  long before = 0, bytes = 0;
  for (int round = 0; round < kRounds; ++round) {
    if (round == kWarmRounds) before = MinorFaults();
    std::vector<char*> blocks;
    std::thread reader([&] {
      for (int i = 0; i < kBlocks; ++i) {
        char* p = static_cast<char*>(std::malloc(kSizes[i % 3]));
        std::memset(p, 1, kSizes[i % 3]);
        blocks.push_back(p);
        if (round >= kWarmRounds) bytes += static_cast<long>(kSizes[i % 3]);
      }
    });
    reader.join();
    std::thread consumer([&] {
      for (char* p : blocks) std::free(p);
    });
    consumer.join();
  }
  std::printf("%ld %ld\n", MinorFaults() - before, bytes / 4096);
  return 0;
}
