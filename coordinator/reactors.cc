// Event and download reactors (see reactors.h).
#include "coordinator/reactors.h"

#include <algorithm>

namespace fedlgc::coordinator {

void EventsReactor::Push(const protos::ServerEvent& e) {
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  queue_.push_back(e);
  if (!writing_) {
    writing_ = true;
    StartWrite(&queue_.front());
  }
}

void EventsReactor::OnReadDone(bool ok) {
  if (ok) {
    StartRead(&in_);
    return;
  }
  // The client closed its side or the stream broke.
  absl::MutexLock lock(&mu_);
  if (!finished_) {
    finished_ = true;
    Finish(grpc::Status::OK);
  }
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
  svc_->Unregister(client_, this);
  delete this;
}

DownloadReactor::DownloadReactor(CoordinatorService* svc, std::string client,
                                 std::shared_ptr<const ModelBlob> blob, uint64_t offset,
                                 bool measure)
    : svc_(svc),
      client_(std::move(client)),
      blob_(std::move(blob)),
      offset_(offset),
      measure_(measure && offset == 0),
      start_(std::chrono::steady_clock::now()) {
  if (offset_ > 0) svc_->metrics()->AddResume(client_, "download");
  Next();
}

void DownloadReactor::OnWriteDone(bool ok) {
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

void DownloadReactor::Next() {
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

}  // namespace fedlgc::coordinator
