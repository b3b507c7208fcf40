// Coordinator process (see coordinator.h).
#include "coordinator/coordinator.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "base/failpoint.h"
#include "base/file.h"
#include "base/log.h"
#include "base/str.h"
#include "coordinator/checkpoint.h"
#include "coordinator/coordinator_host.h"
#include "coordinator/round_recorder.h"
#include "coordinator/service.h"
#include "core/dataset.h"
#include "core/model.h"
#include "core/sha256.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::coordinator {

namespace {

// Whether `round`'s model is evaluated (--eval-every, and always the last round).
bool EvaluationDue(const CoordinatorOptions& o, uint64_t round) {
  return o.eval_every > 0 && (round % o.eval_every == 0 || round == o.rounds);
}

// The round's per-client link figures: each settled participant's measured rates
// (uplink_bps, downlink_bps) and, under a codec ladder, the rung each counted update came
// in (codec_rung; the label codec_ladder lists the rungs).
void ReportLinks(const CommitResult& commit, const LinkBook& links, const CodecLadder* ladder,
                 RoundReport* rep) {
  for (const auto& [client, codec] : commit.codecs) {
    const LinkEstimate link = links.Estimate(client);
    if (link.up_bps > 0) rep->per_client["uplink_bps"][client] = link.up_bps;
    if (link.down_bps > 0) rep->per_client["downlink_bps"][client] = link.down_bps;
    auto rc = commit.receipts.find(client);
    if (ladder == nullptr || rc == commit.receipts.end() || rc->second.counted.empty()) continue;
    rep->per_client["codec_rung"][client] = static_cast<double>(ladder->RungOf(codec));
  }
  if (ladder != nullptr) rep->labels["codec_ladder"] = JoinSpecs(ladder->Specs());
}

// The round's metrics: its time, participants and bytes, the updates counted per codec,
// staleness, and the compression ratio of the plan's codec (one "ladder" ratio under a
// codec ladder).
void PublishRoundMetrics(monitoring::Metrics* metrics, const RoundPlan& plan,
                         const CodecLadder* ladder, const CommitResult& commit,
                         const RoundReport& rep) {
  metrics->ObserveRound(commit.seconds, commit.participants, commit.stragglers);
  metrics->CountRound(rep.hit_deadline);
  metrics->SetRoundBytes("uplink", "wire", static_cast<double>(rep.uplink_bytes));
  metrics->SetRoundBytes("uplink", "raw", static_cast<double>(rep.raw_uplink_bytes));
  metrics->SetRoundBytes("downlink", "wire", static_cast<double>(rep.downlink_bytes));
  metrics->SetRoundBytes("downlink", "raw", static_cast<double>(rep.raw_downlink_bytes));
  metrics->AddClipped(static_cast<int>(rep.Figure("clipped")), rep.Figure("clip_bound"));
  for (const auto& [client, rc] : commit.receipts) {
    auto codec = commit.codecs.find(client);
    if (!rc.counted.empty() && codec != commit.codecs.end()) metrics->AddUpdate(codec->second);
  }
  if (auto s = rep.per_client.find("staleness"); s != rep.per_client.end()) {
    for (const auto& [client, tau] : s->second) metrics->ObserveStaleness(tau);
  }
  if (rep.uplink_bytes > 0) {
    metrics->SetCompressionRatio(ladder != nullptr ? "ladder" : plan.CodecFor(commit.round),
                                 static_cast<double>(rep.raw_uplink_bytes) / rep.uplink_bytes);
  }
}

// The kept models and the export of a root's job.
absl::StatusOr<std::unique_ptr<ModelKeeper>> MakeKeeper(const CoordinatorOptions& o,
                                                        const std::string& model_sha256,
                                                        const std::string& job_key) {
  KeeperOptions k;
  k.state_dir = o.state_dir;
  k.export_path = o.export_path;
  k.export_best = o.export_best;
  k.keep = o.keep_models;
  k.model = o.model_options();
  k.init_seed = o.init_seed;
  k.model_sha256 = model_sha256;
  k.job = job_key;
  k.job_id = o.JobId(model_sha256);
  return ModelKeeper::Create(std::move(k));
}

// Federated evaluation: sends round `round`'s model to a seeded sample of the connected
// clients (EvalStart) and books whom it asked in `book`; the recorder waits for their
// answers (RoundRecorder).
void AskClientsToEvaluate(const CoordinatorOptions& o, RoundHost& host, EvalBook* book,
                          uint64_t round) {
  std::vector<std::string> connected;
  for (const std::string& c : host.Connected()) {
    if (!host.engine().roster().IsQuarantined(c)) connected.push_back(c);
  }
  // A seeded sample: the same clients for the same job, seed and round.
  std::mt19937_64 rng(o.seed * 1000003 + round);
  std::shuffle(connected.begin(), connected.end(), rng);
  if (o.eval_clients > 0 && connected.size() > o.eval_clients) connected.resize(o.eval_clients);
  const uint64_t version = host.engine().model()->version;
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(o.eval_timeout_s));
  protos::ServerEvent event;
  protos::EvalStart* e = event.mutable_eval();
  e->set_round(round);
  e->set_model_version(version);
  e->set_deadline_unix_ms(core::UnixMs(o.clock->WallNow() + timeout));
  // Booked before it is sent: a quick answer must find its round asked.
  book->Ask(round, version, std::set<std::string>(connected.begin(), connected.end()),
            o.clock->Now() + timeout);
  for (const std::string& c : connected) {
    if (!host.Push(c, event)) book->Withdraw(round, c);  // gone meanwhile
  }
}

