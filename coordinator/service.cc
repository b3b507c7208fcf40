// The coordinator service's calls (see service.h); the reactors are in reactors.cc.
#include "coordinator/service.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/str.h"
#include "coordinator/downlink.h"
#include "coordinator/reactors.h"
#include "coordinator/wire.h"
#include "core/protocol.h"

namespace fedlgc::coordinator {
namespace {

template <typename Reactor>
Reactor* Failed(const absl::Status& st) {
  return new ErrorReactor<Reactor>(ToGrpc(st));
}

// Parses a request; a refusal is counted and becomes the call's status.
absl::Status ParseCounted(const grpc::ByteBuffer& in, uint64_t max_message_bytes,
                          monitoring::Metrics* metrics, google::protobuf::MessageLite* m) {
  absl::Status st = ParseMessage(in, max_message_bytes, m);
  if (!st.ok()) metrics->AddRejected(ReasonOf(st));
  return st;
}

// A unary call: parse the request, run `handle` on it, serialize the reply.
template <typename Request, typename Reply, typename Handle>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                grpc::ByteBuffer* response, uint64_t max_message_bytes,
                                monitoring::Metrics* metrics, Handle handle) {
  auto* reactor = ctx->DefaultReactor();
  Request req;
  Reply reply;
  grpc::Status st = ToGrpc(ParseCounted(*request, max_message_bytes, metrics, &req));
  if (st.ok()) st = handle(ctx, req, &reply);
  if (st.ok()) SerializeMessage(reply, response);
  reactor->Finish(st);
  return reactor;
}

}  // namespace

grpc::Status ToGrpc(const absl::Status& st) {
  if (st.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()), std::string(st.message()));
}

CoordinatorService::CoordinatorService(RoundEngine* engine, RoundDriver* driver,
                                       monitoring::Metrics* metrics, JobInfo job,
                                       ServiceOptions options)
    : engine_(engine),
      driver_(driver),
      metrics_(metrics),
      job_(std::move(job)),
      total_rounds_(job_.total_rounds),
      options_(std::move(options)),
      calls_(
          options_.streams, options_.clock, options_.watchdog,
          [metrics](size_t open) { metrics->SetOpenCalls(open); },
          [metrics](int cancelled) { metrics->AddIdleCancelled(cancelled); }),
      links_(options_.links != nullptr ? options_.links : &own_links_),
      events_(options_.clock) {}

CoordinatorService::~CoordinatorService() = default;

absl::StatusOr<std::string> CoordinatorService::Identity(grpc::CallbackServerContext* ctx,
                                                         const std::string& claimed) {
  if (options_.insecure) {
    if (claimed.empty())
      return absl::InvalidArgumentError("--insecure: requests must name a client_id");
    return claimed;
  }
  auto auth = ctx->auth_context();
  const auto cn =
      auth ? auth->FindPropertyValues("x509_common_name") : std::vector<grpc::string_ref>{};
  if (cn.empty()) {
    metrics_->AddRejected(RejectReason::kIdentity);
    return absl::UnauthenticatedError("no client certificate: this coordinator requires mTLS");
  }
  std::string id(cn.front().data(), cn.front().size());
  if (!claimed.empty() && claimed != id) {
    metrics_->AddRejected(RejectReason::kIdentity);
    return absl::PermissionDeniedError(
        StrCat("certificate is for ", id, "; it cannot act as ", claimed));
  }
  return id;
}

absl::StatusOr<std::string> CoordinatorService::StreamIdentity(grpc::CallbackServerContext* ctx) {
  std::string claimed;
  const auto& md = ctx->client_metadata();
  if (auto it = md.find("fedlgc-client-id"); it != md.end())
    claimed.assign(it->second.data(), it->second.size());
  return Identity(ctx, claimed);
}

absl::StatusOr<std::shared_ptr<StreamTicket>> CoordinatorService::OpenStream(
    const std::string& client, grpc::CallbackServerContext* ctx) {
  auto ticket = calls_.Open(client, ctx);
  if (!ticket.ok()) metrics_->AddRejected(RejectReason::kStreams);
  return ticket;
}

grpc::ServerUnaryReactor* CoordinatorService::Join(grpc::CallbackServerContext* ctx,
                                                   const grpc::ByteBuffer* request,
                                                   grpc::ByteBuffer* response) {
  return Unary<protos::JoinRequest, protos::JoinReply>(
      ctx, request, response, options_.max_message_bytes, metrics_,
      [this](auto* c, const auto& req, auto* reply) { return DoJoin(c, req, reply); });
}

