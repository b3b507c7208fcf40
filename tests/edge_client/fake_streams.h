// Client-side gRPC streams for tests of the edge client against gMock's
// MockCoordinatorStub: each records what the client wrote and plays back what a test
// scripted, including a stream that breaks after some messages or ends with an error.
#ifndef FEDLGC_TESTS_EDGE_CLIENT_FAKE_STREAMS_H_
#define FEDLGC_TESTS_EDGE_CLIENT_FAKE_STREAMS_H_

#include <grpcpp/support/sync_stream.h>

#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "protos/fedlgc.pb.h"

namespace fedlgc::testing {

// An upload stream (UploadUpdate or Gossip). Writes go into *sent; after `accept` writes
// Write fails (a link that broke). Finish returns `status`, and first lets `receipt` fill
// in the call's UploadReceipt from what this stream carried.
template <typename Msg>
class FakeUploadStream final : public grpc::ClientWriterInterface<Msg> {
 public:
  using Receipt = std::function<void(const std::vector<Msg>& carried, protos::UploadReceipt*)>;
  FakeUploadStream(std::vector<Msg>* sent, protos::UploadReceipt* out, grpc::Status status,
                   Receipt receipt, size_t accept = ~size_t{0})
      : sent_(sent),
        out_(out),
        status_(std::move(status)),
        receipt_(std::move(receipt)),
        accept_(accept) {}

  bool Write(const Msg& msg, grpc::WriteOptions) override {
    if (carried_.size() >= accept_) return false;
    carried_.push_back(msg);
    sent_->push_back(msg);
    return true;
  }
  bool WritesDone() override { return true; }
  grpc::Status Finish() override {
    if (receipt_) receipt_(carried_, out_);
    return status_;
  }

 private:
  std::vector<Msg>* const sent_;
  protos::UploadReceipt* const out_;
  const grpc::Status status_;
  const Receipt receipt_;
  const size_t accept_;
  std::vector<Msg> carried_;
};

// A download stream: the chunks in order, then Finish with `status`.
class FakeDownloadStream final : public grpc::ClientReaderInterface<protos::ModelChunk> {
 public:
  FakeDownloadStream(std::vector<protos::ModelChunk> chunks, grpc::Status status)
      : chunks_(chunks.begin(), chunks.end()), status_(std::move(status)) {}
  bool Read(protos::ModelChunk* msg) override {
    if (chunks_.empty()) return false;
    *msg = std::move(chunks_.front());
    chunks_.pop_front();
    return true;
  }
  bool NextMessageSize(uint32_t* size) override {
    *size = chunks_.empty() ? 0 : static_cast<uint32_t>(chunks_.front().ByteSizeLong());
    return !chunks_.empty();
  }
  void WaitForInitialMetadata() override {}
  grpc::Status Finish() override { return status_; }

 private:
  std::deque<protos::ModelChunk> chunks_;
  const grpc::Status status_;
};

// The event stream: each Read asks `next` for the next event (nullopt: the stream ends,
// as when the coordinator goes away).
class FakeEventStream final
    : public grpc::ClientReaderWriterInterface<protos::ClientEvent, protos::ServerEvent> {
 public:
  explicit FakeEventStream(std::function<std::optional<protos::ServerEvent>()> next)
      : next_(std::move(next)) {}
  bool Read(protos::ServerEvent* msg) override {
    auto e = next_();
    if (!e) return false;
    *msg = std::move(*e);
    return true;
  }
  bool NextMessageSize(uint32_t* size) override {
    *size = 0;
    return true;
  }
  void WaitForInitialMetadata() override {}
  bool Write(const protos::ClientEvent&, grpc::WriteOptions) override { return true; }
  bool WritesDone() override { return true; }
  grpc::Status Finish() override { return grpc::Status::OK; }

 private:
  const std::function<std::optional<protos::ServerEvent>()> next_;
};

}  // namespace fedlgc::testing

#endif  // FEDLGC_TESTS_EDGE_CLIENT_FAKE_STREAMS_H_