// The model's line at start: what travels, and the frozen and personal values that stay
// home; `sha256` empty for a built-in (said only when something stays home).
void SayWhatTravels(const CoordinatorOptions& o, const core::Model& model,
                    const std::string& sha256) {
  const core::ParameterGroups& groups = model.parameter_groups();
  std::string home;
  if (groups.frozen_values > 0) StrAppend(&home, ", ", groups.frozen_values, " frozen");
  if (groups.local_values > 0) StrAppend(&home, ", ", groups.local_values, " personal");
  if (!home.empty()) StrAppend(&home, " stay home");
  if (!sha256.empty()) {
    log::Info("coordinator", "model %s (sha256:%s, %zu values travel%s%s) served to clients",
              o.model, sha256, model.dim(), o.buffers == "average" ? " with its buffers" : "",
              home);
  } else if (!home.empty()) {
    log::Info("coordinator", "model %s: %zu values travel%s", o.model, model.dim(), home);
  }
  if (groups.local_values > 0 && o.EvalOnServer()) {
    log::Info("coordinator",
              "--local-params: the server evaluates the module's initial personal parameters "
              "beside the federation's (each client's model is its own: --eval clients)");
  }
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options)
    : options_(std::move(options)),
      progress_(std::make_unique<Progress>(options_.rounds, options_.clock)) {}

Coordinator::~Coordinator() {
  Stop();
  recorder_.reset();  // records what was committed: a committed round's line is worth its evaluation
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(CoordinatorOptions options,
                                                                 const ModeTraits& traits,
                                                                 const DriverFactory& make_driver) {
  if (absl::Status st = options.Validate(traits); !st.ok()) return st;
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options)));
  c->traits_ = traits;
  core::SetTorchThreads(c->options_.torch_threads);
  JobFiles files;
  RecorderParts recorder;
  if (absl::Status st = c->LoadModelAndData(&files, &recorder); !st.ok()) return st;
  EngineState state;
  if (absl::Status st = c->Resume(files, &state); !st.ok()) return st;
  if (absl::Status st = c->MakeDriverAndEngine(make_driver, std::move(state)); !st.ok()) {
    return st;
  }
  if (!c->options_.has_parent()) {  // an aggregator keeps no models
    auto keeper = MakeKeeper(c->options_, files.model_sha256, c->job_key_);
    if (!keeper.ok()) return keeper.status();
    recorder.keeper = *std::move(keeper);
  }
  if (!c->options_.tensorboard.empty()) {
    auto tb = monitoring::TensorBoardWriter::Open(c->options_.tensorboard);
    if (!tb.ok()) return tb.status();
    recorder.tensorboard = *std::move(tb);
  }
  if (absl::Status st = c->MakeDownlinks(); !st.ok()) return st;
  c->MakeService(files, std::move(recorder));
  return c;
}

