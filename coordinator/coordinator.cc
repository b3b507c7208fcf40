// Coordinator process (see coordinator.h).
#include "coordinator/coordinator.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "autoencoder/lgc_plan.h"
#include "codecs/crc32c.h"
#include "codecs/registry.h"
#include "codecs/str.h"
#include "coordinator/checkpoint.h"
#include "coordinator/service.h"
#include "core/atomic_file.h"
#include "core/dataset.h"
#include "core/model.h"
#include "monitoring/metrics.h"

namespace fedlgc::coordinator {

absl::Status CoordinatorOptions::Validate() const {
  if (rounds == 0) return absl::InvalidArgumentError("--rounds must be >= 1");
  if (min_clients == 0) return absl::InvalidArgumentError("--min-clients must be >= 1");
  if (!(fraction > 0 && fraction <= 1))
    return absl::InvalidArgumentError("--fraction must be in (0, 1]");
  if (!(round_timeout_s > 0)) return absl::InvalidArgumentError("--round-timeout must be > 0");
  if (!(plan.lr > 0) || plan.batch_size == 0)
    return absl::InvalidArgumentError("lr and batch must be > 0");
  if (plan.max_chunk_bytes < 1024 || plan.max_chunk_bytes > max_message_bytes - 1024) {
    return absl::InvalidArgumentError(
        StrCat("--chunk-bytes must be in [1024, ", max_message_bytes - 1024, "]"));
  }
  if (mode != "fedavg" && mode != "lsgd" && mode != "sgp")
    return absl::InvalidArgumentError(StrCat("--mode must be fedavg, lsgd or sgp, not ", mode));
  auto lgc = autoencoder::ParseLgcSpec(plan.codec);
  if (!lgc.ok()) return lgc.status();
  if (mode != "fedavg") {
    if (lgc->has_value())
      return absl::InvalidArgumentError(StrCat("lgc(...) runs with --mode fedavg, not ", mode));
    if (server_lr != 1.0f || server_momentum != 0.0f) {
      return absl::InvalidArgumentError(
          StrCat("--server-lr and --server-momentum apply to --mode fedavg, not ", mode));
    }
    if (mode == "lsgd") {
      if (absl::Status st = lsgd.Validate(); !st.ok()) return st;
    }
  }
  if (!lgc->has_value()) {
    if (auto c = codecs::MakeCodec(plan.codec); !c.ok()) return c.status();
  } else if (plan.warmup_codecs.empty()) {
    return absl::InvalidArgumentError(
        "lgc needs at least one --codec-warmup round (its aggregate gives the first support)");
  }
  for (const std::string& spec : plan.warmup_codecs) {
    if (auto c = codecs::MakeCodec(spec); !c.ok()) {
      return absl::InvalidArgumentError(
          StrCat("--codec-warmup: ", std::string(c.status().message())));
    }
  }
  if (!insecure && (tls_ca.empty() || tls_cert.empty() || tls_key.empty())) {
    return absl::InvalidArgumentError(
        "mTLS needs --tls-ca, --tls-cert and --tls-key (or --insecure)");
  }
  if (!(ratio_target >= 0)) return absl::InvalidArgumentError("--ratio-target must be >= 0");
  if (!(linger_s >= 0)) return absl::InvalidArgumentError("--linger must be >= 0");
  if (!(server_lr > 0) || server_momentum < 0 || server_momentum >= 1) {
    return absl::InvalidArgumentError("--server-lr must be > 0 and --server-momentum in [0, 1)");
  }
  return absl::OkStatus();
}

std::string CoordinatorOptions::JobKey(uint64_t dim) const {
  auto codec = codecs::MakeCodec(plan.codec);
  std::string key = StrCat(model, "/", dim, "/", codec.ok() ? (*codec)->wire_spec() : plan.codec,
                           "/seed", init_seed);
  if (mode != "fedavg") StrAppend(&key, "/mode:", mode);
  for (const std::string& spec : plan.warmup_codecs) {
    StrAppend(&key, "/warmup:", codecs::MakeCodec(spec).value()->wire_spec());
  }
  return key;
}

Coordinator::Coordinator(CoordinatorOptions options) : options_(std::move(options)) {}

Coordinator::~Coordinator() {
  Stop();
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(CoordinatorOptions options) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options)));
  const CoordinatorOptions& o = c->options_;
  core::SetTorchThreads(o.torch_threads);
  auto model = core::Model::Create(o.model, o.init_seed);
  if (!model.ok()) return model.status();
  c->eval_model_ = std::move(model).value();
  if (o.eval_every > 0) {
    auto test = core::LoadNamedDataset(o.test_data, o.data_dir, false, o.eval_limit);
    if (!test.ok()) return test.status();
    c->test_data_ = std::make_unique<core::Dataset>(std::move(test).value());
  }
  c->job_key_ = o.JobKey(c->eval_model_->dim());
  EngineState state;
  auto ckpt = ReadCheckpoint(o.state_dir, c->job_key_);
  if (!ckpt.ok()) return ckpt.status();
  if (ckpt->has_value()) {
    state = std::move(**ckpt);
    std::fprintf(stderr, "coordinator: resuming from %s at round %llu\n",
                 CheckpointPath(o.state_dir).c_str(),
                 static_cast<unsigned long long>(state.next_round));
  } else {
    state.model = c->eval_model_->GetFlat();
  }
  EngineOptions eo;
  eo.plan = o.plan;
  if (o.mode == "lsgd") eo.plan.local_steps = o.lsgd.steps_per_round();
  eo.server_lr = o.server_lr;
  eo.server_momentum = o.server_momentum;
  eo.seed = o.seed;
  eo.frame_limits.max_frame_bytes = o.max_message_bytes;
  c->engine_ = std::make_unique<RoundEngine>(eo, std::move(state));
  c->metrics_ = std::make_unique<monitoring::Metrics>();
  JobInfo job{StrCat("fedlgc-", o.model), o.model, c->eval_model_->dim(), o.rounds, o.mode};
  c->service_ =
      std::make_unique<CoordinatorService>(c->engine_.get(), c->metrics_.get(), job, o.insecure);
  c->service_->SetChunkCallback([cp = c.get()] { cp->WakeUp(); });
  if (o.mode == "lsgd") {
    auto d = LsgdDriver::Create(o.lsgd, c->eval_model_->GetFlat(), o.state_dir,
                                c->engine_->current_round() - 1);
    if (!d.ok()) return d.status();
    c->lsgd_ = std::move(d).value();
    LsgdDriver* lsgd = c->lsgd_.get();
    c->service_->SetReportHandler(
        [lsgd](const std::string& client, const protos::ProgressReport& report) {
          return lsgd->AcceptReport(client, report);
        });
    c->service_->SetBlobProvider(
        [](const std::string& name) { return name.rfind("group:", 0) == 0; },
        [lsgd](const std::string&, const std::string& name, uint64_t version) {
          return lsgd->Blob(name, version);
        });
    c->service_->SetRoundDecorator(
        [lsgd](const std::string& client, protos::RoundStart* s) { lsgd->Decorate(client, s); });
  }
  if (o.mode == "sgp") {
    auto d = SgpDriver::Create(o.sgp_reference, o.sgp_overlap, c->eval_model_->dim(), o.state_dir,
                               c->engine_->current_round() - 1);
    if (!d.ok()) return d.status();
    c->sgp_ = std::move(d).value();
    SgpDriver* sgp = c->sgp_.get();
    c->service_->SetBlobProvider([](const std::string& name) { return name == "inbox"; },
                                 [sgp](const std::string& client, const std::string&,
                                       uint64_t version) { return sgp->Inbox(client, version); });
    c->service_->SetInboxAppliedCallback(
        [sgp](const std::string& client, uint64_t round) { sgp->InboxApplied(client, round); });
    c->service_->SetReportHandler(
        [sgp](const std::string& client, const protos::ProgressReport& report) {
          return sgp->AcceptReport(client, report);
        });
    c->service_->SetRoundDecorator(
        [sgp](const std::string& client, protos::RoundStart* s) { sgp->Decorate(client, s); });
  }
  if (auto lgc = autoencoder::ParseLgcSpec(o.plan.codec); lgc.ok() && lgc->has_value()) {
    const uint64_t next = c->engine_->current_round();
    auto d = LgcDriver::Create(**lgc, o.plan.warmup_codecs.size(), c->eval_model_->dim(),
                               o.state_dir, next - 1, o.init_seed, o.ae_device);
    if (!d.ok()) return d.status();
    c->lgc_ = std::move(d).value();
    c->service_->SetBlobProvider(
        [](const std::string& name) { return name == "lgc-echo" || name == "lgc-decoder"; },
        [lgc = c->lgc_.get()](const std::string& client, const std::string& name,
                              uint64_t version) -> std::shared_ptr<const ModelBlob> {
          if (name == "lgc-decoder") {
            return version == LgcDriver::kEncoderVersion ? lgc->Decoder(client) : nullptr;
          }
          return lgc->Echo(client, version);
        });
    c->service_->SetRoundDecorator(
        [cp = c.get()](const std::string& client, protos::RoundStart* s) {
          cp->DecorateRoundStart(client, s);
        });
  }
  return c;
}

