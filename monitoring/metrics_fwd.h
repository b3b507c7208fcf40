// Forward declarations of the metrics types, for headers that keep a pointer to a family
// a mode registered (monitoring/metrics.h in the .cc that uses it).
#ifndef FEDLGC_MONITORING_METRICS_FWD_H_
#define FEDLGC_MONITORING_METRICS_FWD_H_

namespace prometheus {
template <typename T>
class Family;
class Counter;
class Gauge;
}  // namespace prometheus

namespace fedlgc::monitoring {
class Metrics;
}  // namespace fedlgc::monitoring

#endif  // FEDLGC_MONITORING_METRICS_FWD_H_
