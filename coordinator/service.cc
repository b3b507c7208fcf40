// Reactors of the coordinator service (see service.h).
#include "coordinator/service.h"

#include <algorithm>
#include <chrono>
#include <deque>

#include "codecs/str.h"
#include "coordinator/upload_reactor.h"

namespace fedlgc::coordinator {

grpc::Status ToGrpc(const absl::Status& st) {
  if (st.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()), std::string(st.message()));
}

// Event stream of one client: queues server events and writes them one at a time;
// heartbeats are read and dropped. Deletes itself in OnDone after unregistering.
class EventsReactor final
    : public grpc::ServerBidiReactor<protos::ClientEvent, protos::ServerEvent> {
 public:
  EventsReactor(CoordinatorService* svc, std::string client)
      : svc_(svc), client_(std::move(client)) {}

  void Begin() { StartRead(&in_); }

  // Queues an event. Safe from any thread while registered with the service.
  void Push(const protos::ServerEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    queue_.push_back(e);
    if (!writing_) {
      writing_ = true;
      StartWrite(&queue_.front());
    }
  }

  void OnReadDone(bool ok) override {
    if (ok) {
      StartRead(&in_);
      return;
    }
    // The client closed its side or the stream broke.
    std::lock_guard<std::mutex> lock(mu_);
    if (!finished_) {
      finished_ = true;
      Finish(grpc::Status::OK);
    }
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.pop_front();
    if (!ok || finished_ || queue_.empty()) {
      writing_ = false;
      return;
    }
    StartWrite(&queue_.front());
  }

  void OnDone() override {
    svc_->Unregister(client_, this);
    delete this;
  }

 private:
  CoordinatorService* const svc_;
  const std::string client_;
  protos::ClientEvent in_;
  std::mutex mu_;
  std::deque<protos::ServerEvent> queue_;
  bool writing_ = false;
  bool finished_ = false;
};

namespace {

class DownloadReactor final : public grpc::ServerWriteReactor<protos::ModelChunk> {
 public:
  static constexpr uint64_t kChunkBytes = 1 << 20;

  DownloadReactor(CoordinatorService* svc, std::string client,
                  std::shared_ptr<const ModelBlob> blob, uint64_t offset, bool measure)
      : svc_(svc),
        client_(std::move(client)),
        blob_(std::move(blob)),
        offset_(offset),
        measure_(measure && offset == 0),
        start_(std::chrono::steady_clock::now()) {
    if (offset_ > 0) svc_->metrics()->AddResume(client_, "download");
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "download stream broke"));
      return;
    }
    svc_->Touch(client_);
    const uint64_t n = out_.data().size();
    svc_->metrics()->AddDownlink(client_, n, n);
    svc_->traffic().downlink += n;
    offset_ += n;
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    const uint64_t total = blob_->bytes.size();
    if (offset_ >= total) {
      if (measure_) {
        svc_->RecordDownload(
            client_, total,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
      }
      Finish(grpc::Status::OK);
      return;
    }
    const uint64_t n = std::min(kChunkBytes, total - offset_);
    out_.set_version(blob_->version);
    out_.set_offset(offset_);
    out_.set_total_bytes(total);
    out_.set_crc32c(blob_->crc32c);
    out_.set_data(blob_->bytes.data() + offset_, n);
    StartWrite(&out_);
  }

  CoordinatorService* const svc_;
  const std::string client_;
  const std::shared_ptr<const ModelBlob> blob_;
  uint64_t offset_;
  const bool measure_;  // a whole model download: its time measures the link
  const std::chrono::steady_clock::time_point start_;
  protos::ModelChunk out_;
};

}  // namespace

CoordinatorService::CoordinatorService(RoundEngine* engine, monitoring::Metrics* metrics,
                                       JobInfo job, bool insecure)
    : engine_(engine), metrics_(metrics), job_(std::move(job)), insecure_(insecure) {}

CoordinatorService::~CoordinatorService() = default;