absl::Status Coordinator::Start() {
  const CoordinatorOptions& o = options_;
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (o.insecure) {
    std::fprintf(
        stderr,
        "coordinator: WARNING: --insecure: no TLS, clients are trusted to name themselves. "
        "Use only for local experiments.\n");
    creds = grpc::InsecureServerCredentials();
  } else {
    auto ca = core::ReadFile(o.tls_ca), cert = core::ReadFile(o.tls_cert),
         key = core::ReadFile(o.tls_key);
    for (const auto* f : {&ca, &cert, &key}) {
      if (!f->ok()) return f->status();
    }
    grpc::SslServerCredentialsOptions ssl(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = *ca;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    creds = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(o.listen, creds, &port_);
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(o.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(o.max_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  // 20 s: a host busy training (8 clients on 2 cores here) can take more than 5 s to
  // answer a ping, and a dropped event stream costs a reconnect and a leader promotion.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) return absl::UnavailableError(StrCat("cannot listen on ", o.listen));
  if (!o.metrics_listen.empty()) {
    if (absl::Status st = metrics_->Serve(o.metrics_listen); !st.ok()) return st;
  }
  metrics_->SetRound(engine_->current_round());
  metrics_->InitRejectReasons();
  metrics_->SetJobFinished(false);
  metrics_->SetRoundDeadline(o.round_timeout_s);
  if (o.ratio_target > 0) metrics_->SetCompressionRatioTarget(o.ratio_target);
  return absl::OkStatus();
}

int Coordinator::metrics_port() const { return metrics_->port(); }

void Coordinator::WakeUp() {
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

void Coordinator::Stop() {
  stop_ = true;
  WakeUp();
}

std::vector<RoundReport> Coordinator::reports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reports_;
}

absl::Status Coordinator::Run() {
  while (!stop_ && engine_->current_round() <= options_.rounds) {
    if (absl::Status st = RunRound(); !st.ok()) return st;
  }
  if (!stop_) {
    service_->BroadcastDone(options_.rounds, static_cast<float>(last_accuracy_));
    metrics_->SetJobFinished(true);
    // Give clients a moment to read JobDone, and Prometheus (--linger) a scrape that sees
    // the job finished, before the process exits.
    const auto wait = std::chrono::milliseconds(
        std::max<int64_t>(500, static_cast<int64_t>(options_.linger_s * 1000)));
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, wait, [&] { return stop_.load(); });
  }
  return absl::OkStatus();
}

absl::Status Coordinator::RunRound() {
  const CoordinatorOptions& o = options_;
  // Quorum.
  std::vector<std::string> connected;
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      connected = service_->Connected();
      lock.lock();
      if (connected.size() >= o.min_clients) break;
      cv_.wait_for(lock, std::chrono::milliseconds(50));
    }
  }
  if (stop_) return absl::OkStatus();
  // Participants: a seeded sample of the connected clients.
  std::sort(connected.begin(), connected.end());
  std::mt19937_64 rng(o.seed ^ (engine_->current_round() * 0x9E3779B97F4A7C15ull));
  std::shuffle(connected.begin(), connected.end(), rng);
  const size_t want = std::max<size_t>(
      o.min_clients, static_cast<size_t>(std::ceil(o.fraction * connected.size())));
  connected.resize(std::min(want, connected.size()));
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.round_timeout_s * 1000));
  service_->traffic().uplink_wire = 0;
  service_->traffic().uplink_raw = 0;
  service_->traffic().downlink = 0;
  CommitResult commit;
  RoundReport rep;
  absl::Status st = lsgd_  ? RunLsgdRound(connected, deadline, &commit, &rep)
                    : sgp_ ? RunSgpRound(connected, deadline, &commit, &rep)
                           : RunFedAvgRound(connected, deadline, &commit, &rep);
  if (!st.ok() || stop_) return st;
  return FinishRound(commit, std::move(rep));
}

