// Clipping and robust aggregators (see robust.h).
#include "coordinator/robust.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/spec.h"
#include "base/str.h"
#include "codecs/params.h"

namespace fedlgc::coordinator {
namespace {


struct KindName {
  AggregatorKind kind;
  std::string_view name;
};
constexpr KindName kKinds[] = {
    {AggregatorKind::kMean, "mean"},         {AggregatorKind::kStreaming, "streaming"},
    {AggregatorKind::kMedian, "median"},     {AggregatorKind::kTrimmedMean, "trimmed_mean"},
    {AggregatorKind::kKrum, "krum"},         {AggregatorKind::kBulyan, "bulyan"},
};

std::string_view NameOf(AggregatorKind kind) {
  for (const KindName& k : kKinds) {
    if (k.kind == kind) return k.name;
  }
  return "?";
}

// The complete contributions, the ones robust aggregators take.
std::vector<const Contribution*> Complete(std::span<const Contribution> updates) {
  std::vector<const Contribution*> out;
  for (const Contribution& c : updates) {
    if (c.complete && c.weight > 0) out.push_back(&c);
  }
  return out;
}

double Factor(const Clipping& clipping, const std::string& client) {
  auto it = clipping.factors.find(client);
  return it == clipping.factors.end() ? 1.0 : it->second;
}

// Weighted mean of `chosen`, each over its ranges; compact contributions are filled into
// one scratch vector in turn.
absl::Status WeightedMean(std::span<const Contribution* const> chosen, const Clipping& clipping,
                          uint64_t dim, Aggregated* out) {
  std::vector<double> sum(dim, 0.0), weight(dim, 0.0);
  std::vector<float> scratch;
  for (const Contribution* c : chosen) {
    if (!(c->weight > 0) || c->ranges.empty()) continue;
    std::span<const float> values = c->values;
    if (c->fill) {
      scratch.resize(dim);
      if (absl::Status st = c->fill(scratch); !st.ok()) return st;
      values = scratch;
    }
    const double w = c->weight, f = Factor(clipping, c->client);
    for (const auto& [begin, end] : c->ranges) {
      for (uint64_t j = begin; j < end && j < dim; ++j) {
        sum[j] += w * f * values[j];
        weight[j] += w;
      }
    }
    out->used.insert(c->client);
  }
  out->values.assign(dim, 0.0f);
  for (uint64_t j = 0; j < dim; ++j) {
    if (weight[j] > 0) out->values[j] = static_cast<float>(sum[j] / weight[j]);
  }
  return absl::OkStatus();
}

// Per coordinate, `reduce` of the clipped values of `chosen` (sorted ascending).
template <typename Reduce>
void PerCoordinate(std::span<const Contribution* const> chosen, const Clipping& clipping,
                   uint64_t dim, Reduce reduce, Aggregated* out) {
  const size_t n = chosen.size();
  std::vector<double> factor(n);
  for (size_t i = 0; i < n; ++i) {
    factor[i] = Factor(clipping, chosen[i]->client);
    out->used.insert(chosen[i]->client);
  }
  out->values.assign(dim, 0.0f);
  std::vector<double> v(n);
  for (uint64_t j = 0; j < dim; ++j) {
    for (size_t i = 0; i < n; ++i) v[i] = factor[i] * chosen[i]->values[j];
    std::sort(v.begin(), v.end());
    out->values[j] = static_cast<float>(reduce(v));
  }
}

double MedianOfSorted(const std::vector<double>& v) {
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double SquaredDistance(std::span<const float> a, double fa, std::span<const float> b, double fb) {
  double d = 0;
  for (size_t j = 0; j < a.size(); ++j) {
    const double x = fa * a[j] - fb * b[j];
    d += x * x;
  }
  return d;
}

// Krum scores of the `members` (indices into the distance matrix), each against the
// max(1, m - f - 2) nearest other members.
std::vector<double> ScoresAmong(const std::vector<std::vector<double>>& dist,
                                const std::vector<size_t>& members, uint32_t f) {
  const size_t m = members.size();
  const size_t k = m >= f + 3 ? m - f - 2 : 1;
  std::vector<double> scores(m, 0.0);
  std::vector<double> row;
  for (size_t a = 0; a < m; ++a) {
    row.clear();
    for (size_t b = 0; b < m; ++b) {
      if (a != b) row.push_back(dist[members[a]][members[b]]);
    }
    const size_t take = std::min(k, row.size());
    std::partial_sort(row.begin(), row.begin() + static_cast<ptrdiff_t>(take), row.end());
    scores[a] = std::accumulate(row.begin(), row.begin() + static_cast<ptrdiff_t>(take), 0.0);
  }
  return scores;
}

std::vector<std::vector<double>> Distances(std::span<const Contribution* const> chosen,
                                           const Clipping& clipping) {
  const size_t n = chosen.size();
  std::vector<std::vector<double>> dist(n, std::vector<double>(n, 0.0));
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      dist[a][b] = dist[b][a] =
          SquaredDistance(chosen[a]->values, Factor(clipping, chosen[a]->client),
                          chosen[b]->values, Factor(clipping, chosen[b]->client));
    }
  }
  return dist;
}

// Indices of the `count` smallest scores (ties: the earlier index, i.e. the smaller id).
std::vector<size_t> Smallest(const std::vector<double>& scores, size_t count) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  order.resize(std::min(count, order.size()));
  return order;
}

