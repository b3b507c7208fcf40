// Metric families and the exposer (see metrics.h).
#include "monitoring/metrics.h"

#include "base/str.h"
#include "prometheus/counter.h"

namespace fedlgc::monitoring {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

Histogram::BucketBoundaries SecondsBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
          0.5,    1,     2.5,    5,     10,   30,    60,   120};
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      uplink_wire_(BuildCounter()
                       .Name("fedlgc_uplink_wire_bytes_total")
                       .Help("Update bytes sent by clients, as framed on the wire")
                       .Register(*registry_)),
      uplink_raw_(BuildCounter()
                      .Name("fedlgc_uplink_raw_bytes_total")
                      .Help("fp32-equivalent bytes of the coordinates those updates carried")
                      .Register(*registry_)),
      downlink_wire_(BuildCounter()
                         .Name("fedlgc_downlink_wire_bytes_total")
                         .Help("Model bytes sent to clients")
                         .Register(*registry_)),
      downlink_raw_(BuildCounter()
                        .Name("fedlgc_downlink_raw_bytes_total")
                        .Help("fp32-equivalent bytes of the models sent to clients")
                        .Register(*registry_)),
      chunks_(BuildCounter()
                  .Name("fedlgc_chunks_total")
                  .Help("Update chunks by result: sent, retransmitted, counted, lost, dropped")
                  .Register(*registry_)),
      resumes_(BuildCounter()
                   .Name("fedlgc_stream_resumes_total")
                   .Help("Streams resumed after a disconnect, by stream")
                   .Register(*registry_)),
      rejected_(BuildCounter()
                    .Name("fedlgc_rejected_total")
                    .Help("Chunks or requests refused, by reason")
                    .Register(*registry_)),
      encode_seconds_(BuildHistogram()
                          .Name("fedlgc_encode_seconds")
                          .Help("Time to encode one update")
                          .Register(*registry_)),
      decode_seconds_(BuildHistogram()
                          .Name("fedlgc_decode_seconds")
                          .Help("Time to validate and decode one chunk")
                          .Register(*registry_)),
      train_loss_(BuildGauge()
                      .Name("fedlgc_train_loss")
                      .Help("Running training loss (mean of the last 10 batches)")
                      .Register(*registry_)),
      round_(BuildGauge().Name("fedlgc_round").Help("Current round").Register(*registry_)),
      round_seconds_(BuildHistogram()
                         .Name("fedlgc_round_duration_seconds")
                         .Help("Wall time from round start to commit")
                         .Register(*registry_)),
      participants_(BuildGauge()
                        .Name("fedlgc_round_participants")
                        .Help("Clients whose chunks counted in the last round")
                        .Register(*registry_)),
      stragglers_(BuildGauge()
                      .Name("fedlgc_round_stragglers")
                      .Help("Participants whose update was incomplete at the close")
                      .Register(*registry_)),
      accuracy_(BuildGauge()
                    .Name("fedlgc_global_accuracy")
                    .Help("Test accuracy of the global model")
                    .Register(*registry_)),
      loss_(BuildGauge()
                .Name("fedlgc_global_loss")
                .Help("Test loss of the global model")
                .Register(*registry_)),
      ratio_(BuildGauge()
                 .Name("fedlgc_compression_ratio")
                 .Help("Raw fp32 bytes over wire bytes of the last round, by codec")
                 .Register(*registry_)),
      ratio_target_(BuildGauge()
                        .Name("fedlgc_compression_ratio_target")
                        .Help("Compression ratio the job is expected to reach (--ratio-target)")
                        .Register(*registry_)),
      rounds_(BuildCounter()
                  .Name("fedlgc_rounds_total")
                  .Help("Committed rounds by how they closed: complete or deadline")
                  .Register(*registry_)),
      deadline_(BuildGauge()
                    .Name("fedlgc_round_deadline_seconds")
                    .Help("Seconds a round may stay open (--round-timeout)")
                    .Register(*registry_)),
      round_bytes_(BuildGauge()
                       .Name("fedlgc_round_bytes")
                       .Help("Bytes of the last committed round by direction and kind (wire, raw)")
                       .Register(*registry_)),
      client_last_round_(BuildGauge()
                             .Name("fedlgc_client_last_round")
                             .Help("Last round in which a chunk of the client counted")
                             .Register(*registry_)),
      job_finished_(BuildGauge()
                        .Name("fedlgc_job_finished")
                        .Help("1 once the coordinator has run the job's last round")
                        .Register(*registry_)),
      tier_(BuildGauge()
                .Name("fedlgc_tier_info")
                .Help("1, labelled with where this coordinator stands in a tree: tier (root or "
                      "aggregator) and its parent's address")
                .Register(*registry_)),
      guard_refusals_(BuildCounter()
                          .Name("fedlgc_guard_refusals_total")
                          .Help("Candidate models the model guard refused, by check "
                                "(nonfinite, norm, loss)")
                          .Register(*registry_)),
      quarantined_(BuildGauge()
                       .Name("fedlgc_client_quarantined")
                       .Help("1 for a client barred from the job by the model guard")
                       .Register(*registry_)),
      quarantined_clients_(BuildGauge()
                               .Name("fedlgc_quarantined_clients")
                               .Help("Clients barred from the job by the model guard")
                               .Register(*registry_)),
      clipped_(BuildCounter()
                   .Name("fedlgc_clipped_updates_total")
                   .Help("Updates scaled down (or, SGP, withheld) by norm clipping")
                   .Register(*registry_)),
      clip_bound_(BuildGauge()
                      .Name("fedlgc_clip_bound")
                      .Help("The last round's clipping bound on an update's L2 norm (0: none)")
                      .Register(*registry_)),
      skipped_rounds_(BuildCounter()
                          .Name("fedlgc_client_skipped_rounds_total")
                          .Help("Rounds a client could not take part in, by reason (nonfinite: "
                                "a model or update that is not finite)")
                          .Register(*registry_)),
      downlink_fallbacks_(BuildCounter()
                              .Name("fedlgc_downlink_fallbacks_total")
                              .Help("Compressed downloads that did not rebuild the "
                                    "coordinator's model, recovered by a full download, by "
                                    "reason (mismatch, malformed)")
                              .Register(*registry_)),
      model_downloads_(BuildCounter()
                           .Name("fedlgc_model_downloads_total")
                           .Help("Global models a client took under a compressed downlink, by "
                                 "kind (full: the model whole; chain: rebuilt from deltas)")
                           .Register(*registry_)),
      open_calls_(BuildGauge()
                      .Name("fedlgc_open_calls")
                      .Help("Uploads, shares and downloads open at the coordinator")
                      .Register(*registry_)),
      idle_cancelled_(BuildCounter()
                          .Name("fedlgc_idle_calls_cancelled_total")
                          .Help("Uploads, shares and downloads cancelled after the idle "
                                "timeout without a message read or written")
                          .Register(*registry_)) {
  open_calls_.Add({}).Set(0);
  idle_cancelled_.Add({});
}

