// Resumable model download and chunked update upload of the edge client, and what the
// round's receipt says of an upload.
#include <grpcpp/grpcpp.h>

#include <cstring>
#include <set>
#include <type_traits>

#include "autoencoder/lgc_plan.h"
#include "codecs/crc32c.h"
#include "codecs/error_feedback.h"
#include "codecs/frame.h"
#include "codecs/str.h"
#include "core/model.h"
#include "edge_client/edge_client.h"
#include "edge_client/grpc_status.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.grpc.pb.h"

namespace fedlgc::edge_client {
namespace {

bool Retryable(grpc::StatusCode c) {
  return c == grpc::StatusCode::UNAVAILABLE || c == grpc::StatusCode::CANCELLED ||
         c == grpc::StatusCode::DEADLINE_EXCEEDED || c == grpc::StatusCode::UNKNOWN ||
         c == grpc::StatusCode::INTERNAL || c == grpc::StatusCode::ABORTED ||
         c == grpc::StatusCode::RESOURCE_EXHAUSTED;
}

// The two upload calls: UploadUpdate for updates, Gossip for push-sum shares.
template <typename Msg>
struct Wire;
template <>
struct Wire<protos::UpdateChunk> {
  static auto Open(protos::Coordinator::Stub* stub, grpc::ClientContext* ctx,
                   protos::UploadReceipt* receipt) {
    return stub->UploadUpdate(ctx, receipt);
  }
  static protos::UpdateChunk* Chunk(protos::UpdateChunk* m) { return m; }
};
template <>
struct Wire<protos::GossipChunk> {
  static auto Open(protos::Coordinator::Stub* stub, grpc::ClientContext* ctx,
                   protos::UploadReceipt* receipt) {
    return stub->Gossip(ctx, receipt);
  }
  static protos::UpdateChunk* Chunk(protos::GossipChunk* m) { return m->mutable_chunk(); }
};

}  // namespace

absl::StatusOr<std::vector<float>> EdgeClient::Download(
    uint64_t version, std::chrono::system_clock::time_point deadline) {
  auto blob = DownloadBlob("", version, deadline);
  if (!blob.ok()) return blob.status();
  if (blob->size() != model_->dim() * 4) {
    return absl::DataLossError(
        StrCat("model download: ", blob->size(), " bytes for ", model_->dim(), " parameters"));
  }
  std::vector<float> w(model_->dim());
  std::memcpy(w.data(), blob->data(), blob->size());
  return w;
}

absl::StatusOr<std::string> EdgeClient::DownloadBlob(
    const std::string& name, uint64_t version, std::chrono::system_clock::time_point deadline) {
  const char* what = name.empty() ? "model" : name.c_str();
  auto stub = protos::Coordinator::NewStub(channel_);
  std::string blob;
  uint64_t total = 0;
  uint32_t crc = 0;
  for (int attempt = 0; !stop_; ++attempt) {
    if (std::chrono::system_clock::now() > deadline) {
      return absl::DeadlineExceededError(
          StrCat("round deadline passed while downloading ", what, " ", version));
    }
    if (attempt > 0) {
      metrics_->AddResume(options_.client_id, "download");
      Backoff(attempt - 1);
      if (RefreshChannelIfDown()) stub = protos::Coordinator::NewStub(channel_);
    }
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options_.call_timeout_s);
    protos::ModelRequest req;
    req.set_client_id(options_.client_id);
    req.set_version(version);
    req.set_offset(blob.size());
    req.set_blob(name);
    auto reader = stub->DownloadModel(&ctx, req);
    protos::ModelChunk chunk;
    bool bad = false;
    while (reader->Read(&chunk)) {
      if (chunk.version() != version || chunk.offset() != blob.size() ||
          chunk.total_bytes() > (uint64_t{4} << 30) ||
          blob.size() + chunk.data().size() > chunk.total_bytes()) {
        bad = true;
        ctx.TryCancel();
        break;
      }
      total = chunk.total_bytes();
      crc = chunk.crc32c();
      blob += chunk.data();
      metrics_->AddDownlink(options_.client_id, chunk.data().size(), chunk.data().size());
    }
    const grpc::Status st = reader->Finish();
    if (bad) return absl::DataLossError(StrCat(what, " download: inconsistent chunks"));
    if (st.ok() && blob.size() == total) {
      if (codecs::Crc32c(blob.data(), blob.size()) != crc) {
        blob.clear();  // corrupted: start over
        continue;
      }
      return blob;
    }
    if (!st.ok() && !Retryable(st.error_code())) {
      return FromGrpc(st, StrCat(what, " download"));
    }
  }
  return absl::CancelledError("stopped");
}

