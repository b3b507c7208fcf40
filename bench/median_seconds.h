// The median wall time of `reps` calls of f: benchmarks report medians, so that one
// noisy run on a shared machine does not move a figure.
#ifndef FEDLGC_BENCH_MEDIAN_SECONDS_H_
#define FEDLGC_BENCH_MEDIAN_SECONDS_H_

#include <algorithm>
#include <chrono>
#include <vector>

namespace fedlgc::bench {

template <typename F>
double MedianSeconds(int reps, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace fedlgc::bench

#endif  // FEDLGC_BENCH_MEDIAN_SECONDS_H_
