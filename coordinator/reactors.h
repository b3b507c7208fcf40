// The per-call state of the coordinator service's streaming calls (service.h): each
// reactor owns what its call needs, never blocks, and deletes itself when the call is
// done. They read and write raw bytes (wire.h). Internal to coordinator/.
#ifndef FEDLGC_COORDINATOR_REACTORS_H_
#define FEDLGC_COORDINATOR_REACTORS_H_

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/str.h"
#include "coordinator/service.h"
#include "coordinator/stream_registry.h"
#include "coordinator/wire.h"

namespace fedlgc::coordinator {

// Finishes a call at once with an error.
template <typename Base>
class ErrorReactor final : public Base {
 public:
  explicit ErrorReactor(const grpc::Status& st) { this->Finish(st); }
  void OnDone() override { delete this; }
};

// The event stream of one client: queues server events and writes them one at a time;
// what the client sends is read and dropped (bytes that are not a ClientEvent end the
// stream with INVALID_ARGUMENT). At most kMaxQueued events wait: a client that does not
// read them loses the stream (it gets them again when it reconnects: receipts are
// replayed, the open round is sent). Unregisters itself from the service's EventStreams
// when done. Its lock comes after the EventStreams' (event_streams.h).
class EventsReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                            public EventSink {
 public:
  static constexpr size_t kMaxQueued = 1024;

  EventsReactor(CoordinatorService* svc, std::string client)
      : svc_(svc), client_(std::move(client)) {}
  void Begin() { StartRead(&in_); }
  // Queues an event. Safe from any thread while registered with the service.
  void Push(const protos::ServerEvent& e) override;
  // Ends the stream with `status` (a newer stream of the same client replaced it).
  void Close(const absl::Status& status) override;

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  CoordinatorService* const svc_;
  const std::string client_;
  grpc::ByteBuffer in_;
  absl::Mutex mu_;
  std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// Streams a blob from an offset in chunks of kChunkBytes, without copying it: each
// message's data is a slice of the blob that keeps it alive, so downloads of one model
// share its bytes however many are open. A whole download of the global model measures
// the client's link (CoordinatorService::RecordDownload).
class DownloadReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // 64 KiB: a cut download loses at most half a second of a 1 Mbit/s link.
  static constexpr uint64_t kChunkBytes = 1 << 16;

  DownloadReactor(CoordinatorService* svc, std::string client,
                  std::shared_ptr<const ModelBlob> blob, uint64_t offset, bool measure,
                  std::shared_ptr<StreamTicket> ticket);
  void OnWriteDone(bool ok) override;
  void OnDone() override;

  // The ModelChunk message for [offset, offset + n) of `blob`, its data not copied.
  static grpc::ByteBuffer ChunkMessage(const std::shared_ptr<const ModelBlob>& blob,
                                       uint64_t offset, uint64_t n);

 private:
  void Next();