absl::Status Coordinator::StartRound(const std::vector<std::string>& participants,
                                     Clock::time_point deadline, RoundMode mode,
                                     const std::set<std::string>* uploaders) {
  const uint64_t round = engine_->current_round();
  if (absl::Status st = engine_->OpenRound(participants, deadline, std::move(mode)); !st.ok())
    return st;
  if (uploaders != nullptr) engine_->SetUploaders(*uploaders);
  metrics_->SetRound(round);
  for (const std::string& c : participants) service_->SendRoundStart(c);
  return absl::OkStatus();
}

void Coordinator::WaitUntil(Clock::time_point deadline, const std::function<bool()>& done,
                            const std::function<void()>& tick) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_ && Clock::now() < deadline && !done()) {
    cv_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    if (tick) {
      lock.unlock();
      tick();
      lock.lock();
    }
  }
}

std::set<std::string> Coordinator::Vanished(const std::set<std::string>& watched,
                                            Clock::time_point since) {
  const auto now = Clock::now();
  std::set<std::string> gone;
  for (const std::string& c : watched) {
    // Neither an event stream nor a call for 3 s (a client busy uploading through a cut
    // link has no event stream until it is done, but its chunks keep arriving).
    if (now - std::max(since, service_->LastSeen(c)) > std::chrono::seconds(3)) gone.insert(c);
  }
  return gone;
}