grpc::Status CoordinatorService::DoJoin(grpc::CallbackServerContext* ctx,
                                        const protos::JoinRequest& req, protos::JoinReply* reply) {
  auto id = Identity(ctx, req.client_id());
  if (!id.ok()) return ToGrpc(id.status());
  // Protocol version 1 clients did not send one (0).
  const uint32_t theirs = std::max<uint32_t>(req.protocol_version(), 1);
  if (theirs != kProtocolVersion) {
    metrics_->AddRejected(RejectReason::kProtocol);
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        StrCat("client ", *id, " speaks fedlgc protocol version ", theirs,
                               "; this coordinator speaks version ", kProtocolVersion,
                               ": run an edge client and coordinator of the same release"));
  }
  if (engine_->roster().IsQuarantined(*id)) {
    metrics_->AddRejected(RejectReason::kQuarantined);
    const auto why = engine_->roster().Quarantined();
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        StrCat("client ", *id, " is quarantined for this job: ",
                               why.count(*id) ? why.at(*id) : ""));
  }
  if (req.num_samples() == 0) {
    metrics_->AddRejected(RejectReason::kMalformed);
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "num_samples must be > 0");
  }
  if (!req.model_sha256().empty() && req.model_sha256() != job_.model_sha256) {
    metrics_->AddRejected(RejectReason::kModel);
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        job_.model_sha256.empty()
            ? StrCat("client ", *id, " brings the TorchScript file sha256:", req.model_sha256(),
                     "; this job trains the built-in ", job_.model, " (give the client no --model)")
            : StrCat("client ", *id, " brings the model file sha256:", req.model_sha256(),
                     "; this job trains ", job_.model, " sha256:", job_.model_sha256,
                     " (give the client that file, or no --model to download it)"));
  }
  engine_->roster().Register(*id, req.num_samples());
  if (req.wants_final_model()) events_.AddFinalModelTaker(*id);
  metrics_->JoinClient(*id, engine_->current_round());
  reply->set_job_id(job_.job_id);
  reply->set_model(job_.model);
  reply->set_dim(job_.dim);
  reply->set_current_round(engine_->current_round());
  reply->set_total_rounds(total_rounds_);
  reply->set_mode(std::string(ModeName(driver_->mode())));
  reply->set_protocol_version(kProtocolVersion);
  if (options_.downlinks != nullptr) reply->set_downlink_codec(options_.downlinks->codec());
  if (job_.model_file != nullptr) {
    reply->set_model_sha256(job_.model_sha256);
    reply->set_model_bytes(job_.model_file->bytes.size());
  }
  reply->set_buffers(job_.buffers);
  reply->set_loss(job_.loss);
  reply->set_freeze(job_.freeze);
  reply->set_local_params(job_.local_params);
  reply->set_init_seed(job_.init_seed);
  reply->set_eval_fraction(job_.eval_fraction);
  reply->set_job_instance(job_.instance);
  if (options_.downlinks != nullptr && job_.initial_model_crc.has_value()) {
    reply->set_initial_model_crc32c(*job_.initial_model_crc);
  }
  return grpc::Status::OK;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* CoordinatorService::Events(
    grpc::CallbackServerContext* ctx) {
  auto id = StreamIdentity(ctx);
  if (!id.ok()) {
    return Failed<grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>>(id.status());
  }
  auto* r = new EventsReactor(this, *id);
  // The catch-up is made under the streams' lock (the engine's, the driver's and the
  // statistics book's locks come after it), so nothing the driver pushes can overtake it:
  // the client's receipts, a statistics ask it has not answered, the open round's start.
  const bool resumed = events_.Open(
      *id, r,
      [&] {
        std::vector<protos::ServerEvent> events;
        for (const Receipt& rc : engine_->ReceiptsFor(*id)) events.push_back(ReceiptEventOf(rc));
        if (options_.stats_book != nullptr) {
          if (auto ask = options_.stats_book->AskFor(*id)) events.push_back(*std::move(ask));
        }
        return events;
      },
      [&] { return RoundStartEventOf(*engine_, *driver_, *id, *options_.clock); });
  if (resumed) metrics_->AddResume(*id, "events");
  r->Begin();
  return r;
}