absl::Status EdgeClient::Upload(std::chrono::system_clock::time_point deadline) {
  return state_.pending->gossip ? UploadAs<protos::GossipChunk>(deadline)
                                : UploadAs<protos::UpdateChunk>(deadline);
}

template <typename Msg>
absl::Status EdgeClient::UploadAs(std::chrono::system_clock::time_point deadline) {
  const PendingUpdate& p = *state_.pending;
  const auto fresh = [&] {
    Msg m;
    if constexpr (std::is_same_v<Msg, protos::GossipChunk>) {
      m.set_weight(state_.local.share_pw);
      m.set_reference_version(p.model_version);
      m.set_inbox_applied(state_.local.inbox_applied);
    }
    return m;
  };
  auto stub = protos::Coordinator::NewStub(channel_);
  std::set<uint32_t> held;
  std::vector<int> sends(p.frames.size(), 0);
  const std::string codec_label = state_.codec;
  // fp32-equivalent bytes of each frame: 4 per coordinate of its range.
  std::vector<uint64_t> raw(p.frames.size(), 0);
  codecs::FrameLimits limits;
  limits.max_frame_bytes = ~uint64_t{0};
  for (size_t i = 0; i < p.frames.size(); ++i) {
    if (auto view = codecs::ParseFrame(p.frames[i], limits); view.ok()) raw[i] = view->length * 4;
  }
  for (int attempt = 0; !stop_; ++attempt) {
    if (std::chrono::system_clock::now() > deadline) {
      return absl::DeadlineExceededError(
          StrCat("round ", p.round, " deadline passed during upload"));
    }
    if (attempt > 0) {
      metrics_->AddResume(options_.client_id, "upload");
      Backoff(attempt - 1);
      if (RefreshChannelIfDown()) stub = protos::Coordinator::NewStub(channel_);
      // Ask what arrived before the break, so only the missing chunks are resent.
      grpc::ClientContext qctx;
      PrepareContext(&qctx, 10);
      protos::UploadReceipt qreceipt;
      auto q = Wire<Msg>::Open(stub.get(), &qctx, &qreceipt);
      Msg query = fresh();
      Wire<Msg>::Chunk(&query)->set_client_id(options_.client_id);
      Wire<Msg>::Chunk(&query)->set_round(p.round);
      Wire<Msg>::Chunk(&query)->set_update_id(p.update_id);
      q->Write(query);
      q->WritesDone();
      const grpc::Status qs = q->Finish();
      if (!qs.ok()) {
        if (!Retryable(qs.error_code())) return FromGrpc(qs, "upload query");
        continue;
      }
      // The server's word replaces ours: after a coordinator restart it may hold less.
      held.clear();
      held.insert(qreceipt.held_chunks().begin(), qreceipt.held_chunks().end());
    }
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options_.call_timeout_s);
    protos::UploadReceipt receipt;
    auto writer = Wire<Msg>::Open(stub.get(), &ctx, &receipt);
    Msg msg = fresh();
    protos::UpdateChunk& chunk = *Wire<Msg>::Chunk(&msg);
    chunk.set_client_id(options_.client_id);
    chunk.set_round(p.round);
    chunk.set_update_id(p.update_id);
    chunk.set_chunk_count(static_cast<uint32_t>(p.frames.size()));
    chunk.set_num_samples(p.num_samples);
    // Chunks go in index order: frames are ranges in coordinate order, so the front of
    // the model (input layers, which the next forward pass needs first) leads.
    for (uint32_t i = 0; i < p.frames.size() && !stop_; ++i) {
      if (held.count(i)) continue;
      chunk.set_chunk_index(i);
      chunk.set_frame(p.frames[i]);
      chunk.set_scale(i < p.scales.size() ? p.scales[i] : 0.0f);
      if (!writer->Write(msg)) break;
      metrics_->AddChunks(options_.client_id, sends[i]++ == 0 ? "sent" : "retransmitted", 1);
      metrics_->AddUplink(options_.client_id, codec_label, p.frames[i].size(), raw[i]);
    }
    writer->WritesDone();
    const grpc::Status st = writer->Finish();
    if (st.ok()) {
      held.clear();
      held.insert(receipt.held_chunks().begin(), receipt.held_chunks().end());
      if (held.size() == p.frames.size()) return absl::OkStatus();
      continue;
    }
    if (!Retryable(st.error_code())) return FromGrpc(st, "upload");
  }
  return absl::CancelledError("stopped");
}