absl::Status Coordinator::LoadModelAndData(JobFiles* files, RecorderParts* recorder) {
  const CoordinatorOptions& o = options_;
  const core::ModelOptions mo = o.model_options();
  auto model = core::Model::Create(mo, o.init_seed);
  if (!model.ok()) return model.status();
  eval_model_ = std::move(model).value();
  // A TorchScript job: the file is served to the clients as it is, by its hash.
  if (mo.IsFile()) {
    auto bytes = fedlgc::ReadFile(o.model);
    if (!bytes.ok()) return bytes.status();
    files->model_sha256 = core::Sha256Hex(*bytes);
    files->model_file = MakeBlob(1, *std::move(bytes));
  }
  if (o.eval_every > 0 && o.EvalOnServer()) {
    auto test = core::LoadDataset(o.test_data_options(), false, o.eval_limit);
    if (!test.ok()) return test.status();
    // A model that cannot take the test set fails here, before any client joins.
    if (absl::Status st = eval_model_->CheckFits(*test); !st.ok()) return st;
    recorder->test_data = std::make_unique<core::Dataset>(std::move(test).value());
    auto record_model = core::Model::Create(mo, o.init_seed);
    if (!record_model.ok()) return record_model.status();
    recorder->model = std::move(record_model).value();
  }
  ModelGuard::LossFn guard_loss;
  if (o.guard.enabled && o.guard.samples > 0 && !o.HasTestData()) {
    log::Info("coordinator",
              "the model guard checks each round's model for values that are not finite and "
              "for its norm's growth; without a test set (--test-data none) it checks no loss");
  }
  const bool personal = !o.local_params.empty();
  if (o.guard.enabled && o.guard.samples > 0 && o.HasTestData() && personal) {
    log::Info("coordinator",
              "under --local-params the model guard checks no loss (the coordinator's model "
              "holds the module's initial personal parameters, no client's)");
  }
  if (o.guard.enabled && o.guard.samples > 0 && o.HasTestData() && !personal) {
    auto guard_set = core::LoadDataset(o.test_data_options(), false, o.guard.samples);
    if (!guard_set.ok()) return guard_set.status();
    if (absl::Status st = eval_model_->CheckFits(*guard_set); !st.ok()) return st;
    guard_data_ = std::make_unique<core::Dataset>(std::move(guard_set).value());
    guard_loss = [this](std::span<const float> model) -> absl::StatusOr<double> {
      if (absl::Status st = eval_model_->SetFlat(model); !st.ok()) return st;
      if (statistics_ != nullptr) {
        // Under the statistics phase a candidate holds the last commit's batch
        // normalisation statistics beside new weights: the clients give the weights
        // statistics of their own only after the commit. Judged with those stale
        // statistics, every sparse round of a BatchNorm model looked like a loss blow-up
        // (the ResNet under lgc(): 2.5 against 1.1, every candidate refused). The guard
        // judges the weights with statistics estimated on its own guard set instead; what
        // commits keeps the clients' statistics.
        std::vector<uint32_t> all(guard_data_->size());
        for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
        core::StatisticsOptions so;
        so.batch_size = 64;
        so.max_batches = (all.size() + so.batch_size - 1) / so.batch_size;
        auto est = eval_model_->ReestimateStatistics(*guard_data_, all, so);
        if (!est.ok()) return est.status();
      }
      auto ev = eval_model_->Evaluate(*guard_data_);
      if (!ev.ok()) return ev.status();
      return ev->loss;
    };
  }
  auto frozen = core::FrozenValues(*eval_model_);
  if (!frozen.ok()) return frozen.status();
  double frozen_norm_sq = 0;
  for (float v : *frozen) frozen_norm_sq += double(v) * v;
  guard_ = std::make_unique<ModelGuard>(o.guard, std::move(guard_loss), frozen_norm_sq);
  // Said once the model has taken the test and guard sets (a refusal is the only line).
  SayWhatTravels(o, *eval_model_, files->model_file != nullptr ? files->model_sha256 : "");
  return absl::OkStatus();
}

absl::Status Coordinator::Resume(const JobFiles& files, EngineState* state) {
  const CoordinatorOptions& o = options_;
  auto robust = o.Robust(traits_);
  if (!robust.ok()) return robust.status();
  robust_ = *robust;
  job_key_ = o.JobKey(eval_model_->dim(), &eval_model_->layout(), traits_, files.model_sha256);
  auto ckpt = ReadCheckpoint(o.state_dir, job_key_);
  if (!ckpt.ok()) return ckpt.status();
  if (ckpt->has_value()) {
    *state = std::move(**ckpt);
    log::Info("coordinator", "resuming from %s at round %llu", CheckpointPath(o.state_dir).c_str(),
              static_cast<unsigned long long>(state->next_round));
  } else {
    state->model = eval_model_->GetFlat();
  }
  // A job started afresh (or from a checkpoint of before) draws its instance: clients
  // whose state was made in an earlier instance of the same job give it up at Join.
  if (state->job_instance == 0) {
    std::random_device rd;
    while (state->job_instance == 0) {
      state->job_instance = (static_cast<uint64_t>(rd()) << 32) | rd();
    }
  }
  job_instance_ = state->job_instance;
  return absl::OkStatus();
}

