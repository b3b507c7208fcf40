#include "core/statistics.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "base/str.h"

namespace fedlgc::core {

std::vector<StatisticsPair> StatisticsPairs(const codecs::ModelLayout& layout) {
  // The rule of core/model.cc and python/fedlgc/_flat.py: a name that ends in running_mean
  // and the same name ending in running_var, of the same size.
  std::map<std::string, const codecs::TensorSlot*> by_name;
  for (const codecs::TensorSlot& t : layout.tensors()) by_name[t.name] = &t;
  std::vector<StatisticsPair> out;
  for (const codecs::TensorSlot& t : layout.tensors()) {
    if (!std::string_view(t.name).ends_with("running_mean")) continue;
    auto var = by_name.find(t.name.substr(0, t.name.size() - 4) + "var");
    if (var == by_name.end() || var->second->size != t.size) continue;
    const size_t dot = t.name.rfind('.');
    out.push_back({dot == std::string::npos ? "" : t.name.substr(0, dot), t.offset,
                   var->second->offset, t.size});
  }
  return out;
}

uint64_t StatisticsChannels(std::span<const StatisticsPair> pairs) {
  uint64_t n = 0;
  for (const StatisticsPair& p : pairs) n += p.channels;
  return n;
}

namespace {

absl::Status CheckEstimate(const StatisticsEstimate& e, size_t i, size_t n) {
  if (e.mean.size() != n || e.var.size() != n) {
    return absl::InvalidArgumentError(StrCat("estimate ", i, " has ", e.mean.size(), " means and ",
                                             e.var.size(), " variances, not ", n));
  }
  if (!(e.weight > 0) || !std::isfinite(e.weight)) {
    return absl::InvalidArgumentError(StrCat("estimate ", i, " weighs ", e.weight));
  }
  for (size_t c = 0; c < n; ++c) {
    if (!std::isfinite(e.mean[c]) || !std::isfinite(e.var[c]) || e.var[c] < 0) {
      return absl::InvalidArgumentError(
          StrCat("estimate ", i, ", channel ", c, ": mean ", e.mean[c], ", variance ", e.var[c]));
    }
  }
  return absl::OkStatus();
}

float Median(std::vector<float> v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  if (v.size() % 2 == 1) return v[mid];
  const float hi = v[mid];
  return 0.5f * (*std::max_element(v.begin(), v.begin() + mid) + hi);
}

}  // namespace

absl::Status PoolStatistics(std::span<const StatisticsEstimate> estimates, bool median,
                            std::vector<float>* mean, std::vector<float>* var) {
  if (estimates.empty()) return absl::InvalidArgumentError("no estimate to pool");
  const size_t n = estimates[0].mean.size();
  for (size_t i = 0; i < estimates.size(); ++i) {
    if (absl::Status st = CheckEstimate(estimates[i], i, n); !st.ok()) return st;
  }
  mean->assign(n, 0.0f);
  var->assign(n, 0.0f);
  for (size_t c = 0; c < n; ++c) {
    if (median) {
      std::vector<float> m, v;
      for (const StatisticsEstimate& e : estimates) {
        m.push_back(e.mean[c]);
        v.push_back(e.var[c]);
      }
      (*mean)[c] = Median(std::move(m));
      (*var)[c] = Median(std::move(v));
      continue;
    }
    double w = 0, wm = 0;
    for (const StatisticsEstimate& e : estimates) {
      w += e.weight;
      wm += e.weight * e.mean[c];
    }
    const double mu = wm / w;
    double wv = 0;
    for (const StatisticsEstimate& e : estimates) {
      const double d = e.mean[c] - mu;
      wv += e.weight * (e.var[c] + d * d);
    }
    (*mean)[c] = static_cast<float>(mu);
    (*var)[c] = static_cast<float>(wv / w);
  }
  return absl::OkStatus();
}

absl::Status WriteStatistics(std::span<const StatisticsPair> pairs, std::span<const float> mean,
                             std::span<const float> var, std::span<const uint32_t> skipped,
                             std::span<float> flat) {
  const uint64_t n = StatisticsChannels(pairs);
  if (mean.size() != n || var.size() != n) {
    return absl::InvalidArgumentError(StrCat("statistics of ", mean.size(), " means and ",
                                             var.size(), " variances for ", n, " channels"));
  }
  size_t at = 0;
  for (uint32_t p = 0; p < pairs.size(); at += pairs[p].channels, ++p) {
    if (std::find(skipped.begin(), skipped.end(), p) != skipped.end()) continue;
    const StatisticsPair& pair = pairs[p];
    if (pair.mean_at + pair.channels > flat.size() || pair.var_at + pair.channels > flat.size()) {
      return absl::InvalidArgumentError(
          StrCat("the statistics of ", pair.module, " lie outside a vector of ", flat.size()));
    }
    for (uint64_t c = 0; c < pair.channels; ++c) {
      const float v = std::max(var[at + c], 0.0f) + kStatisticsEps;
      flat[pair.mean_at + c] = mean[at + c] / std::sqrt(v);
      flat[pair.var_at + c] = std::log(v);
    }
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::core
