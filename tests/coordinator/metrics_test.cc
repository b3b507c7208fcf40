// Bounded per-client series: past --max-client-series the counters of further clients add
// up under client="_other" and their gauges are not exported; quarantines always are.
#include <map>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "monitoring/metrics.h"

namespace fedlgc::monitoring {
namespace {

// client label -> value of the family's series (summed over other labels).
std::map<std::string, double> ByClient(Metrics& m, const std::string& family) {
  std::map<std::string, double> out;
  for (const auto& fam : m.registry()->Collect()) {
    if (fam.name != family) continue;
    for (const auto& metric : fam.metric) {
      for (const auto& l : metric.label) {
        if (l.name == "client") out[l.value] += metric.counter.value + metric.gauge.value;
      }
    }
  }
  return out;
}

TEST(Metrics, PerClientSeriesStayWithinTheLimit) {
  Metrics m;
  m.SetMaxClientSeries(2);
  for (const std::string c : {"a", "b", "c", "d"}) {
    m.JoinClient(c, 3);
    m.AddUplink(c, "qsgd", 100, 400);
    m.SetTrainLoss(c, 0.5);
  }
  m.SetQuarantined("d");
  const auto up = ByClient(m, "fedlgc_uplink_wire_bytes_total");
  EXPECT_EQ(up, (std::map<std::string, double>{{"a", 100}, {"b", 100}, {"_other", 200}}));
  const auto loss = ByClient(m, "fedlgc_train_loss");
  EXPECT_EQ(loss.size(), 2u);
  EXPECT_EQ(loss.count("c"), 0u);
  EXPECT_EQ(ByClient(m, "fedlgc_client_last_round").size(), 2u);
  EXPECT_EQ(ByClient(m, "fedlgc_client_quarantined").count("d"), 1u)
      << "quarantines are always per client";
  Metrics all;
  for (const std::string c : {"a", "b", "c", "d"}) all.AddUplink(c, "qsgd", 1, 4);
  EXPECT_EQ(ByClient(all, "fedlgc_uplink_wire_bytes_total").size(), 4u) << "0: no limit";
}

}  // namespace
}  // namespace fedlgc::monitoring