absl::Status Coordinator::MakeDriverAndEngine(const DriverFactory& make_driver, EngineState state) {
  const CoordinatorOptions& o = options_;
  DriverEnv env;
  env.dim = eval_model_->dim();
  env.initial_model = eval_model_->GetFlat();
  env.state_dir = o.state_dir;
  env.committed_round = state.next_round - 1;
  env.plan = &o.plan;
  env.layout = eval_model_->layout();
  env.init_seed = o.init_seed;
  env.robust = robust_;
  env.fraction = o.fraction;
  env.codec_ladder = !o.codec_ladder.empty();
  env.rounds = o.rounds;
  // The modes register their own series on it.
  metrics_ = std::make_unique<monitoring::Metrics>();
  metrics_->SetMaxClientSeries(o.max_client_series);
  env.metrics = metrics_.get();
  auto driver = make_driver(env);
  if (!driver.ok()) return driver.status();
  driver_ = std::move(driver).value();
  if (driver_->KeepVersions() > 0 && o.has_parent()) {
    return absl::InvalidArgumentError(
        "--rounds-mode buffered(...) runs at the root of a tree only: an aggregator's rounds are "
        "its parent's (--parent)");
  }
  EngineOptions eo;
  eo.plan = o.plan;
  eo.layout = eval_model_->layout();
  driver_->AdjustPlan(&eo.plan);
  eo.seed = o.seed;
  eo.max_client_weight = o.max_client_weight;
  eo.clock = o.clock;
  eo.frame_limits.max_frame_bytes = o.max_message_bytes;
  eo.keep_versions = driver_->KeepVersions();
  if (!o.codec_ladder.empty()) {
    auto ladder = CodecLadder::Create(o.codec_ladder, eval_model_->dim(), &eo.layout, &links_);
    if (!ladder.ok()) return ladder.status();
    ladder_ = *ladder;
    eo.codec_chooser = ladder_;
  }
  engine_ = std::make_unique<RoundEngine>(eo, std::move(state));
  return absl::OkStatus();
}

void Coordinator::MakeService(const JobFiles& files, RecorderParts recorder) {
  const CoordinatorOptions& o = options_;
  // An aggregator's job has its parent's rounds, which it learns with its parent's first
  // round (0: unknown, and no client takes the job for over).
  JobInfo job{o.JobId(files.model_sha256),
              o.ModelName(),
              eval_model_->dim(),
              o.has_parent() ? 0u : o.rounds,
              files.model_sha256,
              files.model_file,
              o.buffers,
              o.loss,
              o.freeze,
              o.local_params,
              o.init_seed,
              o.EvalOnClients() && o.eval_every > 0 ? o.eval_fraction : 0.0};
  // The initial model is the file's weights (a built-in's come from the job's seed, which
  // clients do not make theirs from).
  if (downlinks_ != nullptr && files.model_file != nullptr) {
    job.initial_model_crc = codecs::ModelCrc(eval_model_->GetFlat());
  }
  job.instance = job_instance_;
  metrics_->SetTier(o.has_parent() ? "aggregator" : "root", o.parent);
  ServiceOptions so;
  so.insecure = o.insecure;
  so.max_message_bytes = o.max_message_bytes;
  so.streams = o.streams;
  so.clock = o.clock;
  so.links = &links_;
  so.on_chunk = [this] { host_->WakeUp(); };  // host_ is made below, before any call
  so.progress = progress_.get();
  so.downlinks = downlinks_.get();
  if (o.EvalOnClients() && o.eval_every > 0) {
    eval_book_ = std::make_unique<EvalBook>(o.max_client_weight, o.clock);
    so.eval_book = eval_book_.get();
  }
  const bool median =
      robust_.kind != AggregatorKind::kMean && robust_.kind != AggregatorKind::kStreaming;
  statistics_ =
      StatisticsPhase::Create(o, eval_model_->layout(), median,
                              StatisticsAutomatic(o, traits_, driver_->AllowsClientStatistics()),
                              {downlinks_.get(), o.state_dir, job_key_});
  if (statistics_ != nullptr) so.stats_book = &statistics_->book();
  service_ =
      std::make_unique<CoordinatorService>(engine_.get(), driver_.get(), metrics_.get(), job, so);
  HostParts parts;
  parts.engine = engine_.get();
  parts.metrics = metrics_.get();
  parts.service = service_.get();
  parts.downlinks = downlinks_.get();
  parts.guard = guard_.get();
  parts.progress = progress_.get();
  parts.state_dir = o.state_dir;
  parts.clock = o.clock;
  host_ = std::make_unique<CoordinatorHost>(std::move(parts));
  recorder.state_dir = o.state_dir;
  recorder.clock = o.clock;
  recorder.metrics = metrics_.get();
  recorder.eval_book = eval_book_.get();
  recorder.gone = [host = host_.get(), clock = o.clock](const std::set<std::string>& waiting) {
    return host->Vanished(waiting, clock->Now() - std::chrono::seconds(3));
  };
  recorder_ = std::make_unique<RoundRecorder>(std::move(recorder));
}