// What a round's receipt says of the update in flight: chunks that did not count go back
// into the residual.
absl::Status EdgeClient::HandleReceipt(const protos::RoundReceipt& receipt) {
  if (!state_.pending || state_.pending->round != receipt.round()) return absl::OkStatus();
  if (state_.pending->gossip) return HandleShareReceipt(receipt);
  if (state_.pending->lead) {  // nothing to restore (see PendingUpdate::lead)
    state_.pending.reset();
    return Persist();
  }
  PendingUpdate& p = *state_.pending;
  std::vector<bool> counted(p.frames.size(), false);
  if (receipt.update_id() == p.update_id) {
    for (uint32_t c : receipt.counted_chunks()) {
      if (c < counted.size()) counted[c] = true;
    }
  }
  uint64_t lost = 0;
  if (p.lgc_stage > 0) {
    // One chunk: it counted or the whole update goes back (a predict=1 follower that never
    // got its leader's support has no chunk: its update is all in the residual already).
    if (counted.empty() || !counted[0]) {
      if (absl::Status st = RestorePending(p); !st.ok()) return st;
      lost = counted.size();
    } else if (p.lgc_stage == 3) {
      // Kept whatever the plan says (after a restart the receipt comes before the round
      // that names the plan); MeasureLgcEcho drops it when the job has no echo.
      auto view = codecs::ParseFrame(p.frames[0], codecs::FrameLimits());
      const bool leader = view.ok() && view->spec == autoencoder::kLeaderSpec;
      state_.lgc_echo = {p.round, p.lgc_values, leader};
    }
  } else {
    if (absl::Status st = EnsureCodec(state_.codec); !st.ok()) return st;
    for (size_t i = 0; i < p.frames.size(); ++i) {
      if (counted[i]) continue;
      if (absl::Status st = codec_->RestoreAny(p.frames[i]); !st.ok()) return st;
      ++lost;
    }
    state_.residual.assign(codec_->residual().begin(), codec_->residual().end());
  }
  if (lost) metrics_->AddChunks(options_.client_id, "lost", lost);
  state_.pending.reset();
  return Persist();
}

absl::Status EdgeClient::RestorePending(const PendingUpdate& p) {
  if (p.lead) return absl::OkStatus();  // see PendingUpdate::lead
  if (p.lgc_stage > 0) {
    if (state_.residual.size() != model_->dim()) state_.residual.assign(model_->dim(), 0.0f);
    for (size_t j = 0; j < p.lgc_support.size(); ++j) {
      state_.residual[p.lgc_support[j]] += p.lgc_values[j];
    }
    // A codec used again later starts from this residual.
    if (codec_) codec_->SetResidual(state_.residual);
    return absl::OkStatus();
  }
  if (absl::Status st = EnsureCodec(state_.codec); !st.ok()) return st;
  for (const std::string& f : p.frames) {
    if (absl::Status st = codec_->RestoreAny(f); !st.ok()) return st;
  }
  state_.residual.assign(codec_->residual().begin(), codec_->residual().end());
  return absl::OkStatus();
}

}  // namespace fedlgc::edge_client
