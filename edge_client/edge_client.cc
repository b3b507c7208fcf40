// Edge client (see edge_client.h).
#include "edge_client/edge_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "codecs/error_feedback.h"
#include "codecs/frame.h"
#include "codecs/registry.h"
#include "codecs/str.h"
#include "core/atomic_file.h"
#include "core/dataset.h"
#include "core/model.h"
#include "core/partition.h"
#include "edge_client/grpc_status.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.grpc.pb.h"

namespace fedlgc::edge_client {

absl::Status EdgeClientOptions::Validate() const {
  if (client_id.empty() || client_id.size() > 64)
    return absl::InvalidArgumentError("--id must be 1-64 characters");
  if (num_shards == 0 || shard >= num_shards)
    return absl::InvalidArgumentError("--shard must be < --num-shards");
  if (!insecure && (tls_ca.empty() || tls_cert.empty() || tls_key.empty())) {
    return absl::InvalidArgumentError(
        "mTLS needs --tls-ca, --tls-cert and --tls-key (or --insecure)");
  }
  if (auto p = core::PartitionSpec::Parse(partition); !p.ok()) return p.status();
  return absl::OkStatus();
}

EdgeClient::EdgeClient(EdgeClientOptions options)
    : options_(std::move(options)), rng_(std::random_device{}()) {}

EdgeClient::~EdgeClient() {
  Stop();
  JoinShareUpload();
}

absl::StatusOr<std::unique_ptr<EdgeClient>> EdgeClient::Create(EdgeClientOptions options) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  std::unique_ptr<EdgeClient> c(new EdgeClient(std::move(options)));
  const EdgeClientOptions& o = c->options_;
  core::SetTorchThreads(o.torch_threads);
  auto data = core::LoadNamedDataset(o.data, o.data_dir, true, o.train_limit);
  if (!data.ok()) return data.status();
  c->data_ = std::make_unique<core::Dataset>(std::move(data).value());
  const auto spec = core::PartitionSpec::Parse(o.partition).value();
  c->shard_ = core::Partition(c->data_->labels, static_cast<int>(c->data_->classes),
                              static_cast<int>(o.num_shards), spec, o.partition_seed)[o.shard];
  if (c->shard_.empty()) return absl::FailedPreconditionError("this client's shard is empty");
  // Resolve the device now, so a wrong --device fails at start rather than at join.
  auto probe = core::Model::Create("mlp", 0, o.device);
  if (!probe.ok()) return probe.status();
  c->device_ = (*probe)->device();
  c->metrics_ = std::make_unique<monitoring::Metrics>();
  c->metrics_->InitClient(o.client_id);
  if (!o.metrics_listen.empty()) {
    if (absl::Status st = c->metrics_->Serve(o.metrics_listen); !st.ok()) return st;
  }
  c->state_path_ = StrCat(o.state_dir, "/", o.client_id, ".state");
  auto state = LoadClientState(c->state_path_);
  if (!state.ok()) return state.status();
  c->state_ = std::move(state).value();
  return c;
}

int EdgeClient::metrics_port() const { return metrics_->port(); }

void EdgeClient::Stop() {
  stop_ = true;
  std::lock_guard<std::mutex> lock(events_mu_);
  if (events_ctx_ != nullptr) events_ctx_->TryCancel();
}

absl::Status EdgeClient::Persist() { return SaveClientState(state_path_, state_); }

void EdgeClient::PrepareContext(grpc::ClientContext* ctx, double timeout_s) const {
  ctx->AddMetadata("fedlgc-client-id", options_.client_id);
  if (timeout_s > 0) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  }
}