void Krum(const AggregatorOptions& o, std::span<const Contribution* const> chosen,
          const Clipping& clipping, uint64_t dim, Aggregated* out) {
  std::vector<size_t> all(chosen.size());
  std::iota(all.begin(), all.end(), 0);
  const auto scores = ScoresAmong(Distances(chosen, clipping), all, o.f);
  const size_t keep = std::min<size_t>(o.select, chosen.size() - o.f);
  std::vector<const Contribution*> picked;
  for (size_t i : Smallest(scores, keep)) picked.push_back(chosen[i]);
  // Krum's contributions are whole (AggregateUpdates refuses compact ones): nothing to fill.
  WeightedMean(picked, clipping, dim, out).IgnoreError();
}

void Bulyan(const AggregatorOptions& o, std::span<const Contribution* const> chosen,
            const Clipping& clipping, uint64_t dim, Aggregated* out) {
  const size_t n = chosen.size();
  const size_t theta = n - 2 * o.f;
  const size_t beta = theta - 2 * o.f;
  const auto dist = Distances(chosen, clipping);
  std::vector<size_t> rest(n);
  std::iota(rest.begin(), rest.end(), 0);
  std::vector<const Contribution*> picked;
  while (picked.size() < theta) {
    const auto scores = ScoresAmong(dist, rest, o.f);
    const size_t best = Smallest(scores, 1).front();
    picked.push_back(chosen[rest[best]]);
    rest.erase(rest.begin() + static_cast<ptrdiff_t>(best));
  }
  std::sort(picked.begin(), picked.end(),
            [](const Contribution* a, const Contribution* b) { return a->client < b->client; });
  PerCoordinate(
      picked, clipping, dim,
      [&](const std::vector<double>& v) {
        const double med = MedianOfSorted(v);
        // The beta values closest to the median: a window of the sorted values.
        size_t lo = 0;
        double best = std::numeric_limits<double>::infinity();
        for (size_t s = 0; s + beta <= v.size(); ++s) {
          const double spread = std::max(std::abs(v[s] - med), std::abs(v[s + beta - 1] - med));
          if (spread < best) {
            best = spread;
            lo = s;
          }
        }
        double sum = 0;
        for (size_t i = lo; i < lo + beta; ++i) sum += v[i];
        return sum / static_cast<double>(beta);
      },
      out);
}

}  // namespace

absl::StatusOr<AggregatorOptions> AggregatorOptions::Parse(std::string_view spec, double clip) {
  auto node = ParseSpec(spec);
  if (!node.ok()) return node.status();
  AggregatorOptions o;
  o.clip = clip;
  if (!(clip >= 0) || !std::isfinite(clip) || (clip > 0 && clip < 1)) {
    return absl::InvalidArgumentError("--clip-multiplier must be 0 (off) or at least 1");
  }
  const KindName* kind = nullptr;
  for (const KindName& k : kKinds) {
    if (node->name == k.name) kind = &k;
  }
  if (kind == nullptr) {
    return absl::InvalidArgumentError(
        StrCat("unknown aggregator \"", node->name,
               "\": expected mean, streaming, median, trimmed_mean, krum or bulyan"));
  }
  o.kind = kind->kind;
  switch (o.kind) {
    case AggregatorKind::kTrimmedMean: {
      codecs::ParamReader p(*node, {"trim"});
      if (!p.status().ok()) return p.status();
      auto trim = p.Real("trim", 0.1, 0, 0.49);
      if (!trim.ok()) return trim.status();
      o.trim = *trim;
      break;
    }
    case AggregatorKind::kKrum: {
      codecs::ParamReader p(*node, {"f", "select"});
      if (!p.status().ok()) return p.status();
      auto f = p.Int("f", 1, 0, 1000);
      auto select = p.Int("select", 1, 1, 100000);
      if (!f.ok()) return f.status();
      if (!select.ok()) return select.status();
      o.f = static_cast<uint32_t>(*f);
      o.select = static_cast<uint32_t>(*select);
      break;
    }
    case AggregatorKind::kBulyan: {
      codecs::ParamReader p(*node, {"f"});
      if (!p.status().ok()) return p.status();
      auto f = p.Int("f", 1, 0, 1000);
      if (!f.ok()) return f.status();
      o.f = static_cast<uint32_t>(*f);
      break;
    }
    default: {
      codecs::ParamReader p(*node, {});
      if (!p.status().ok()) return p.status();
    }
  }
  return o;
}

std::string AggregatorOptions::Spec() const {
  switch (kind) {
    case AggregatorKind::kTrimmedMean:
      return StrCat("trimmed_mean(trim=", FormatSpecNumber(trim), ")");
    case AggregatorKind::kKrum:
      return StrCat("krum(f=", f, ",select=", select, ")");
    case AggregatorKind::kBulyan:
      return StrCat("bulyan(f=", f, ")");
    default:
      return std::string(NameOf(kind));
  }
}

