// The calls of the decentralised modes (see service.h): LSGD progress reports and SGP
// push-sum shares. The drivers behind them live in lsgd_driver.cc and sgp_driver.cc.
#include "codecs/str.h"
#include "coordinator/service.h"
#include "coordinator/upload_reactor.h"

namespace fedlgc::coordinator {

grpc::ServerUnaryReactor* CoordinatorService::Report(grpc::CallbackServerContext* ctx,
                                                     const protos::ProgressReport* req,
                                                     protos::ReportAck* ack) {
  auto* reactor = ctx->DefaultReactor();
  auto id = Identity(ctx, req->client_id());
  if (!id.ok()) {
    reactor->Finish(ToGrpc(id.status()));
    return reactor;
  }
  Touch(*id);
  absl::Status st = on_report_ ? on_report_(*id, *req)
                               : absl::FailedPreconditionError(StrCat(
                                     "this job (mode ", job_.mode, ") takes no progress reports"));
  if (!st.ok()) {
    metrics_->AddRejected(absl::IsInvalidArgument(st) ? "malformed" : "wrong_round");
    reactor->Finish(ToGrpc(st));
    return reactor;
  }
  ack->set_round(req->round());
  NotifyChunk();  // wakes the round loop, which waits for reports
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerReadReactor<protos::GossipChunk>* CoordinatorService::Gossip(
    grpc::CallbackServerContext* ctx, protos::UploadReceipt* receipt) {
  auto id = StreamIdentity(ctx);
  if (!id.ok())
    return new ErrorReactor<grpc::ServerReadReactor<protos::GossipChunk>>(ToGrpc(id.status()));
  return new UploadReactor<protos::GossipChunk>(this, *id, receipt);
}

}  // namespace fedlgc::coordinator