void EdgeClient::Backoff(int attempt) {
  // Exponential with full jitter.
  const double cap =
      std::min(options_.backoff_max_s, options_.backoff_initial_s * (1 << std::min(attempt, 10)));
  std::uniform_real_distribution<double> u(0.5 * cap, cap);
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(u(rng_) * 1000));
  while (!stop_ && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

absl::Status EdgeClient::Connect() {
  const EdgeClientOptions& o = options_;
  std::shared_ptr<grpc::ChannelCredentials> creds;
  grpc::ChannelArguments args;
  if (o.insecure) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    auto ca = core::ReadFile(o.tls_ca), cert = core::ReadFile(o.tls_cert),
         key = core::ReadFile(o.tls_key);
    for (const auto* f : {&ca, &cert, &key}) {
      if (!f->ok()) return f->status();
    }
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = *ca;
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
    creds = grpc::SslCredentials(ssl);
    args.SetSslTargetNameOverride(o.tls_server_name);
  }
  args.SetMaxReceiveMessageSize(static_cast<int>(o.max_message_bytes));
  args.SetMaxSendMessageSize(static_cast<int>(o.max_message_bytes));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);  // see the coordinator's
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(o.backoff_max_s * 1000));
  channel_ = grpc::CreateCustomChannel(o.server, creds, args);
  return absl::OkStatus();
}

absl::Status EdgeClient::Join() {
  auto stub = protos::Coordinator::NewStub(channel_);
  protos::JoinRequest req;
  req.set_client_id(options_.client_id);
  req.set_num_samples(shard_.size());
  req.set_device(device_);
  protos::JoinReply reply;
  grpc::ClientContext ctx;
  PrepareContext(&ctx, 10);
  const auto t0 = std::chrono::steady_clock::now();
  const grpc::Status st = stub->Join(&ctx, req, &reply);
  if (!st.ok()) return FromGrpc(st, "join");
  NoteRoundTrip(t0);
  if (!model_ || model_->name() != reply.model()) {
    auto m = core::Model::Create(reply.model(), 0, device_);
    if (!m.ok()) return m.status();
    model_ = std::move(m).value();
  }
  job_over_ = reply.total_rounds() > 0 && reply.current_round() > reply.total_rounds();
  total_rounds_ = reply.total_rounds();
  if (model_->dim() != reply.dim()) {
    return absl::FailedPreconditionError(StrCat("the job's model has ", reply.dim(),
                                                " parameters; ", reply.model(), " here has ",
                                                model_->dim()));
  }
  return absl::OkStatus();
}

bool EdgeClient::RefreshChannelIfDown() {
  if (channel_ && channel_->GetState(false) != GRPC_CHANNEL_TRANSIENT_FAILURE) return false;
  return Connect().ok();
}

absl::Status EdgeClient::Run() {
  if (absl::Status st = Connect(); !st.ok()) return st;
  int attempt = 0;
  while (!stop_) {
    JoinShareUpload();  // nothing touches the channel while a share uploads
    absl::Status st = Join();
    if (absl::IsUnavailable(st)) {
      // A fresh channel: gRPC's own reconnect schedule for a channel whose connects have
      // failed can leave it down for up to ~20 s after the coordinator is back (measured
      // here with gRPC 1.51), however often we retry on it.
      if (absl::Status c = Connect(); !c.ok()) return c;
    }
    if (st.ok() && job_over_) {
      // The job is over, but receipts of the last round may still wait for us (an SGP
      // share that was delivered must be given up): read them once, then stop.
      bool done = false;
      (void)EventLoop(&done);
      if (state_.local.inbox_applied > 0) {
        // SGP: mail added just before this client stopped may never have been acknowledged;
        // the relay would keep a copy of mass that is already in this model.
        round_deadline_ = std::chrono::system_clock::now() + std::chrono::seconds(10);
        (void)ReportProgress(0, state_.local.loss, state_.local.inbox_applied, -1);
      }
      return absl::OkStatus();
    }
    if (st.ok()) {
      bool done = false;
      st = EventLoop(&done);
      JoinShareUpload();  // before any backoff: the upload thread shares rng_ and the channel
      if (done) return absl::OkStatus();
      if (st.ok()) attempt = 0;  // a clean end of stream: reconnect promptly
    }
    if (!st.ok()) {
      // What a retry cannot fix: identity, configuration, a job this client cannot run.
      if (absl::IsPermissionDenied(st) || absl::IsUnauthenticated(st) ||
          absl::IsInvalidArgument(st) || absl::IsFailedPrecondition(st)) {
        return st;
      }
      std::fprintf(stderr, "%s: %s; reconnecting\n", options_.client_id.c_str(),
                   st.ToString().c_str());
    }
    if (options_.exit_after_rounds > 0 && rounds_uploaded_ >= options_.exit_after_rounds)
      return absl::OkStatus();
    metrics_->AddResume(options_.client_id, "events");
    Backoff(attempt++);
  }
  return absl::OkStatus();
}