absl::Status Coordinator::MakeDownlinks() {
  if (!DownlinkCompressed(options_.downlink)) return absl::OkStatus();
  DownlinkOptions dl = options_.downlink;
  dl.job = job_key_;
  dl.cuts = eval_model_->ScaleCuts();
  dl.keep_versions = driver_->KeepVersions();
  auto downlinks = Downlinks::Create(std::move(dl), options_.state_dir);
  if (!downlinks.ok()) return downlinks.status();
  downlinks_ = *std::move(downlinks);
  auto global =
      downlinks_->At("", engine_->model()->version, [this] { return engine_->ModelVector(); });
  if (!global.ok()) return global.status();
  return absl::OkStatus();
}

absl::Status Coordinator::Start() {
  const CoordinatorOptions& o = options_;
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (o.insecure) {
    log::Warning("coordinator",
                 "--insecure: no TLS, clients are trusted to name themselves. Use only for "
                 "local experiments.");
    creds = grpc::InsecureServerCredentials();
  } else {
    auto ca = fedlgc::ReadFile(o.tls_ca), cert = fedlgc::ReadFile(o.tls_cert),
         key = fedlgc::ReadFile(o.tls_key);
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
  // gRPC takes messages up to twice the limit, so that the service sees, refuses and
  // counts those over it (wire.h); past twice the limit gRPC's transport cuts the call
  // before any handler runs, and it cannot be counted.
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<uint64_t>(2ull * o.max_message_bytes, 1u << 30)));
  builder.SetMaxSendMessageSize(static_cast<int>(o.max_message_bytes));
  // Streams per connection (HTTP/2 SETTINGS): a well-behaved client queues past it.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(o.max_streams_per_connection));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  // 20 s: a host busy training (measured: 8 clients training on 2 cores) can take more than
  // 5 s to answer a ping, and a dropped event stream costs a reconnect and a leader
  // promotion.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) return absl::UnavailableError(StrCat("cannot listen on ", o.listen));
  if (!o.metrics_listen.empty()) {
    if (absl::Status st = metrics_->Serve(o.metrics_listen); !st.ok()) return st;
  }
  recorder_->Start();
  metrics_->SetRound(engine_->current_round());
  metrics_->InitRejectReasons();
  for (const auto& [client, why] : engine_->roster().Quarantined()) metrics_->SetQuarantined(client);
  metrics_->SetJobFinished(false);
  metrics_->SetRoundDeadline(o.round_timeout_s);
  if (o.ratio_target > 0) metrics_->SetCompressionRatioTarget(o.ratio_target);
  return absl::OkStatus();
}

int Coordinator::metrics_port() const { return metrics_->port(); }

void Coordinator::Stop() {
  // Stopped before the source is told: an aggregator's loop that wakes because its source
  // stopped must find itself stopping, not at the job's end (FinishJob would tell its
  // clients the job is over).
  if (host_ != nullptr) host_->Stop();
  if (RoundSource* source = source_.load(); source != nullptr) source->Stop();
}

bool Coordinator::stopped() const { return host_->stopped(); }

std::vector<std::string> Coordinator::ConnectedClients() const { return host_->Connected(); }

std::vector<RoundReport> Coordinator::reports() const { return recorder_->reports(); }

absl::Status Coordinator::Run() {
  run_started_ = options_.clock->Now();
  if (statistics_ != nullptr && source_ == nullptr && StatisticsPhase::Pending(*engine_)) {
    // Restarted during the statistics phase of the last committed round (or the job turned
    // --bn-stats on): it runs again, over the clients that connect, before the round log is
    // recovered with the model's evaluation.
    RoundReport phase;
    const std::vector<std::string> clients = WaitForParticipants();
    if (!clients.empty()) {
      absl::Status st = statistics_->Run(engine_->current_round() - 1, clients, *host_, &phase);
      if (!st.ok()) return st;
      log::Info("coordinator", "statistics of round %llu: %s",
                static_cast<unsigned long long>(engine_->current_round() - 1),
                phase.labels["bn_stats"].c_str());
    }
  }
  RecoverRoundLog();
  if (source_ != nullptr) return RunForParent();
  uint64_t last = options_.rounds;
  while (!stopped() && engine_->current_round() <= options_.rounds) {
    if (std::optional<std::string> why = driver_->Exhausted()) {
      log::Info("coordinator", "the job ends after round %llu: %s",
                static_cast<unsigned long long>(engine_->current_round() - 1), why->c_str());
      last = engine_->current_round() - 1;
      break;
    }
    if (absl::Status st = RunRound(); !st.ok()) return st;
  }
  recorder_->Drain();
  if (!stopped()) FinishJob(last);
  return absl::OkStatus();
}