absl::StatusOr<std::string> CoordinatorService::Identity(grpc::CallbackServerContext* ctx,
                                                         const std::string& claimed) {
  if (insecure_) {
    if (claimed.empty())
      return absl::InvalidArgumentError("--insecure: requests must name a client_id");
    return claimed;
  }
  auto auth = ctx->auth_context();
  const auto cn =
      auth ? auth->FindPropertyValues("x509_common_name") : std::vector<grpc::string_ref>{};
  if (cn.empty()) {
    metrics_->AddRejected("identity");
    return absl::UnauthenticatedError("no client certificate: this coordinator requires mTLS");
  }
  std::string id(cn.front().data(), cn.front().size());
  if (!claimed.empty() && claimed != id) {
    metrics_->AddRejected("identity");
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

grpc::ServerUnaryReactor* CoordinatorService::Join(grpc::CallbackServerContext* ctx,
                                                   const protos::JoinRequest* req,
                                                   protos::JoinReply* reply) {
  auto* reactor = ctx->DefaultReactor();
  auto id = Identity(ctx, req->client_id());
  if (!id.ok()) {
    reactor->Finish(ToGrpc(id.status()));
    return reactor;
  }
  if (req->num_samples() == 0) {
    metrics_->AddRejected("malformed");
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "num_samples must be > 0"));
    return reactor;
  }
  engine_->Register(*id, req->num_samples());
  metrics_->JoinClient(*id, engine_->current_round());
  reply->set_job_id(job_.job_id);
  reply->set_model(job_.model);
  reply->set_dim(job_.dim);
  reply->set_current_round(engine_->current_round());
  reply->set_total_rounds(job_.total_rounds);
  reply->set_mode(job_.mode);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerBidiReactor<protos::ClientEvent, protos::ServerEvent>* CoordinatorService::Events(
    grpc::CallbackServerContext* ctx) {
  auto id = StreamIdentity(ctx);
  if (!id.ok()) {
    return new ErrorReactor<grpc::ServerBidiReactor<protos::ClientEvent, protos::ServerEvent>>(
        ToGrpc(id.status()));
  }
  auto* r = new EventsReactor(this, *id);
  OnEventsOpened(*id, r);
  r->Begin();
  return r;
}

void CoordinatorService::OnEventsOpened(const std::string& client, EventsReactor* r) {
  bool resumed = false;
  {
    // Register and queue the catch-up under one lock, so nothing the driver pushes can
    // overtake it: the client's recent receipts first, then the open round if it takes
    // part, or the end of the job.
    std::lock_guard<std::mutex> lock(mu_);
    resumed = streams_.count(client) != 0;
    streams_[client] = r;  // a newer stream replaces the old one
    for (const Receipt& rc : engine_->ReceiptsFor(client)) r->Push(ReceiptEvent(rc));
    if (auto start = RoundStartEvent(client)) {
      r->Push(*start);
    } else if (done_) {
      r->Push(done_event_);
    }
  }
  if (resumed) metrics_->AddResume(client, "events");
}

void CoordinatorService::Unregister(const std::string& client, EventsReactor* r) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(client);
  if (it != streams_.end() && it->second == r) streams_.erase(it);
}

std::vector<std::string> CoordinatorService::Connected() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [id, r] : streams_) out.push_back(id);
  return out;
}

void CoordinatorService::Touch(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  last_call_[client] = Clock::now();
}

Clock::time_point CoordinatorService::LastSeen(const std::string& client) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (streams_.count(client)) return Clock::now();
  auto it = last_call_.find(client);
  return it == last_call_.end() ? Clock::time_point() : it->second;
}

std::optional<protos::ServerEvent> CoordinatorService::RoundStartEvent(
    const std::string& client) const {
  const std::optional<RoundInfo> info = engine_->OpenRoundFor(client);
  if (!info) return std::nullopt;
  protos::ServerEvent e;
  auto* s = e.mutable_round_start();
  const RoundPlan& plan = engine_->plan();
  s->set_round(info->round);
  s->set_model_version(info->model_version);
  s->set_codec(info->codec);
  s->set_local_epochs(plan.local_epochs);
  s->set_local_steps(plan.local_steps);
  s->set_lr(plan.lr);
  s->set_batch_size(plan.batch_size);
  s->set_max_chunk_bytes(plan.max_chunk_bytes);
  if (decorate_) decorate_(client, s);
  s->set_seed(info->seed);
  s->set_next_seed(info->next_seed);
  const auto left = info->deadline - Clock::now();
  const auto deadline = std::chrono::system_clock::now() +
                        std::chrono::duration_cast<std::chrono::system_clock::duration>(left);
  s->set_deadline_unix_ms(
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline.time_since_epoch()).count());
  return e;
}

