// Prometheus metrics of fedlgc: one registry and one exposer per process, metric
// families built once, and the names shared by the coordinator, the clients, the
// dashboard and the alert rules. Naming: fedlgc_<thing>_<unit>, `_total` for counters,
// low-cardinality labels (client, codec, reason, direction).
#ifndef FEDLGC_MONITORING_METRICS_H_
#define FEDLGC_MONITORING_METRICS_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "monitoring/reject_reason.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace fedlgc::monitoring {

// Thread-safe: prometheus-cpp metrics are atomic, family lookups lock internally.
class Metrics {
 public:
  Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Per-client series: only the first `max` clients to appear get series of their own;
  // the others' counters add up under client="_other" and they have no per-client gauges
  // (training loss, last round, a mode's). Quarantine gauges are always per client.
  // 0 (the default): every client.
  void SetMaxClientSeries(size_t max);

  // Starts the HTTP exposer on `address` ("127.0.0.1:0" picks a free port).
  absl::Status Serve(const std::string& address);
  // Port of the exposer; 0 before Serve.
  int port() const;
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // Bytes on the wire and their fp32 equivalent (4 bytes per coordinate carried).
  void AddUplink(const std::string& client, const std::string& codec, uint64_t wire, uint64_t raw);
  void AddDownlink(const std::string& client, uint64_t wire, uint64_t raw);
  // result: sent, retransmitted, counted, lost
  void AddChunks(const std::string& client, const std::string& result, uint64_t n);
  // stream: upload, download, events
  void AddResume(const std::string& client, const std::string& stream);
  void AddRejected(RejectReason reason);
  void ObserveEncodeSeconds(double s);
  void ObserveDecodeSeconds(double s);
  void SetTrainLoss(const std::string& client, double loss);

  // Coordinator-side round figures.
  void SetRound(uint64_t round);
  void ObserveRound(double seconds, int participants, int stragglers);
  void SetGlobalEval(double accuracy, double loss);
  // Federated evaluation (--eval clients|both): the clients' weighted accuracy and loss of
  // the last evaluated round, and the answers to its requests by outcome (reported,
  // declined, missing, refused).
  void SetFederatedEval(double accuracy, double loss);
  void AddEvalAnswers(std::string_view outcome, int n);
  // The ratio of the round's codec; the series of an earlier codec (warm-up) is removed
  // so alerts and panels see only the codec in use.
  void SetCompressionRatio(const std::string& codec, double ratio);
  void SetCompressionRatioTarget(double target);
  // 1 once the coordinator has run its last round (the CoordinatorDown alert stays quiet).
  void SetJobFinished(bool finished);
  // fedlgc_tier_info{tier, parent} 1: "root" (parent "") or "aggregator" (its parent's
  // address).
  void SetTier(const std::string& tier, const std::string& parent);
  // Rounds by how they closed: "complete" (every participant done) or "deadline".
  void CountRound(bool hit_deadline);
  void SetRoundDeadline(double seconds);
  // Bytes of the last committed round by direction (uplink, downlink) and kind (wire, raw).
  void SetRoundBytes(const std::string& direction, const std::string& kind, double bytes);
  // An update counted in a commit, by the codec it came in (a codec ladder mixes them).
  void AddUpdate(const std::string& codec);
  // Buffered rounds: the versions a committed update was behind.
  void ObserveStaleness(double versions);
  // Last round in which a chunk of `client` counted. At join, the round before the
  // current one, unless this process has seen the client already.
  void SetClientLastRound(const std::string& client, uint64_t round);
  // Robustness: a candidate model the guard refused, by check (nonfinite, norm, loss);
  // a client barred from the job; updates scaled down by clipping and the round's bound.
  void AddGuardRefusal(std::string_view check);
  void SetQuarantined(const std::string& client);
  // Client side: a round this client could not take part in, by reason (nonfinite).
  void AddSkippedRound(const std::string& client, const std::string& reason);
  // Client side, compressed downlink: a chain of deltas that did not rebuild the
  // coordinator's model (reason: mismatch, malformed), recovered by a full download.
  void AddDownlinkFallback(const std::string& client, const std::string& reason);
  // Client side, compressed downlink: a global model taken whole ("full") or rebuilt from a
  // chain of deltas ("chain").
  void AddModelDownload(const std::string& client, const std::string& kind);
  void AddClipped(int updates, double bound);
  // Uploads, shares and downloads open at the coordinator.
  void SetOpenCalls(size_t open);
  // Calls cancelled for going without a message for the idle timeout.
  void AddIdleCancelled(int calls);
  void JoinClient(const std::string& client, uint64_t current_round);
  // Creates the zero-valued series of a client (chunks, resumes) and of every rejection
  // reason, so dashboards and alerts see 0 rather than no data before the first event.
  void InitClient(const std::string& client);
  void InitRejectReasons();