void Coordinator::FinishJob(uint64_t rounds) {
  recorder_->Drain();
  progress_->Done();
  host_->WriteProgress(/*force=*/true);
  const double accuracy = recorder_->last_accuracy();
  // An aggregator's last commit is its own clients' part of the root's round, not the job's
  // final model: its clients are told of none (they keep their own last model).
  service_->events().BroadcastDone(rounds, static_cast<float>(accuracy),
                          options_.has_parent() ? 0 : engine_->model()->version);
  metrics_->SetJobFinished(true);
  // Buffered rounds end with clients still training: they read JobDone once their upload
  // is in (kept uncommitted, in their pending update), so wait for them, or until they
  // are gone or their deadline passes.
  const auto in_flight = [this] {
    std::set<std::string> busy;
    const auto now = options_.clock->Now();
    for (const auto& [client, a] : engine_->Participants()) {
      if (!a.complete && now < a.deadline && host_->Vanished({client}, a.at).empty()) busy.insert(client);
    }
    return busy;
  };
  while (!stopped() && !in_flight().empty()) {
    host_->Nap(options_.clock->Now() + std::chrono::milliseconds(100));
  }
  // Clients that take the final model (a Python client's module, fedlgc-edge --export)
  // download it after JobDone and then close their event stream: wait for them, up to a
  // round's timeout.
  const std::set<std::string> takers = service_->events().FinalModelTakers();
  const auto taking = [&] {
    std::set<std::string> busy;
    for (const std::string& c : host_->Connected()) {
      if (takers.count(c) > 0) busy.insert(c);
    }
    return busy;
  };
  const auto final_until =
      options_.clock->Now() + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(options_.round_timeout_s));
  while (!stopped() && options_.clock->Now() < final_until && !taking().empty()) {
    host_->Nap(options_.clock->Now() + std::chrono::milliseconds(100));
  }
  // Give clients a moment to read JobDone, and Prometheus (--linger) a scrape that sees
  // the job finished, before the process exits.
  const double wait_s = std::max(0.5, options_.linger_s);
  core::Clock& clock = *options_.clock;
  const auto until = clock.Now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(wait_s));
  while (!stopped() && clock.Now() < until) host_->Nap(until);
}

absl::Status Coordinator::RunForParent() {
  while (!stopped()) {
    auto order = source_.load()->Next();
    if (!order.ok()) return order.status();
    if (!order->has_value()) break;
    if (absl::Status st = RunOrder(**std::move(order)); !st.ok()) {
      source_.load()->Finish(st);
      return st;
    }
  }
  if (!stopped()) FinishJob(engine_->current_round() - 1);
  return absl::OkStatus();
}

absl::Status Coordinator::RunOrder(RoundOrder order) {
  service_->SetTotalRounds(order.total_rounds);
  engine_->terms().UseTraining(order.training);
  if (order.round + 1 < engine_->current_round()) {
    // Not a round sent again (that one is current_round() - 1): the parent is behind
    // what this aggregator committed, so it runs another job (a root started afresh).
    return absl::FailedPreconditionError(
        StrCat("the parent opened round ", order.round,
               ", and this aggregator has committed round ", engine_->current_round() - 1,
               " already: the parent runs another job (start this one with an empty "
               "--state-dir to join it)"));
  }
  if (absl::Status st = engine_->Rebase(order.round, std::move(order.model)); !st.ok()) {
    source_.load()->Finish(st);
    return absl::OkStatus();
  }
  if (downlinks_ != nullptr) {
    auto global =
        downlinks_->At("", engine_->model()->version, [this] { return engine_->ModelVector(); });
    if (!global.ok()) return global.status();
  }
  const auto deadline = std::min(
      order.deadline, options_.clock->Now() + std::chrono::milliseconds(static_cast<int64_t>(
                                                  options_.round_timeout_s * 1000)));
  const std::vector<std::string> participants = WaitForParticipants(deadline);
  if (stopped()) {
    source_.load()->Finish(absl::CancelledError("the aggregator is stopping"));
    return absl::OkStatus();
  }
  if (participants.empty()) {
    source_.load()->Finish(absl::NotFoundError(
        StrCat("round ", order.round, ": too few clients connected before its deadline")));
    return absl::OkStatus();
  }
  CommitResult commit;
  if (absl::Status st = DriveRound(participants, deadline, &commit); !st.ok()) return st;
  if (stopped()) {
    source_.load()->Finish(absl::CancelledError("the aggregator is stopping"));
  } else if (commit.participants == 0) {
    source_.load()->Finish(absl::NotFoundError(
        StrCat("round ", order.round, ": no update of this aggregator's clients counted")));
  } else {
    source_.load()->Finish(engine_->ModelVector());
  }
  return absl::OkStatus();
}