absl::Status Coordinator::FinishRound(const CommitResult& commit, RoundReport rep) {
  const CoordinatorOptions& o = options_;
  rep.round = commit.round;
  rep.participants = commit.participants;
  rep.stragglers = commit.stragglers;
  rep.seconds = commit.seconds;
  rep.uplink_bytes = service_->traffic().uplink_wire;
  rep.raw_uplink_bytes = service_->traffic().uplink_raw;
  rep.downlink_bytes = service_->traffic().downlink;
  if (o.eval_every > 0 && (commit.round % o.eval_every == 0 || commit.round == o.rounds)) {
    const std::vector<float> model = engine_->ModelVector();
    if (absl::Status st = eval_model_->SetFlat(model); !st.ok()) return st;
    auto ev = eval_model_->Evaluate(*test_data_);
    if (!ev.ok()) return ev.status();
    rep.accuracy = ev->accuracy;
    rep.loss = ev->loss;
    last_accuracy_ = ev->accuracy;
    metrics_->SetGlobalEval(ev->accuracy, ev->loss);
  }
  // The LGC state of this round goes first: a restart loads the one of the checkpoint.
  if (lgc_) {
    if (absl::Status st = lgc_->Save(commit.round); !st.ok()) return st;
  }
  if (lsgd_) {
    if (absl::Status st = lsgd_->Save(commit.round); !st.ok()) return st;
  }
  if (sgp_) {
    if (absl::Status st = sgp_->Save(commit.round); !st.ok()) return st;
  }
  if (absl::Status st = WriteCheckpoint(o.state_dir, job_key_, engine_->Snapshot()); !st.ok())
    return st;
  metrics_->ObserveRound(commit.seconds, commit.participants, commit.stragglers);
  metrics_->CountRound(rep.hit_deadline);
  metrics_->SetRoundBytes("uplink", "wire", static_cast<double>(rep.uplink_bytes));
  metrics_->SetRoundBytes("uplink", "raw", static_cast<double>(rep.raw_uplink_bytes));
  metrics_->SetRoundBytes("downlink", "wire", static_cast<double>(rep.downlink_bytes));
  if (rep.uplink_bytes > 0) {
    metrics_->SetCompressionRatio(o.plan.CodecFor(commit.round),
                                  static_cast<double>(rep.raw_uplink_bytes) / rep.uplink_bytes);
  }
  // Receipts become visible only now that the checkpoint holding them is on disk: a
  // client must never learn that a chunk counted in a round a crash could still undo.
  engine_->PublishReceipts();
  for (const auto& [client, rc] : commit.receipts) {
    metrics_->AddChunks(client, "counted", rc.counted.size());
    if (!rc.counted.empty()) metrics_->SetClientLastRound(client, commit.round);
    service_->Push(client, CoordinatorService::ReceiptEvent(rc));
  }
  // One JSON line per round next to the checkpoint, for fedlgc-sim and for people.
  std::ofstream(o.state_dir + "/rounds.jsonl", std::ios::app)
      << "{\"round\": " << rep.round << ", \"accuracy\": " << rep.accuracy
      << ", \"loss\": " << rep.loss << ", \"uplink_bytes\": " << rep.uplink_bytes
      << ", \"raw_uplink_bytes\": " << rep.raw_uplink_bytes
      << ", \"downlink_bytes\": " << rep.downlink_bytes << ", \"seconds\": " << rep.seconds
      << ", \"participants\": " << rep.participants << ", \"stragglers\": " << rep.stragglers
      << ", \"lgc_stage\": " << rep.lgc_stage << ", \"lgc_leader\": \"" << rep.lgc_leader
      << "\", \"ae_reconstruction\": " << rep.ae_reconstruction
      << ", \"ae_similarity\": " << rep.ae_similarity
      << ", \"lgc_values_cosine\": " << rep.lgc_values_cosine
      << ", \"lgc_rebuild_mismatches\": " << rep.lgc_rebuild_mismatches
      << ", \"ae_seconds\": " << rep.ae_seconds << ", \"mode\": \"" << o.mode
      << "\", \"lsgd_leader\": \"" << rep.lsgd_leader
      << "\", \"sgp_consensus_distance\": " << rep.sgp_consensus_distance << "}\n";
  std::fprintf(
      stderr,
      "coordinator: round %llu committed: %d participants, accuracy %.4f, %llu uplink bytes\n",
      static_cast<unsigned long long>(rep.round), rep.participants, rep.accuracy,
      static_cast<unsigned long long>(rep.uplink_bytes));
  std::lock_guard<std::mutex> lock(mu_);
  reports_.push_back(rep);
  return absl::OkStatus();
}

}  // namespace fedlgc::coordinator
