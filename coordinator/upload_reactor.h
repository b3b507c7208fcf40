// Reactors the coordinator service shares between its files: an upload of chunks
// (UploadUpdate, or Gossip for push-sum shares) and a call that fails at once. Internal
// to coordinator/.
#ifndef FEDLGC_COORDINATOR_UPLOAD_REACTOR_H_
#define FEDLGC_COORDINATOR_UPLOAD_REACTOR_H_

#include <chrono>
#include <string>
#include <type_traits>

#include "codecs/str.h"
#include "coordinator/service.h"

namespace fedlgc::coordinator {

// Finishes a call at once with an error.
template <typename Base>
class ErrorReactor final : public Base {
 public:
  explicit ErrorReactor(const grpc::Status& st) { this->Finish(st); }
  void OnDone() override { delete this; }
};

// Reads chunks into the round engine until the client ends its stream, then answers with
// the receipt of what the engine holds; a refused chunk ends the call with its status.
template <typename Msg>
class UploadReactor final : public grpc::ServerReadReactor<Msg> {
 public:
  UploadReactor(CoordinatorService* svc, std::string client, protos::UploadReceipt* receipt)
      : svc_(svc), client_(std::move(client)), receipt_(receipt) {
    this->StartRead(&msg_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // end of the client's stream: answer with the receipt
      this->Finish(grpc::Status::OK);
      return;
    }
    svc_->Touch(client_);
    const protos::UpdateChunk& chunk = Chunk(msg_);
    if (!chunk.client_id().empty() && chunk.client_id() != client_) {
      svc_->metrics()->AddRejected("identity");
      this->Finish(grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          StrCat("this connection is ", client_, "; it cannot upload as ", chunk.client_id())));
      return;
    }
    ChunkIn in;
    in.client_id = client_;
    in.round = chunk.round();
    in.update_id = chunk.update_id();
    in.chunk_index = chunk.chunk_index();
    in.chunk_count = chunk.chunk_count();
    in.num_samples = chunk.num_samples();
    in.frame = chunk.frame();
    in.scale = chunk.scale() == 0 ? 1.0f : chunk.scale();
    if constexpr (std::is_same_v<Msg, protos::GossipChunk>) {
      in.gossip = true;
      in.weight_share = msg_.weight();
      in.reference_version = msg_.reference_version();
      svc_->NotifyInboxApplied(client_, msg_.inbox_applied());
    }
    const auto start = std::chrono::steady_clock::now();
    ChunkResult r = svc_->engine()->AcceptChunk(in);
    if (!r.status.ok()) {
      svc_->metrics()->AddRejected(r.reason);
      this->Finish(ToGrpc(r.status));
      return;
    }
    receipt_->set_round(in.round);
    receipt_->set_update_id(in.update_id);
    receipt_->clear_held_chunks();
    for (uint32_t h : r.held) receipt_->add_held_chunks(h);
    if (r.duplicate) {
      svc_->metrics()->AddRejected("duplicate");
      receipt_->set_duplicates(receipt_->duplicates() + 1);
    } else if (!in.frame.empty()) {
      const uint64_t wire = in.frame.size();
      svc_->metrics()->ObserveDecodeSeconds(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      svc_->metrics()->AddUplink(client_, r.codec, wire, r.coordinates * 4);
      svc_->traffic().uplink_wire += wire;
      svc_->traffic().uplink_raw += r.coordinates * 4;
      svc_->NotifyChunk();
    }
    this->StartRead(&msg_);
  }
  void OnDone() override { delete this; }

 private:
  CoordinatorService* const svc_;
  const std::string client_;
  protos::UploadReceipt* const receipt_;
  static const protos::UpdateChunk& Chunk(const protos::UpdateChunk& m) { return m; }
  static const protos::UpdateChunk& Chunk(const protos::GossipChunk& m) { return m.chunk(); }

  Msg msg_;
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_UPLOAD_REACTOR_H_