std::vector<std::string> Coordinator::WaitForParticipants(std::optional<Clock::time_point> until) {
  const CoordinatorOptions& o = options_;
  std::vector<std::string> connected;
  while (!stopped()) {
    connected = service_->events().Connected();
    if (connected.size() >= o.min_clients) break;
    if (until && o.clock->Now() >= *until) return {};
    progress_->Waiting(connected.size(), o.min_clients);
    host_->WriteProgress();
    host_->Nap(o.clock->Now() + std::chrono::milliseconds(50));
  }
  if (stopped()) return {};
  // A seeded sample of the connected clients; quarantined ones are never asked.
  std::erase_if(connected, [&](const std::string& c) { return engine_->roster().IsQuarantined(c); });
  std::sort(connected.begin(), connected.end());
  std::mt19937_64 rng(o.seed ^ (engine_->current_round() * 0x9E3779B97F4A7C15ull));
  std::shuffle(connected.begin(), connected.end(), rng);
  // --fraction of the connected clients: --min-clients is how many must be connected, not
  // how many are asked. At least what the job needs to mean anything: one client, the
  // robust aggregator's fewest updates (Krum, Bulyan), two peers for SGP.
  const size_t want = std::max<size_t>(
      std::max(traits_.min_participants, robust_.MinUpdates()),
      static_cast<size_t>(std::ceil(o.fraction * static_cast<double>(connected.size()) - 1e-9)));
  connected.resize(std::min(want, connected.size()));
  return connected;
}

absl::Status Coordinator::RunRound() {
  const std::vector<std::string> participants = WaitForParticipants();
  if (stopped()) return absl::OkStatus();
  const auto deadline =
      options_.clock->Now() +
      std::chrono::milliseconds(static_cast<int64_t>(options_.round_timeout_s * 1000));
  CommitResult commit;
  return DriveRound(participants, deadline, &commit);
}

absl::Status Coordinator::DriveRound(const std::vector<std::string>& participants,
                                     Clock::time_point deadline, CommitResult* commit) {
  // A round's bytes run from the last commit (FinishRound takes them): what moves between
  // rounds, such as the federated evaluation's downloads that the next round's start then
  // reuses, counts in the next round. A process's first round counts from its opening,
  // and the job's TorchScript file that joining clients fetched before it: the weights'
  // first download for them (clients that brought the file download none: under a
  // compressed downlink their first model is an empty chain from version 0).
  if (!traffic_since_commit_) {
    progress_->ForgetCarried();
    const uint64_t model_file = service_->traffic().model_file.load();
    service_->traffic().uplink_wire = 0;
    service_->traffic().uplink_raw = 0;
    service_->traffic().downlink = model_file;
    service_->traffic().downlink_raw = model_file;
  }
  progress_->StartRound(engine_->current_round(), participants);
  host_->WriteProgress(/*force=*/true);
  RoundReport rep;
  absl::Status st = driver_->RunRound(*host_, participants, deadline, commit, &rep);
  if (!st.ok() || stopped()) return st;
  return FinishRound(*commit, std::move(rep));
}

void Coordinator::RecoverRoundLog() {
  const uint64_t committed = engine_->current_round() - 1;
  if (committed == 0) return;
  auto log = ReadRoundLog(options_.state_dir + "/rounds.jsonl");
  uint64_t last = 0;
  if (log.ok()) {
    for (const RoundReport& r : *log) last = std::max(last, r.round);
  }
  if (last >= committed) return;
  log::Warning("coordinator",
               "rounds.jsonl ends at round %llu, the checkpoint at %llu (a crash before their "
               "lines): writing them from the checkpoint",
               static_cast<unsigned long long>(last), static_cast<unsigned long long>(committed));
  for (uint64_t r = last + 1; r <= committed; ++r) {
    RoundReport rep;
    rep.round = r;
    rep.mode = std::string(ModeName(driver_->mode()));
    rep.labels["recovered"] = "1";
    // Only the checkpoint's own model is still here to evaluate and keep.
    const bool last = r == committed;
    recorder_->Later(std::move(rep), last ? engine_->ModelVector() : std::vector<float>(),
                last && EvaluationDue(options_, r), engine_->model()->version);
  }
  recorder_->Drain();
}