std::optional<protos::ServerEvent> RoundStartEventOf(const RoundEngine& engine, RoundDriver& driver,
                                                     const std::string& client,
                                                     const Clock& clock) {
  const std::optional<RoundInfo> info = engine.OpenRoundFor(client);
  if (!info) return std::nullopt;
  protos::ServerEvent e;
  auto* s = e.mutable_round_start();
  const RoundPlan& plan = engine.terms().plan();
  s->set_round(info->round);
  s->set_model_version(info->model_version);
  s->set_codec(info->codec);
  s->set_local_epochs(info->training.local_epochs);
  s->set_local_steps(info->training.local_steps);
  s->set_lr(info->training.lr);
  s->set_batch_size(info->training.batch_size);
  if (info->training.prox_mu > 0) s->mutable_objective()->set_prox_mu(info->training.prox_mu);
  s->set_max_chunk_bytes(plan.max_chunk_bytes);
  s->set_upload_order(plan.upload_order);
  driver.DecorateRoundStart(client, s);
  s->set_seed(info->seed);
  s->set_next_seed(info->next_seed);
  const auto left = info->deadline - clock.Now();
  const auto deadline =
      clock.WallNow() + std::chrono::duration_cast<std::chrono::system_clock::duration>(left);
  s->set_deadline_unix_ms(core::UnixMs(deadline));
  return e;
}

ChunkIn ChunkInOf(const std::string& client, const protos::UpdateChunk& chunk) {
  ChunkIn in;
  in.client_id = client;
  in.round = chunk.round();
  in.update_id = chunk.update_id();
  in.chunk_index = chunk.chunk_index();
  in.chunk_count = chunk.chunk_count();
  in.num_samples = chunk.num_samples();
  in.frame = chunk.frame();
  in.scale = chunk.scale() == 0 ? 1.0f : chunk.scale();
  in.part = chunk.part();
  return in;
}

protos::ServerEvent ReceiptEventOf(const Receipt& rc) {
  protos::ServerEvent e;
  auto* r = e.mutable_receipt();
  r->set_round(rc.round);
  r->set_update_id(rc.update_id);
  r->set_chunk_count(rc.chunk_count);
  for (uint32_t c : rc.counted) r->add_counted_chunks(c);
  r->set_committed_version(rc.version);
  return e;
}

bool CoordinatorService::SendRoundStart(const std::string& client) {
  const auto e = RoundStartEventOf(*engine_, *driver_, client, *options_.clock);
  return e && events_.Push(client, *e);
}

double CoordinatorService::LinkBytesPerSecond(const std::string& client) const {
  return links_->Estimate(client).down_bps_mean;
}

