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

// A metric family registered on `r` (the builders' four-line form, once).
template <typename Builder>
auto& FamilyOf(Builder builder, prometheus::Registry& r, const char* name, const char* help) {
  return builder.Name(name).Help(help).Register(r);
}
auto& CounterFamilyOf(prometheus::Registry& r, const char* name, const char* help) {
  return FamilyOf(BuildCounter(), r, name, help);
}
auto& GaugeFamilyOf(prometheus::Registry& r, const char* name, const char* help) {
  return FamilyOf(BuildGauge(), r, name, help);
}
auto& HistogramFamilyOf(prometheus::Registry& r, const char* name, const char* help) {
  return FamilyOf(BuildHistogram(), r, name, help);
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      uplink_wire_(CounterFamilyOf(*registry_, "fedlgc_uplink_wire_bytes_total",
                                   "Update bytes sent by clients, as framed on the wire")),
      uplink_raw_(
          CounterFamilyOf(*registry_, "fedlgc_uplink_raw_bytes_total",
                          "fp32-equivalent bytes of the coordinates those updates carried")),
      downlink_wire_(CounterFamilyOf(*registry_, "fedlgc_downlink_wire_bytes_total",
                                     "Model bytes sent to clients")),
      downlink_raw_(CounterFamilyOf(*registry_, "fedlgc_downlink_raw_bytes_total",
                                    "fp32-equivalent bytes of the models sent to clients")),
      chunks_(
          CounterFamilyOf(*registry_, "fedlgc_chunks_total",
                          "Update chunks by result: sent, retransmitted, counted, lost, dropped")),
      resumes_(CounterFamilyOf(*registry_, "fedlgc_stream_resumes_total",
                               "Streams resumed after a disconnect, by stream")),
      rejected_(CounterFamilyOf(*registry_, "fedlgc_rejected_total",
                                "Chunks or requests refused, by reason")),
      encode_seconds_(
          HistogramFamilyOf(*registry_, "fedlgc_encode_seconds", "Time to encode one update")),
      decode_seconds_(HistogramFamilyOf(*registry_, "fedlgc_decode_seconds",
                                        "Time to validate and decode one chunk")),
      train_loss_(GaugeFamilyOf(*registry_, "fedlgc_train_loss",
                                "Running training loss (mean of the last 10 batches)")),
      round_(GaugeFamilyOf(*registry_, "fedlgc_round", "Current round")),
      round_seconds_(HistogramFamilyOf(*registry_, "fedlgc_round_duration_seconds",
                                       "Wall time from round start to commit")),
      participants_(GaugeFamilyOf(*registry_, "fedlgc_round_participants",
                                  "Clients whose chunks counted in the last round")),
      stragglers_(GaugeFamilyOf(*registry_, "fedlgc_round_stragglers",
                                "Participants whose update was incomplete at the close")),
      accuracy_(
          GaugeFamilyOf(*registry_, "fedlgc_global_accuracy", "Test accuracy of the global model")),
      loss_(GaugeFamilyOf(*registry_, "fedlgc_global_loss", "Test loss of the global model")),
      ratio_(GaugeFamilyOf(*registry_, "fedlgc_compression_ratio",
                           "Raw fp32 bytes over wire bytes of the last round, by codec")),
      ratio_target_(
          GaugeFamilyOf(*registry_, "fedlgc_compression_ratio_target",
                        "Compression ratio the job is expected to reach (--ratio-target)")),
      rounds_(CounterFamilyOf(*registry_, "fedlgc_rounds_total",
                              "Committed rounds by how they closed: complete or deadline")),
      deadline_(GaugeFamilyOf(*registry_, "fedlgc_round_deadline_seconds",
                              "Seconds a round may stay open (--round-timeout)")),
      round_bytes_(
          GaugeFamilyOf(*registry_, "fedlgc_round_bytes",
                        "Bytes of the last committed round by direction and kind (wire, raw)")),
      client_last_round_(GaugeFamilyOf(*registry_, "fedlgc_client_last_round",
                                       "Last round in which a chunk of the client counted")),
      job_finished_(GaugeFamilyOf(*registry_, "fedlgc_job_finished",
                                  "1 once the coordinator has run the job's last round")),
      tier_(GaugeFamilyOf(*registry_, "fedlgc_tier_info",
                          "1, labelled with where this coordinator stands in a tree: tier (root or "
                          "aggregator) and its parent's address")),
      skipped_rounds_(
          CounterFamilyOf(*registry_, "fedlgc_client_skipped_rounds_total",
                          "Rounds a client could not take part in, by reason (nonfinite: "
                          "a model or update that is not finite)")),
      downlink_fallbacks_(CounterFamilyOf(*registry_, "fedlgc_downlink_fallbacks_total",
                                          "Compressed downloads that did not rebuild the "
                                          "coordinator's model, recovered by a full download, by "
                                          "reason (mismatch, malformed)")),
      model_downloads_(
          CounterFamilyOf(*registry_, "fedlgc_model_downloads_total",
                          "Global models a client took under a compressed downlink, by "
                          "kind (full: the model whole; chain: rebuilt from deltas)")),
      open_calls_(GaugeFamilyOf(*registry_, "fedlgc_open_calls",
                                "Uploads, shares and downloads open at the coordinator")),
      idle_cancelled_(CounterFamilyOf(*registry_, "fedlgc_idle_calls_cancelled_total",
                                      "Uploads, shares and downloads cancelled after the idle "
                                      "timeout without a message read or written")) {
  RegisterRobustness();
  RegisterPopulation();
  RegisterEvaluation();
}

void Metrics::RegisterEvaluation() {
  federated_accuracy_ =
      &GaugeFamilyOf(*registry_, "fedlgc_federated_accuracy",
                     "Accuracy of the global model on the clients' held-out data, weighted by "
                     "their examples (--eval clients|both)");
  federated_loss_ = &GaugeFamilyOf(*registry_, "fedlgc_federated_loss",
                                   "Loss of the global model on the clients' held-out data");
  eval_answers_ = &CounterFamilyOf(*registry_, "fedlgc_eval_answers_total",
                                   "Answers to federated evaluation requests, by outcome "
                                   "(reported, declined, missing, refused)");
  for (const char* outcome : {"reported", "declined", "missing", "refused"}) {
    eval_answers_->Add({{"outcome", outcome}});
  }
}

void Metrics::SetFederatedEval(double accuracy, double loss) {
  federated_accuracy_->Add({}).Set(accuracy);
  federated_loss_->Add({}).Set(loss);
}

void Metrics::AddEvalAnswers(std::string_view outcome, int n) {
  if (n > 0) eval_answers_->Add({{"outcome", std::string(outcome)}}).Increment(n);
}

void Metrics::RegisterRobustness() {
  guard_refusals_ = &CounterFamilyOf(*registry_, "fedlgc_guard_refusals_total",
                                     "Candidate models the model guard refused, by check "
                                     "(nonfinite, norm, loss)");
  quarantined_ = &GaugeFamilyOf(*registry_, "fedlgc_client_quarantined",
                                "1 for a client barred from the job by the model guard");
  quarantined_clients_ = &GaugeFamilyOf(*registry_, "fedlgc_quarantined_clients",
                                        "Clients barred from the job by the model guard");
  clipped_ = &CounterFamilyOf(*registry_, "fedlgc_clipped_updates_total",
                              "Updates scaled down (or, SGP, withheld) by norm clipping");
  clip_bound_ = &GaugeFamilyOf(*registry_, "fedlgc_clip_bound",
                               "The last round's clipping bound on an update's L2 norm (0: none)");
}

void Metrics::RegisterPopulation() {
  open_calls_.Add({}).Set(0);
  idle_cancelled_.Add({});
  updates_ = &CounterFamilyOf(*registry_, "fedlgc_updates_total",
                              "Updates counted in commits, by the codec they came in");
  staleness_ = &HistogramFamilyOf(*registry_, "fedlgc_update_staleness",
                                  "Buffered rounds: model versions a committed update was behind");
}

void Metrics::AddUpdate(const std::string& codec) { updates_->Add({{"codec", codec}}).Increment(); }

void Metrics::ObserveStaleness(double versions) {
  staleness_->Add({}, Histogram::BucketBoundaries{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32})
      .Observe(versions);
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
  return GaugeFamilyOf(*registry_, name.c_str(), help.c_str());
}

prometheus::Family<prometheus::Counter>& Metrics::CounterFamily(const std::string& name,
                                                                const std::string& help) {
  return CounterFamilyOf(*registry_, name.c_str(), help.c_str());
}

void Metrics::AddGuardRefusal(std::string_view check) {
  guard_refusals_->Add({{"check", std::string(check)}}).Increment();
}

void Metrics::SetQuarantined(const std::string& client) {
  const bool fresh = !quarantined_->Has({{"client", client}});
  quarantined_->Add({{"client", client}}).Set(1);
  if (fresh) quarantined_clients_->Add({}).Increment();
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
  clipped_->Add({}).Increment(updates);
  clip_bound_->Add({}).Set(bound);
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
  for (const char* check : {"nonfinite", "norm", "loss"}) guard_refusals_->Add({{"check", check}});
  quarantined_clients_->Add({});
  clipped_->Add({});
}

}  // namespace fedlgc::monitoring