absl::Status EdgeClient::EventLoop(bool* done) {
  auto stub = protos::Coordinator::NewStub(channel_);
  grpc::ClientContext ctx;
  PrepareContext(&ctx, 0);
  {
    std::lock_guard<std::mutex> lock(events_mu_);
    if (stop_) return absl::OkStatus();
    events_ctx_ = &ctx;
  }
  auto stream = stub->Events(&ctx);
  protos::ServerEvent event;
  absl::Status result;
  while (!stop_ && stream->Read(&event)) {
    JoinShareUpload();  // an SGP share travelling beside training has arrived by now
    if (event.has_receipt()) {
      result = HandleReceipt(event.receipt());
    } else if (event.has_round_start()) {
      result = HandleRound(event.round_start());
    } else if (event.has_promote()) {
      result = HandleLgcPromote(event.promote());
    } else if (event.has_latent()) {
      result = HandleLgcLatent(event.latent());
    } else if (event.has_lead()) {
      result = HandleLsgdLead(event.lead());
    } else if (event.has_done()) {
      *done = true;
      break;
    }
    if (!result.ok()) break;
    if (options_.exit_after_rounds > 0 && rounds_uploaded_ >= options_.exit_after_rounds) break;
  }
  stream->WritesDone();
  if (*done || !result.ok() || stop_ ||
      (options_.exit_after_rounds > 0 && rounds_uploaded_ >= options_.exit_after_rounds)) {
    ctx.TryCancel();
  }
  const grpc::Status st = stream->Finish();
  {
    std::lock_guard<std::mutex> lock(events_mu_);
    events_ctx_ = nullptr;
  }
  if (!result.ok()) return result;
  if (*done || stop_) return absl::OkStatus();
  return FromGrpc(st, "event stream");
}

absl::Status EdgeClient::EnsureCodec(const std::string& spec) {
  if (codec_ && codec_spec_ == spec) return absl::OkStatus();
  // Every client keeps a residual. Biased codecs (top-k, sign) feed their compression
  // error back; unbiased ones keep only chunks that did not count, because their error
  // is noise with mean zero and feeding it back can grow without bound.
  auto parsed = codecs::MakeCodec(spec);
  if (!parsed.ok()) return parsed.status();
  std::string ef_spec = spec;
  if (dynamic_cast<codecs::ErrorFeedback*>(parsed->get()) == nullptr) {
    ef_spec =
        (*parsed)->traits().unbiased ? StrCat("ef(", spec, ",error=0)") : StrCat("ef(", spec, ")");
  }
  auto made = codecs::MakeCodec(ef_spec);
  if (!made.ok()) return made.status();
  codec_.reset(static_cast<codecs::ErrorFeedback*>(made->release()));
  codec_spec_ = spec;
  // The residual is plain coordinates: it carries over when the job switches codecs.
  if (state_.residual.size() == model_->dim()) {
    codec_->SetResidual(state_.residual);
  } else {
    state_.residual.clear();
  }
  state_.codec = spec;
  return absl::OkStatus();
}

void EdgeClient::ObserveEncode(uint64_t round, std::chrono::steady_clock::time_point t0) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  metrics_->ObserveEncodeSeconds(seconds);
  AppendRoundLog(StrCat("{\"round\": ", round, ", \"train_seconds\": ", last_train_seconds_,
                        ", \"encode_seconds\": ", seconds, "}"));
}

void EdgeClient::AppendRoundLog(const std::string& json) {
  std::ofstream(StrCat(options_.state_dir, "/", options_.client_id, ".rounds.jsonl"), std::ios::app)
      << json << "\n";
}

void EdgeClient::NoteRoundTrip(std::chrono::steady_clock::time_point t0) {
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (min_rtt_ms_ == 0 || ms < min_rtt_ms_) min_rtt_ms_ = ms;
}