absl::Status Metrics::Serve(const std::string& address) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address);
    exposer_->RegisterCollectable(registry_);
  } catch (const std::exception& e) {
    return absl::UnavailableError(StrCat("metrics exposer on ", address, ": ", e.what()));
  }
  return absl::OkStatus();
}

int Metrics::port() const {
  if (!exposer_) return 0;
  const auto ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

void Metrics::AddUplink(const std::string& client, const std::string& codec, uint64_t wire,
                        uint64_t raw) {
  uplink_wire_.Add({{"client", CounterClient(client)}, {"codec", codec}})
      .Increment(static_cast<double>(wire));
  uplink_raw_.Add({{"client", CounterClient(client)}, {"codec", codec}})
      .Increment(static_cast<double>(raw));
}

void Metrics::AddDownlink(const std::string& client, uint64_t wire, uint64_t raw) {
  downlink_wire_.Add({{"client", CounterClient(client)}}).Increment(static_cast<double>(wire));
  downlink_raw_.Add({{"client", CounterClient(client)}}).Increment(static_cast<double>(raw));
}

void Metrics::AddChunks(const std::string& client, const std::string& result, uint64_t n) {
  chunks_.Add({{"client", CounterClient(client)}, {"result", result}})
      .Increment(static_cast<double>(n));
}

void Metrics::AddResume(const std::string& client, const std::string& stream) {
  resumes_.Add({{"client", CounterClient(client)}, {"stream", stream}}).Increment();
}

void Metrics::AddRejected(RejectReason reason) {
  rejected_.Add({{"reason", std::string(ReasonLabel(reason))}}).Increment();
}

void Metrics::ObserveEncodeSeconds(double s) {
  encode_seconds_.Add({}, SecondsBuckets()).Observe(s);
}
void Metrics::ObserveDecodeSeconds(double s) {
  decode_seconds_.Add({}, SecondsBuckets()).Observe(s);
}

void Metrics::SetTrainLoss(const std::string& client, double loss) {
  if (!OwnSeries(client)) return;
  train_loss_.Add({{"client", client}}).Set(loss);
}

void Metrics::SetRound(uint64_t round) { round_.Add({}).Set(static_cast<double>(round)); }

void Metrics::ObserveRound(double seconds, int participants, int stragglers) {
  round_seconds_.Add({}, SecondsBuckets()).Observe(seconds);
  participants_.Add({}).Set(participants);
  stragglers_.Add({}).Set(stragglers);
}

void Metrics::SetGlobalEval(double accuracy, double loss) {
  accuracy_.Add({}).Set(accuracy);
  loss_.Add({}).Set(loss);
}

void Metrics::SetCompressionRatio(const std::string& codec, double ratio) {
  absl::MutexLock lock(&ratio_mu_);
  if (ratio_gauge_ != nullptr && ratio_codec_ != codec) ratio_.Remove(ratio_gauge_);
  ratio_gauge_ = &ratio_.Add({{"codec", codec}});
  ratio_codec_ = codec;
  ratio_gauge_->Set(ratio);
}

void Metrics::SetCompressionRatioTarget(double target) { ratio_target_.Add({}).Set(target); }

void Metrics::SetJobFinished(bool finished) { job_finished_.Add({}).Set(finished ? 1 : 0); }

void Metrics::SetTier(const std::string& tier, const std::string& parent) {
  tier_.Add({{"tier", tier}, {"parent", parent}}).Set(1);
}

void Metrics::CountRound(bool hit_deadline) {
  rounds_.Add({{"closed", hit_deadline ? "deadline" : "complete"}}).Increment();
}

void Metrics::SetRoundDeadline(double seconds) { deadline_.Add({}).Set(seconds); }

void Metrics::SetRoundBytes(const std::string& direction, const std::string& kind, double bytes) {
  round_bytes_.Add({{"direction", direction}, {"kind", kind}}).Set(bytes);
}

void Metrics::SetClientLastRound(const std::string& client, uint64_t round) {
  if (!OwnSeries(client)) return;
  client_last_round_.Add({{"client", client}}).Set(static_cast<double>(round));
}

prometheus::Family<prometheus::Gauge>& Metrics::GaugeFamily(const std::string& name,
                                                            const std::string& help) {
  return BuildGauge().Name(name).Help(help).Register(*registry_);
}

prometheus::Family<prometheus::Counter>& Metrics::CounterFamily(const std::string& name,
                                                                const std::string& help) {
  return BuildCounter().Name(name).Help(help).Register(*registry_);
}

void Metrics::AddGuardRefusal(std::string_view check) {
  guard_refusals_.Add({{"check", std::string(check)}}).Increment();
}

void Metrics::SetQuarantined(const std::string& client) {
  const bool fresh = !quarantined_.Has({{"client", client}});
  quarantined_.Add({{"client", client}}).Set(1);
  if (fresh) quarantined_clients_.Add({}).Increment();
}

void Metrics::AddSkippedRound(const std::string& client, const std::string& reason) {
  skipped_rounds_.Add({{"client", CounterClient(client)}, {"reason", reason}}).Increment();
}

void Metrics::AddModelDownload(const std::string& client, const std::string& kind) {
  model_downloads_.Add({{"client", CounterClient(client)}, {"kind", kind}}).Increment();
}

void Metrics::AddDownlinkFallback(const std::string& client, const std::string& reason) {
  downlink_fallbacks_.Add({{"client", CounterClient(client)}, {"reason", reason}}).Increment();
}

void Metrics::SetOpenCalls(size_t open) { open_calls_.Add({}).Set(static_cast<double>(open)); }

void Metrics::AddIdleCancelled(int calls) { idle_cancelled_.Add({}).Increment(calls); }

void Metrics::AddClipped(int updates, double bound) {
  clipped_.Add({}).Increment(updates);
  clip_bound_.Add({}).Set(bound);
}

void Metrics::SetMaxClientSeries(size_t max) {
  absl::MutexLock lock(&clients_mu_);
  max_client_series_ = max;
}

std::string Metrics::CounterClient(const std::string& client) {
  absl::MutexLock lock(&clients_mu_);
  if (max_client_series_ == 0 || own_series_.count(client)) return client;
  if (own_series_.size() < max_client_series_) {
    own_series_.insert(client);
    return client;
  }
  return "_other";
}

void Metrics::JoinClient(const std::string& client, uint64_t current_round) {
  InitClient(client);
  if (OwnSeries(client) && !client_last_round_.Has({{"client", client}})) {
    SetClientLastRound(client, current_round > 0 ? current_round - 1 : 0);
  }
}

void Metrics::InitClient(const std::string& client) {
  for (const char* result : {"sent", "retransmitted", "counted", "lost", "dropped"}) {
    chunks_.Add({{"client", CounterClient(client)}, {"result", result}});
  }
  for (const char* stream : {"upload", "download", "events"}) {
    resumes_.Add({{"client", CounterClient(client)}, {"stream", stream}});
  }
  skipped_rounds_.Add({{"client", CounterClient(client)}, {"reason", "nonfinite"}});
  for (const char* reason : {"mismatch", "malformed"}) {
    downlink_fallbacks_.Add({{"client", CounterClient(client)}, {"reason", reason}});
  }
}

void Metrics::InitRejectReasons() {
  for (const RejectReasonInfo& r : kRejectReasons) {
    rejected_.Add({{"reason", std::string(r.label)}});
  }
  for (const char* closed : {"complete", "deadline"}) rounds_.Add({{"closed", closed}});
  for (const char* check : {"nonfinite", "norm", "loss"}) guard_refusals_.Add({{"check", check}});
  quarantined_clients_.Add({});
  clipped_.Add({});
}

}  // namespace fedlgc::monitoring