  CoordinatorService* const svc_;
  const std::string client_;
  const std::shared_ptr<const ModelBlob> blob_;
  uint64_t offset_;
  uint64_t sent_ = 0;  // bytes of the message being written
  const bool measure_;  // a whole model download: its time measures the link
  const Clock::time_point start_;
  const std::shared_ptr<StreamTicket> ticket_;
  grpc::ByteBuffer out_;
};

// Reads chunks into the round engine until the client ends its stream, then answers with
// the receipt of what the engine holds; a refused chunk, or bytes that are not a chunk,
// end the call with its status. Msg is UpdateChunk (UploadUpdate) or GossipChunk (an SGP
// share).
template <typename Msg>
class UploadReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  UploadReactor(CoordinatorService* svc, std::string client, grpc::ByteBuffer* response,
                std::shared_ptr<StreamTicket> ticket)
      : svc_(svc),
        client_(std::move(client)),
        response_(response),
        ticket_(std::move(ticket)),
        opened_(svc_->clock().Now()) {
    this->StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // end of the client's stream (or a cancelled call): answer with the receipt
      SerializeMessage(receipt_, response_);
      this->Finish(grpc::Status::OK);
      return;
    }
    ticket_->Progress();
    svc_->events().Touch(client_);
    Msg msg;
    if (absl::Status st = ParseMessage(in_, svc_->max_message_bytes(), &msg); !st.ok()) {
      svc_->metrics()->AddRejected(ReasonOf(st));
      this->Finish(ToGrpc(st));
      return;
    }
    const protos::UpdateChunk& chunk = Chunk(msg);
    if (!chunk.client_id().empty() && chunk.client_id() != client_) {
      svc_->metrics()->AddRejected(RejectReason::kIdentity);
      this->Finish(grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          StrCat("this connection is ", client_, "; it cannot upload as ", chunk.client_id())));
      return;
    }
    const ChunkIn in = ToChunkIn(msg);
    svc_->driver()->ObserveChunk(client_, in);
    const auto start = svc_->clock().Now();
    const ChunkResult r = svc_->engine()->AcceptChunk(in);
    if (!r.status.ok()) {
      svc_->metrics()->AddRejected(r.reason);
      this->Finish(ToGrpc(r.status));
      return;
    }
    Account(in, r, start);
    this->StartRead(&in_);
  }
  void OnDone() override {
    Measure();
    ticket_->Done();
    delete this;
  }

 private:
  static const protos::UpdateChunk& Chunk(const protos::UpdateChunk& m) { return m; }
  static const protos::UpdateChunk& Chunk(const protos::GossipChunk& m) { return m.chunk(); }

  // The chunk as the engine takes it; its frame views `msg`'s bytes, which the engine
  // copies what it keeps of before AcceptChunk returns.
  ChunkIn ToChunkIn(const Msg& msg) const {
    ChunkIn in = ChunkInOf(client_, Chunk(msg));
    if constexpr (std::is_same_v<Msg, protos::GossipChunk>) {
      in.share = PushSumShare{msg.weight(), msg.reference_version(), msg.inbox_applied()};
    }
    return in;
  }

  // The receipt so far, and the bytes and metrics of an accepted chunk.
  void Account(const ChunkIn& in, const ChunkResult& r, Clock::time_point start) {
    receipt_.set_round(in.round);
    receipt_.set_update_id(in.update_id);
    receipt_.clear_held_chunks();
    for (uint32_t h : r.held) receipt_.add_held_chunks(h);
    if (r.duplicate) {
      svc_->metrics()->AddRejected(RejectReason::kDuplicate);
      receipt_.set_duplicates(receipt_.duplicates() + 1);
    } else if (!in.frame.empty()) {
      const uint64_t wire = in.frame.size();
      svc_->metrics()->ObserveDecodeSeconds(core::SecondsSince(svc_->clock(), start));
      svc_->metrics()->AddUplink(client_, r.codec, wire, r.coordinates * 4);
      svc_->traffic().uplink_wire += wire;
      svc_->traffic().uplink_raw += r.coordinates * 4;
      svc_->ReportUpload(client_, wire, r.held.size() == in.chunk_count);
      svc_->NotifyChunk();
      Time(wire, r.held.size() == 1);
    }
  }

  // The codec ladder's inputs (link_book.h): how long the client was busy before an
  // upload that begins its update, and the uplink's rate between chunk arrivals (the
  // link's delay falls out), noted as it goes.
  void Time(uint64_t wire, bool begins_update) {
    const Clock::time_point now = svc_->clock().Now();
    if (chunks_++ == 0) {
      first_chunk_ = now;
      first_wire_ = wire;
      if (begins_update) {
        if (auto asked = svc_->engine()->AskedAt(client_)) {
          svc_->links().RecordBusy(client_,
                                   std::chrono::duration<double>(opened_ - *asked).count());
        }
      }
      return;
    }
    wire_after_first_ += wire;
    last_chunk_ = now;
    svc_->links().NoteUploadSoFar(client_, wire_after_first_, SecondsAfterFirst());
  }
  double SecondsAfterFirst() const {
    return std::chrono::duration<double>(last_chunk_ - first_chunk_).count();
  }
  // The call is over (whole, cut or refused): what it carried measures the uplink; a call
  // of one chunk is timed from its start.
  void Measure() {
    if (chunks_ == 1) {
      const double s = std::chrono::duration<double>(first_chunk_ - opened_).count();
      svc_->links().RecordUpload(client_, first_wire_, s);
    } else if (chunks_ > 1) {
      svc_->links().RecordUpload(client_, wire_after_first_, SecondsAfterFirst());
    }
  }

  CoordinatorService* const svc_;
  const std::string client_;
  grpc::ByteBuffer* const response_;
  const std::shared_ptr<StreamTicket> ticket_;
  grpc::ByteBuffer in_;
  protos::UploadReceipt receipt_;
  // What this call carried (Time): chunks accepted, the first one's bytes and arrival,
  // the bytes after it and the last one's arrival.
  const Clock::time_point opened_;
  uint64_t chunks_ = 0, first_wire_ = 0, wire_after_first_ = 0;
  Clock::time_point first_chunk_, last_chunk_;
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_REACTORS_H_
