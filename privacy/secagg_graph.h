// The communication graph of SecAgg+ (Bell et al. 2020, "Secure Single-Server Aggregation
// with (Poly)Logarithmic Overhead"): each client of a round shares its seeds with, and
// masks against, only its neighbours, so that what a client computes and sends grows with
// log n rather than n. The graph is a Harary graph H(k, n) (a ring in which each client is
// joined to the k/2 nearest on each side) over an order of the clients drawn from a public
// seed; with k >= n - 1 everyone neighbours everyone (the original SecAgg).
#ifndef FEDLGC_PRIVACY_SECAGG_GRAPH_H_
#define FEDLGC_PRIVACY_SECAGG_GRAPH_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace fedlgc::privacy {

// The degree a round of n clients uses when none is given: the smallest even k (at most
// n - 1, and everyone up to 128 clients) for which, with each client gone with probability
// kDesignDropout and independently, the chance that some client's secret keeps fewer than
// a strict majority of its k + 1 holders is below 1e-3 (a union bound over the n clients
// of a binomial tail): 134 at 1,000 clients. A smaller degree (Bell et al.'s O(log n))
// costs less but tolerates fewer dropouts.
inline constexpr double kDesignDropout = 0.3;
int DefaultDegree(size_t n);

// Each client's neighbours (never itself), symmetric: k = min(degree, n - 1) each, rounded
// down to even when the graph is not complete. `clients` may come in any order; the graph
// depends only on the set and the seed.
std::map<std::string, std::set<std::string>> NeighbourGraph(const std::set<std::string>& clients,
                                                            int degree, uint64_t seed);

}  // namespace fedlgc::privacy

#endif  // FEDLGC_PRIVACY_SECAGG_GRAPH_H_