  // A mode's own series (LSGD's leader, SGP's consensus distance; docs/adding-a-mode.md):
  // the mode registers its families when it is made, on this process's registry, under a
  // name of the form above (the same name again gives the same family).
  prometheus::Family<prometheus::Gauge>& GaugeFamily(const std::string& name,
                                                     const std::string& help);
  prometheus::Family<prometheus::Counter>& CounterFamily(const std::string& name,
                                                         const std::string& help);
  // The client label of a counter: the client, or "_other" past SetMaxClientSeries.
  std::string CounterClient(const std::string& client);
  // Whether the client has series of its own (set its gauges only then).
  bool OwnSeries(const std::string& client) { return CounterClient(client) == client; }

 private:
  absl::Mutex clients_mu_;
  size_t max_client_series_ ABSL_GUARDED_BY(clients_mu_) = 0;
  std::set<std::string> own_series_ ABSL_GUARDED_BY(clients_mu_);
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  prometheus::Family<prometheus::Counter>& uplink_wire_;
  prometheus::Family<prometheus::Counter>& uplink_raw_;
  prometheus::Family<prometheus::Counter>& downlink_wire_;
  prometheus::Family<prometheus::Counter>& downlink_raw_;
  prometheus::Family<prometheus::Counter>& chunks_;
  prometheus::Family<prometheus::Counter>& resumes_;
  prometheus::Family<prometheus::Counter>& rejected_;
  prometheus::Family<prometheus::Histogram>& encode_seconds_;
  prometheus::Family<prometheus::Histogram>& decode_seconds_;
  prometheus::Family<prometheus::Gauge>& train_loss_;
  prometheus::Family<prometheus::Gauge>& round_;
  prometheus::Family<prometheus::Histogram>& round_seconds_;
  prometheus::Family<prometheus::Gauge>& participants_;
  prometheus::Family<prometheus::Gauge>& stragglers_;
  prometheus::Family<prometheus::Gauge>& accuracy_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Gauge>& ratio_;
  prometheus::Family<prometheus::Gauge>& ratio_target_;
  prometheus::Family<prometheus::Counter>& rounds_;
  prometheus::Family<prometheus::Gauge>& deadline_;
  prometheus::Family<prometheus::Gauge>& round_bytes_;
  prometheus::Family<prometheus::Gauge>& client_last_round_;
  prometheus::Family<prometheus::Gauge>& job_finished_;
  prometheus::Family<prometheus::Gauge>& tier_;
  prometheus::Family<prometheus::Counter>& skipped_rounds_;
  prometheus::Family<prometheus::Counter>& downlink_fallbacks_;
  prometheus::Family<prometheus::Counter>& model_downloads_;
  prometheus::Family<prometheus::Gauge>& open_calls_;
  prometheus::Family<prometheus::Counter>& idle_cancelled_;
  // Registered by RegisterRobustness and RegisterPopulation (the latter with the series
  // that start at 0), from the constructor.
  void RegisterRobustness();
  void RegisterPopulation();
  void RegisterEvaluation();
  prometheus::Family<prometheus::Counter>* guard_refusals_ = nullptr;
  prometheus::Family<prometheus::Gauge>* federated_accuracy_ = nullptr;
  prometheus::Family<prometheus::Gauge>* federated_loss_ = nullptr;
  prometheus::Family<prometheus::Counter>* eval_answers_ = nullptr;
  prometheus::Family<prometheus::Gauge>* quarantined_ = nullptr;
  prometheus::Family<prometheus::Gauge>* quarantined_clients_ = nullptr;
  prometheus::Family<prometheus::Counter>* clipped_ = nullptr;
  prometheus::Family<prometheus::Gauge>* clip_bound_ = nullptr;
  prometheus::Family<prometheus::Counter>* updates_ = nullptr;
  prometheus::Family<prometheus::Histogram>* staleness_ = nullptr;
  absl::Mutex ratio_mu_;
  prometheus::Gauge* ratio_gauge_ ABSL_GUARDED_BY(ratio_mu_) = nullptr;
  std::string ratio_codec_ ABSL_GUARDED_BY(ratio_mu_);
};

}  // namespace fedlgc::monitoring

#endif  // FEDLGC_MONITORING_METRICS_H_