PendingUpdate EdgeClient::NewPending(uint64_t round, uint64_t model_version) {
  PendingUpdate p;
  p.round = round;
  p.model_version = model_version;
  p.update_id = rng_() | 1;
  p.num_samples = shard_.size();
  return p;
}

absl::Status EdgeClient::HandleRound(const protos::RoundStart& start) {
  if (start.mode() == "lsgd") return HandleLsgdRound(start);
  if (start.mode() == "sgp") return HandleSgpRound(start);
  const auto deadline =
      std::chrono::system_clock::time_point(std::chrono::milliseconds(start.deadline_unix_ms()));
  round_deadline_ = deadline;
  if (state_.pending && (state_.pending->round != start.round() ||
                         state_.pending->model_version != start.model_version())) {
    // An update whose round ended without a receipt reaching us: nothing of it counted
    // as far as we can know, so all of it goes back into the residual.
    if (absl::Status st = RestorePending(*state_.pending); !st.ok()) return st;
    state_.pending.reset();
  }
  if (start.lgc_stage() >= 2) return HandleLgcRound(start);
  if (absl::Status st = EnsureCodec(start.codec()); !st.ok()) return st;
  if (!state_.pending) {
    auto update = TrainRound(start, deadline);
    if (!update.ok()) return update.status();
    if (update->empty()) return absl::OkStatus();  // the round moved on
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<codecs::Frame> frames;
    codecs::EncodeOptions eopts;
    eopts.seed = start.seed();
    eopts.max_frame_bytes = start.max_chunk_bytes();
    if (absl::Status st = codec_->Encode(*update, eopts, &frames); !st.ok()) return st;
    ObserveEncode(start.round(), t0);
    PendingUpdate p = NewPending(start.round(), start.model_version());
    for (codecs::Frame& f : frames) p.frames.push_back(std::move(f.bytes));
    state_.pending = std::move(p);
    state_.residual.assign(codec_->residual().begin(), codec_->residual().end());
    if (absl::Status st = Persist(); !st.ok()) return st;
  }
  return UploadPending(start.round(), deadline);
}

absl::Status EdgeClient::UploadPending(uint64_t round,
                                       std::chrono::system_clock::time_point deadline) {
  absl::Status st = Upload(deadline);
  if (st.ok() || absl::IsFailedPrecondition(st) || absl::IsDeadlineExceeded(st)) {
    // Done, or the round closed first: the receipt will say what counted.
    ++rounds_uploaded_;
    last_round_ = round;
    return absl::OkStatus();
  }
  return st;
}

absl::StatusOr<std::vector<float>> EdgeClient::TrainRound(
    const protos::RoundStart& start, std::chrono::system_clock::time_point deadline) {
  auto weights = Download(start.model_version(), deadline);
  if (!weights.ok()) {
    // The round moved on (another version is served) or ended: wait for the next one.
    if (absl::IsNotFound(weights.status()) || absl::IsDeadlineExceeded(weights.status())) {
      return std::vector<float>();
    }
    return weights.status();
  }
  std::vector<float> update = *weights;
  if (auto loss = TrainLocal(start, &update); !loss.ok()) return loss.status();
  for (size_t i = 0; i < update.size(); ++i) update[i] -= (*weights)[i];
  return update;
}

absl::StatusOr<double> EdgeClient::TrainLocal(const protos::RoundStart& start,
                                              std::vector<float>* weights) {
  if (absl::Status st = model_->SetFlat(*weights); !st.ok()) return st;
  core::TrainOptions topts;
  topts.epochs = static_cast<int>(start.local_epochs());
  topts.steps = static_cast<int>(start.local_steps());
  topts.lr = start.lr();
  topts.batch_size = static_cast<int>(start.batch_size());
  topts.seed = start.seed();
  auto trained = model_->Train(*data_, shard_, topts);
  if (!trained.ok()) return trained.status();
  metrics_->SetTrainLoss(options_.client_id, trained->running_loss);
  last_train_seconds_ = trained->seconds;
  *weights = model_->GetFlat();
  return trained->running_loss;
}

}  // namespace fedlgc::edge_client