protos::ServerEvent CoordinatorService::ReceiptEvent(const Receipt& rc) {
  protos::ServerEvent e;
  auto* r = e.mutable_receipt();
  r->set_round(rc.round);
  r->set_update_id(rc.update_id);
  r->set_chunk_count(rc.chunk_count);
  for (uint32_t c : rc.counted) r->add_counted_chunks(c);
  return e;
}

bool CoordinatorService::Push(const std::string& client, const protos::ServerEvent& event) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(client);
  if (it == streams_.end()) return false;
  it->second->Push(event);
  return true;
}

bool CoordinatorService::SendRoundStart(const std::string& client) {
  const auto e = RoundStartEvent(client);
  return e && Push(client, *e);
}

void CoordinatorService::BroadcastDone(uint64_t rounds, float accuracy) {
  std::lock_guard<std::mutex> lock(mu_);
  done_event_.mutable_done()->set_rounds(rounds);
  done_event_.mutable_done()->set_final_accuracy(accuracy);
  done_ = true;
  for (const auto& [id, r] : streams_) r->Push(done_event_);
}

void CoordinatorService::SetEncoderBlob(std::shared_ptr<const ModelBlob> blob) {
  std::lock_guard<std::mutex> lock(mu_);
  encoder_ = std::move(blob);
}

double CoordinatorService::LinkBytesPerSecond(const std::string& client) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = link_bps_.find(client);
  return it == link_bps_.end() ? 0.0 : it->second;
}

void CoordinatorService::RecordDownload(const std::string& client, uint64_t bytes, double seconds) {
  if (!(seconds > 0)) return;
  const double bps = static_cast<double>(bytes) / seconds;
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, fresh] = link_bps_.try_emplace(client, bps);
  if (!fresh) it->second = 0.5 * it->second + 0.5 * bps;
}

grpc::ServerWriteReactor<protos::ModelChunk>* CoordinatorService::DownloadModel(
    grpc::CallbackServerContext* ctx, const protos::ModelRequest* req) {
  auto id = Identity(ctx, req->client_id());
  if (!id.ok())
    return new ErrorReactor<grpc::ServerWriteReactor<protos::ModelChunk>>(ToGrpc(id.status()));
  std::shared_ptr<const ModelBlob> blob;
  if (req->blob() == "encoder") {
    std::lock_guard<std::mutex> lock(mu_);
    blob = encoder_;
    if (!blob) {
      return new ErrorReactor<grpc::ServerWriteReactor<protos::ModelChunk>>(
          grpc::Status(grpc::StatusCode::NOT_FOUND, "no LGC encoder is served"));
    }
  } else if (req->blob().empty()) {
    blob = engine_->model();
  } else if (blob_names_ && blob_names_(req->blob())) {
    blob = blobs_(*id, req->blob(), req->version());
    if (!blob) {
      return new ErrorReactor<grpc::ServerWriteReactor<protos::ModelChunk>>(
          grpc::Status(grpc::StatusCode::NOT_FOUND,
                       StrCat(req->blob(), " ", req->version(), " is not served to ", *id)));
    }
  } else {
    metrics_->AddRejected("malformed");
    return new ErrorReactor<grpc::ServerWriteReactor<protos::ModelChunk>>(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT, StrCat("unknown blob '", req->blob(), "'")));
  }
  if (req->version() != blob->version) {
    return new ErrorReactor<grpc::ServerWriteReactor<protos::ModelChunk>>(
        grpc::Status(grpc::StatusCode::NOT_FOUND,
                     StrCat("model version ", req->version(),
                            " is not served; the current version is ", blob->version)));
  }
  if (req->offset() > blob->bytes.size()) {
    metrics_->AddRejected("range");
    return new ErrorReactor<grpc::ServerWriteReactor<protos::ModelChunk>>(
        grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "offset past the end of the model"));
  }
  return new DownloadReactor(this, *id, std::move(blob), req->offset(), req->blob().empty());
}

grpc::ServerReadReactor<protos::UpdateChunk>* CoordinatorService::UploadUpdate(
    grpc::CallbackServerContext* ctx, protos::UploadReceipt* receipt) {
  auto id = StreamIdentity(ctx);
  if (!id.ok())
    return new ErrorReactor<grpc::ServerReadReactor<protos::UpdateChunk>>(ToGrpc(id.status()));
  return new UploadReactor<protos::UpdateChunk>(this, *id, receipt);
}

}  // namespace fedlgc::coordinator