size_t AggregatorOptions::MinUpdates() const {
  switch (kind) {
    case AggregatorKind::kKrum:
      return std::max<size_t>(2 * f + 3, select + f);
    case AggregatorKind::kBulyan:
      return 4 * f + 3;
    default:
      return 1;
  }
}

double L2Norm(std::span<const float> v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

double LowerMedian(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t k = (v.size() - 1) / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(k), v.end());
  return v[k];
}

namespace {

// The norms of the contributions (a compact one's as given), each with factor 1.
Clipping NormsOf(std::span<const Contribution> updates) {
  Clipping c;
  for (const Contribution& u : updates) {
    c.norms[u.client] = u.norm >= 0 ? u.norm : L2Norm(u.values);
    c.factors[u.client] = 1.0;
  }
  return c;
}

// Scales down every update whose norm exceeds `bound` to it.
void Bound(double bound, Clipping* c) {
  c->bound = bound;
  for (auto& [client, f] : c->factors) {
    const double n = c->norms[client];
    if (n > bound) {
      f = bound > 0 ? bound / n : 0.0;
      ++c->clipped;
    }
  }
}

}  // namespace

Clipping ClipByMedian(std::span<const Contribution> updates, double multiplier) {
  Clipping c = NormsOf(updates);
  if (!(multiplier > 0) || updates.empty()) return c;
  // A partial update's norm is of what arrived: the complete ones set the bound.
  std::vector<double> complete, all;
  for (const Contribution& u : updates) {
    all.push_back(c.norms[u.client]);
    if (u.complete) complete.push_back(c.norms[u.client]);
  }
  Bound(multiplier * LowerMedian(complete.empty() ? all : complete), &c);
  return c;
}

Clipping ClipAt(std::span<const Contribution> updates, double bound) {
  Clipping c = NormsOf(updates);
  if (bound > 0) Bound(bound, &c);
  return c;
}

absl::StatusOr<Aggregated> AggregateUpdates(const AggregatorOptions& o,
                                            std::span<const Contribution> updates,
                                            const Clipping& clipping, uint64_t dim) {
  for (const Contribution& c : updates) {
    if (c.fill && !o.takes_partial()) {
      return absl::InvalidArgumentError(
          StrCat(o.Spec(), " needs every update whole; ", c.client, "'s is compact"));
    }
    if (!c.fill && c.values.size() != dim) {
      return absl::InvalidArgumentError(StrCat(c.client, "'s update has ", c.values.size(),
                                               " values, the model ", dim));
    }
  }
  Aggregated out;
  if (o.takes_partial()) {
    std::vector<const Contribution*> all;
    for (const Contribution& c : updates) all.push_back(&c);
    if (absl::Status st = WeightedMean(all, clipping, dim, &out); !st.ok()) return st;
    out.considered = out.used;
    return out;
  }
  const std::vector<const Contribution*> chosen = Complete(updates);
  for (const Contribution* c : chosen) out.considered.insert(c->client);
  AggregatorKind kind = o.kind;
  if (chosen.size() < o.MinUpdates()) {
    out.fallback = StrCat(o.Spec(), " needs ", o.MinUpdates(), " complete updates, the round has ",
                          chosen.size(), ": coordinate-wise median");
    kind = AggregatorKind::kMedian;
  }
  if (chosen.empty()) {
    out.values.assign(dim, 0.0f);
    return out;
  }
  switch (kind) {
    case AggregatorKind::kMedian:
      PerCoordinate(chosen, clipping, dim, MedianOfSorted, &out);
      break;
    case AggregatorKind::kTrimmedMean: {
      const size_t cut = static_cast<size_t>(std::floor(o.trim * chosen.size()));
      PerCoordinate(
          chosen, clipping, dim,
          [cut](const std::vector<double>& v) {
            double sum = 0;
            for (size_t i = cut; i < v.size() - cut; ++i) sum += v[i];
            return sum / static_cast<double>(v.size() - 2 * cut);
          },
          &out);
      break;
    }
    case AggregatorKind::kKrum:
      Krum(o, chosen, clipping, dim, &out);
      break;
    case AggregatorKind::kBulyan:
      Bulyan(o, chosen, clipping, dim, &out);
      break;
    default:
      break;
  }
  return out;
}

std::vector<double> KrumScores(const std::vector<std::vector<float>>& x, uint32_t f) {
  std::vector<Contribution> c(x.size());
  std::vector<const Contribution*> chosen;
  for (size_t i = 0; i < x.size(); ++i) {
    c[i].client = StrCat(i);
    c[i].values = x[i];
    chosen.push_back(&c[i]);
  }
  std::vector<size_t> all(x.size());
  std::iota(all.begin(), all.end(), 0);
  return ScoresAmong(Distances(chosen, Clipping{}), all, f);
}

}  // namespace fedlgc::coordinator
