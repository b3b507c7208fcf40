// SecAgg+'s neighbour graph (see secagg_graph.h).
#include "privacy/secagg_graph.h"

#include <cmath>

namespace fedlgc::privacy {
namespace {

uint64_t Mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// P(more than k - t of k holders gone), t the strict majority of k + 1 shares: a dropped
// client's key (held by its k neighbours) can no longer be rebuilt.
double TooFewLeft(int k, double p) {
  const int t = (k + 1) / 2 + 1;
  double total = 0;
  for (int j = k - t + 1; j <= k; ++j) {
    total += std::exp(std::lgamma(k + 1.0) - std::lgamma(j + 1.0) - std::lgamma(k - j + 1.0) +
                      j * std::log(p) + (k - j) * std::log1p(-p));
  }
  return total;
}

}  // namespace

int DefaultDegree(size_t n) {
  if (n <= 128) return n == 0 ? 0 : static_cast<int>(n - 1);
  for (int k = 2; k < 254; k += 2) {
    if (static_cast<double>(n) * TooFewLeft(k, kDesignDropout) < 1e-3) return k;
  }
  return 254;
}

std::map<std::string, std::set<std::string>> NeighbourGraph(const std::set<std::string>& clients,
                                                            int degree, uint64_t seed) {
  std::map<std::string, std::set<std::string>> graph;
  std::vector<std::string> order(clients.begin(), clients.end());
  const size_t n = order.size();
  for (const std::string& c : order) graph[c];
  if (n < 2 || degree <= 0) return graph;
  if (static_cast<size_t>(degree) >= n - 1) {
    for (const std::string& a : order) {
      for (const std::string& b : order) {
        if (a != b) graph[a].insert(b);
      }
    }
    return graph;
  }
  // Fisher-Yates from the public seed, over the sorted set: the order depends on nothing else.
  uint64_t state = Mix(seed ^ 0xA66E0C7A5Eull);
  for (size_t i = n - 1; i > 0; --i) {
    state = Mix(state);
    std::swap(order[i], order[static_cast<size_t>(
                            (static_cast<unsigned __int128>(state) * (i + 1)) >> 64)]);
  }
  const size_t half = static_cast<size_t>(degree) / 2;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 1; j <= half; ++j) {
      graph[order[i]].insert(order[(i + j) % n]);
      graph[order[(i + j) % n]].insert(order[i]);
    }
  }
  return graph;
}

}  // namespace fedlgc::privacy