absl::Status Coordinator::FinishRound(const CommitResult& commit, RoundReport rep) {
  const CoordinatorOptions& o = options_;
  rep.round = commit.round;
  rep.mode = std::string(ModeName(driver_->mode()));
  rep.participants = commit.participants;
  rep.stragglers = commit.stragglers;
  rep.seconds = commit.seconds;
  // When the round committed, from this process's start of Run: the x axis of accuracy
  // over time (a restart counts from its own start).
  rep.figures["job_seconds"] = core::SecondsSince(*options_.clock, run_started_);
  rep.uplink_bytes = service_->traffic().uplink_wire.exchange(0);
  rep.raw_uplink_bytes = service_->traffic().uplink_raw.exchange(0);
  rep.downlink_bytes = service_->traffic().downlink.exchange(0);
  rep.raw_downlink_bytes = service_->traffic().downlink_raw.exchange(0);
  traffic_since_commit_ = true;
  for (const auto& [client, bytes] : progress_->TakeTraffic()) {
    rep.per_client["client_uplink_bytes"][client] = static_cast<double>(bytes.first);
    rep.per_client["client_downlink_bytes"][client] = static_cast<double>(bytes.second);
  }
  ReportLinks(commit, links_, ladder_.get(), &rep);
  if (source_ != nullptr) rep.labels["tier"] = "aggregator";
  // The next round's downloads: the delta to this version, saved before the checkpoint
  // that names it. An aggregator's clients never download what it commits: its next
  // round starts from its parent's model.
  if (downlinks_ != nullptr && source_ == nullptr) {
    auto global =
        downlinks_->At("", engine_->model()->version, [this] { return engine_->ModelVector(); });
    if (!global.ok()) return global.status();
  }
  // The driver's state of this round goes first: a restart loads the one of the checkpoint.
  if (absl::Status st = driver_->Save(commit.round); !st.ok()) return st;
  if (source_ != nullptr && commit.participants > 0) {
    if (absl::Status st = source_.load()->Keep(commit.round, engine_->ModelVector()); !st.ok())
      return st;
  }
  if (absl::Status st = WriteCheckpoint(o.state_dir, job_key_, engine_->Snapshot()); !st.ok())
    return st;
  fedlgc::Failpoint("after-checkpoint", commit.round);
  PublishRoundMetrics(metrics_.get(), options_.plan, ladder_.get(), commit, rep);
  // Receipts become visible only now that the checkpoint holding them is on disk: a
  // client must never learn that a chunk counted in a round a crash could still undo.
  engine_->PublishReceipts();
  for (const auto& [client, rc] : commit.receipts) {
    metrics_->AddChunks(client, "counted", rc.counted.size());
    if (!rc.counted.empty()) metrics_->SetClientLastRound(client, commit.round);
    service_->events().Push(client, ReceiptEventOf(rc));
  }
  // The statistics that belong to the committed weights, as a version of their own,
  // before anything evaluates, keeps or hands over the model.
  if (statistics_ != nullptr && source_ == nullptr && commit.participants > 0) {
    std::vector<std::string> counted;
    for (const auto& [client, rc] : commit.receipts) {
      if (!rc.counted.empty()) counted.push_back(client);
    }
    if (absl::Status st = statistics_->Run(commit.round, counted, *host_, &rep); !st.ok())
      return st;
  }
  progress_->Committed(rep.round);
  host_->WriteProgress(/*force=*/true);
  // The round's evaluation, its kept model and its line (rounds.jsonl) follow off the
  // round loop.
  const bool evaluate = EvaluationDue(options_, commit.round);
  if (evaluate && eval_book_ != nullptr) AskClientsToEvaluate(o, *host_, eval_book_.get(), commit.round);
  std::vector<float> model =
      evaluate || !o.has_parent() ? engine_->ModelVector() : std::vector<float>();
  recorder_->Later(std::move(rep), std::move(model), evaluate, engine_->model()->version);
  return absl::OkStatus();
}

}  // namespace fedlgc::coordinator