absl::StatusOr<std::shared_ptr<const ModelBlob>> CoordinatorService::BlobFor(
    const std::string& client, const protos::ModelRequest& req) {
  std::shared_ptr<const ModelBlob> blob;
  if (req.blob().empty()) {
    blob = engine_->model();
    // A buffered round's client trains from the version current when it was asked, which
    // a commit may have superseded since.
    if (req.version() < blob->version) {
      if (auto past = engine_->ModelAt(req.version())) blob = std::move(past);
    }
  } else if (req.blob() == kModelFileBlob) {
    if (job_.model_file == nullptr) {
      return absl::NotFoundError(
          StrCat("this job trains the built-in ", job_.model, "; there is no file to download"));
    }
    blob = job_.model_file;
  } else {
    auto served = driver_->Blob(client, req.blob(), req.version());
    if (!served.ok()) {
      if (absl::IsInvalidArgument(served.status())) metrics_->AddRejected(RejectReason::kMalformed);
      return served.status();
    }
    blob = *std::move(served);
  }
  if (req.version() != blob->version) {
    return absl::NotFoundError(StrCat(req.blob().empty() ? "model" : req.blob(), " version ",
                                      req.version(), " is not served; the current version is ",
                                      blob->version));
  }
  if (options_.downlinks != nullptr && (req.blob().empty() || driver_->Broadcasts(req.blob()))) {
    // The model as clients hold it: the chain from the caller's version, or that model.
    const std::string& bytes = blob->bytes;
    auto channel = options_.downlinks->At(req.blob(), blob->version, [&bytes] {
      std::vector<float> v(bytes.size() / sizeof(float));
      std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
      return v;
    });
    if (!channel.ok()) return channel.status();
    auto served = (*channel)->Serve(req.version(), req.has_held_version()
                                                       ? std::optional<uint64_t>(req.held_version())
                                                       : std::nullopt);
    if (!served.ok()) return served.status();
    blob = *std::move(served);
  }
  if (req.offset() > blob->bytes.size()) {
    metrics_->AddRejected(RejectReason::kRange);
    return absl::OutOfRangeError("offset past the end of the blob");
  }
  return blob;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* CoordinatorService::DownloadModel(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request) {
  using Reactor = grpc::ServerWriteReactor<grpc::ByteBuffer>;
  protos::ModelRequest req;
  if (absl::Status st = ParseCounted(*request, options_.max_message_bytes, metrics_, &req);
      !st.ok()) {
    return Failed<Reactor>(st);
  }
  auto id = Identity(ctx, req.client_id());
  if (!id.ok()) return Failed<Reactor>(id.status());
  auto blob = BlobFor(*id, req);
  if (!blob.ok()) return Failed<Reactor>(blob.status());
  auto ticket = OpenStream(*id, ctx);
  if (!ticket.ok()) return Failed<Reactor>(ticket.status());
  return new DownloadReactor(this, *id, *std::move(blob), req.offset(), req.blob().empty(),
                             *std::move(ticket));
}

grpc::ServerReadReactor<grpc::ByteBuffer>* CoordinatorService::UploadUpdate(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) {
  using Reactor = grpc::ServerReadReactor<grpc::ByteBuffer>;
  auto id = StreamIdentity(ctx);
  if (!id.ok()) return Failed<Reactor>(id.status());
  auto ticket = OpenStream(*id, ctx);
  if (!ticket.ok()) return Failed<Reactor>(ticket.status());
  return new UploadReactor<protos::UpdateChunk>(this, *id, response, *std::move(ticket));
}

grpc::ServerReadReactor<grpc::ByteBuffer>* CoordinatorService::Gossip(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) {
  using Reactor = grpc::ServerReadReactor<grpc::ByteBuffer>;
  auto id = StreamIdentity(ctx);
  if (!id.ok()) return Failed<Reactor>(id.status());
  auto ticket = OpenStream(*id, ctx);
  if (!ticket.ok()) return Failed<Reactor>(ticket.status());
  return new UploadReactor<protos::GossipChunk>(this, *id, response, *std::move(ticket));
}

grpc::ServerUnaryReactor* CoordinatorService::Report(grpc::CallbackServerContext* ctx,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  return Unary<protos::ProgressReport, protos::ReportAck>(
      ctx, request, response, options_.max_message_bytes, metrics_,
      [this](auto* c, const auto& req, auto* ack) { return DoReport(c, req, ack); });
}

grpc::Status CoordinatorService::DoReport(grpc::CallbackServerContext* ctx,
                                          const protos::ProgressReport& req,
                                          protos::ReportAck* ack) {
  auto id = Identity(ctx, req.client_id());
  if (!id.ok()) return ToGrpc(id.status());
  events_.Touch(*id);
  if (req.has_eval()) {
    // Federated evaluation's answer: the book's, not the round's.
    const absl::Status st = options_.eval_book != nullptr
                                ? options_.eval_book->Accept(*id, req.eval())
                                : absl::FailedPreconditionError("this job evaluates no model on clients");
    if (!st.ok()) {
      metrics_->AddEvalAnswers("refused", 1);
      metrics_->AddRejected(absl::IsFailedPrecondition(st) ? RejectReason::kWrongRound
                                                           : RejectReason::kMalformed);
      return ToGrpc(st);
    }
    ack->set_round(req.round());
    return grpc::Status::OK;
  }
  if (req.has_statistics()) {
    // The statistics phase's answer: the phase's book, and the round loop waits for it.
    const absl::Status st =
        options_.stats_book != nullptr
            ? options_.stats_book->Accept(*id, req.statistics())
            : absl::FailedPreconditionError("this job re-estimates no statistics");
    if (!st.ok()) {
      metrics_->AddRejected(absl::IsFailedPrecondition(st) ? RejectReason::kWrongRound
                                                           : RejectReason::kMalformed);
      return ToGrpc(st);
    }
    ack->set_round(req.round());
    NotifyChunk();
    return grpc::Status::OK;
  }
  const absl::Status st = driver_->AcceptReport(*id, req);
  if (!st.ok()) {
    metrics_->AddRejected(absl::IsFailedPrecondition(st) ? RejectReason::kWrongRound
                                                         : ReasonOf(st));
    return ToGrpc(st);
  }
  ack->set_round(req.round());
  NotifyChunk();  // wakes the round loop, which may wait for reports
  return grpc::Status::OK;
}

}  // namespace fedlgc::coordinator
