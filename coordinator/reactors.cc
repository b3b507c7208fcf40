// Event and download reactors (see reactors.h).
#include "coordinator/reactors.h"

#include <grpcpp/support/slice.h>

#include <algorithm>

namespace fedlgc::coordinator {

void EventsReactor::Push(const protos::ServerEvent& e) {
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  if (queue_.size() >= kMaxQueued) {
    // The client reads nothing: it loses the stream, not the coordinator its memory.
    FinishLocked(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        StrCat(kMaxQueued, " events wait unread; reconnect to get the ones that matter")));
    return;
  }
  queue_.emplace_back();
  SerializeMessage(e, &queue_.back());
  if (!writing_) {
    writing_ = true;
    StartWrite(&queue_.front());
  }
}

void EventsReactor::Close(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (!finished_) FinishLocked(ToGrpc(status));
}

void EventsReactor::FinishLocked(const grpc::Status& status) {
  finished_ = true;
  Finish(status);
}

void EventsReactor::OnReadDone(bool ok) {
  if (ok) {
    protos::ClientEvent e;
    const absl::Status st = ParseMessage(in_, svc_->max_message_bytes(), &e);
    if (st.ok()) {
      StartRead(&in_);
      return;
    }
    svc_->metrics()->AddRejected(ReasonOf(st));
    absl::MutexLock lock(&mu_);
    if (!finished_) FinishLocked(ToGrpc(st));
    return;
  }
  // The client closed its side or the stream broke.
  absl::MutexLock lock(&mu_);
  if (!finished_) FinishLocked(grpc::Status::OK);
}

void EventsReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  queue_.pop_front();
  if (!ok || finished_ || queue_.empty()) {
    writing_ = false;
    return;
  }
  StartWrite(&queue_.front());
}

void EventsReactor::OnDone() {
  svc_->events().Unregister(client_, this);
  delete this;
}

DownloadReactor::DownloadReactor(CoordinatorService* svc, std::string client,
                                 std::shared_ptr<const ModelBlob> blob, uint64_t offset,
                                 bool measure, std::shared_ptr<StreamTicket> ticket)
    : svc_(svc),
      client_(std::move(client)),
      blob_(std::move(blob)),
      offset_(offset),
      measure_(measure && offset == 0 && !blob_->chain),
      start_(svc_->clock().Now()),
      ticket_(std::move(ticket)) {
  if (offset_ > 0) svc_->metrics()->AddResume(client_, "download");
  Next();
}

void DownloadReactor::OnWriteDone(bool ok) {
  if (!ok) {
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "download stream broke"));
    return;
  }
  ticket_->Progress();
  svc_->events().Touch(client_);
  // A chain stands for the model it rebuilds: its share of that, in float32 bytes.
  const uint64_t total = blob_->bytes.size();
  const uint64_t raw = blob_->raw_bytes == 0 || total == 0 ? sent_ : blob_->raw_bytes * sent_ / total;
  svc_->metrics()->AddDownlink(client_, sent_, raw);
  svc_->traffic().downlink += sent_;
  svc_->traffic().downlink_raw += raw;
  if (blob_ == svc_->model_file()) svc_->traffic().model_file += sent_;
  svc_->ReportDownload(client_, sent_, false);
  offset_ += sent_;
  Next();
}

void DownloadReactor::OnDone() {
  ticket_->Done();
  delete this;
}

namespace {

void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Drops the reference a slice of a blob holds.
void ReleaseBlob(void* ref) { delete static_cast<std::shared_ptr<const ModelBlob>*>(ref); }

}  // namespace

grpc::ByteBuffer DownloadReactor::ChunkMessage(const std::shared_ptr<const ModelBlob>& blob,
                                               uint64_t offset, uint64_t n) {
  protos::ModelChunk head;  // every field but the data
  head.set_version(blob->version);
  head.set_offset(offset);
  head.set_total_bytes(blob->bytes.size());
  head.set_crc32c(blob->crc32c);
  if (blob->chain) {
    head.set_chain(true);
    head.set_from_version(blob->from);
  }
  std::string prefix = head.SerializeAsString();
  // Field 4 (data), length-delimited: a protobuf parser takes fields in any order.
  AppendVarint((4 << 3) | 2, &prefix);
  AppendVarint(n, &prefix);
  grpc::Slice slices[2] = {
      grpc::Slice(prefix),
      grpc::Slice(const_cast<char*>(blob->bytes.data() + offset), n, &ReleaseBlob,
                  new std::shared_ptr<const ModelBlob>(blob)),
  };
  return grpc::ByteBuffer(slices, n > 0 ? 2 : 1);
}

void DownloadReactor::Next() {
  const uint64_t total = blob_->bytes.size();
  if (offset_ >= total) {
    svc_->ReportDownload(client_, 0, true);
    if (measure_) {
      svc_->links().RecordDownload(client_, total, core::SecondsSince(svc_->clock(), start_));
    }
    Finish(grpc::Status::OK);
    return;
  }
  sent_ = std::min(kChunkBytes, total - offset_);
  out_ = ChunkMessage(blob_, offset_, sent_);
  StartWrite(&out_);
}

}  // namespace fedlgc::coordinator
