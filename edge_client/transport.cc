// The edge client's link to its coordinator (see transport.h).
#include "edge_client/transport.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <thread>
#include <type_traits>

#include "base/crc32c.h"
#include "base/file.h"
#include "base/log.h"
#include "base/str.h"
#include "codecs/frame.h"
#include "edge_client/grpc_status.h"
#include "monitoring/metrics.h"

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
  static auto Open(protos::Coordinator::StubInterface* stub, grpc::ClientContext* ctx,
                   protos::UploadReceipt* receipt) {
    return stub->UploadUpdate(ctx, receipt);
  }
  static protos::UpdateChunk* Chunk(protos::UpdateChunk* m) { return m; }
  static void SetShare(protos::UpdateChunk*, const ShareFields&) {}
};
template <>
struct Wire<protos::GossipChunk> {
  static auto Open(protos::Coordinator::StubInterface* stub, grpc::ClientContext* ctx,
                   protos::UploadReceipt* receipt) {
    return stub->Gossip(ctx, receipt);
  }
  static protos::UpdateChunk* Chunk(protos::GossipChunk* m) { return m->mutable_chunk(); }
  static void SetShare(protos::GossipChunk* m, const ShareFields& s) {
    m->set_weight(s.weight);
    m->set_reference_version(s.reference_version);
    m->set_inbox_applied(s.inbox_applied);
  }
};

// fp32-equivalent bytes of each frame: 4 per coordinate of its range.
std::vector<uint64_t> RawBytes(const std::vector<std::string>& frames) {
  std::vector<uint64_t> raw(frames.size(), 0);
  codecs::FrameLimits limits;
  limits.max_frame_bytes = ~uint64_t{0};
  for (size_t i = 0; i < frames.size(); ++i) {
    if (auto view = codecs::ParseFrame(frames[i], limits); view.ok()) raw[i] = view->length * 4;
  }
  return raw;
}

}  // namespace

namespace {

std::vector<std::string> SplitServers(const std::string& list) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    if (comma > at) out.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  if (out.empty()) out.push_back(list);
  return out;
}

}  // namespace

Transport::Transport(TransportOptions options, monitoring::Metrics* metrics, StubFactory stubs)
    : options_(std::move(options)),
      servers_(SplitServers(options_.server)),
      metrics_(metrics),
      stubs_(stubs ? std::move(stubs)
                   : StubFactory([](const std::shared_ptr<grpc::Channel>& channel) {
                       return std::shared_ptr<protos::Coordinator::StubInterface>(
                           protos::Coordinator::NewStub(channel));
                     })),
      rng_(std::random_device{}()) {}

absl::Status Transport::Connect() {
  const TransportOptions& o = options_;
  std::shared_ptr<grpc::ChannelCredentials> creds;
  grpc::ChannelArguments args;
  if (o.insecure) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    auto ca = fedlgc::ReadFile(o.tls_ca), cert = fedlgc::ReadFile(o.tls_cert),
         key = fedlgc::ReadFile(o.tls_key);
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
  // A connection of its own: gRPC would otherwise share one among the channels of a process
  // whose arguments match (hosted clients without TLS), and the coordinator's
  // --max-streams-per-connection (64) would then stop a host's 65th event stream.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  channel_ = grpc::CreateCustomChannel(servers_[current_], creds, args);
  return absl::OkStatus();
}

absl::Status Transport::FailOver() {
  if (servers_.size() > 1) {
    const std::string& from = servers_[current_];
    current_ = (current_ + 1) % servers_.size();
    log::Warning(options_.client_id, "%s unreachable; failing over to %s", from,
                 servers_[current_]);
    if (metrics_ != nullptr) metrics_->AddResume(options_.client_id, "failover");
  }
  return Connect();
}

bool Transport::RefreshChannelIfDown() {
  if (channel_ && channel_->GetState(false) != GRPC_CHANNEL_TRANSIENT_FAILURE) return false;
  return FailOver().ok();
}

std::shared_ptr<protos::Coordinator::StubInterface> Transport::NewStub() {
  return stubs_(channel_);
}

void Transport::Stop() {
  stop_ = true;
  {
    absl::MutexLock lock(&sleep_mu_);
    sleep_stop_ = true;
    sleep_cv_.SignalAll();
  }
  absl::MutexLock lock(&events_mu_);
  if (events_ctx_ != nullptr) events_ctx_->TryCancel();
  if (join_ctx_ != nullptr) join_ctx_->TryCancel();
}

void Transport::PrepareContext(grpc::ClientContext* ctx, double timeout_s) const {
  ctx->AddMetadata("fedlgc-client-id", options_.client_id);
  if (timeout_s > 0) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  }
}

void Transport::Backoff(int attempt) {
  // Exponential with full jitter.
  const double cap =
      std::min(options_.backoff_max_s, options_.backoff_initial_s * (1 << std::min(attempt, 10)));
  std::uniform_real_distribution<double> u(0.5 * cap, cap);
  Sleep(u(rng_));
}

void Transport::Sleep(double seconds) {
  // Woken by Stop(), not by polling: fedlgc-load runs thousands of transports in one
  // process, and a poll every few milliseconds each costs more than their work.
  core::Clock& clock = *options_.clock;
  const auto until = clock.Now() + std::chrono::duration_cast<core::Clock::duration>(
                                       std::chrono::duration<double>(seconds));
  absl::MutexLock lock(&sleep_mu_);
  while (!sleep_stop_ && clock.Now() < until) clock.WaitUntil(&sleep_cv_, &sleep_mu_, until);
}

uint64_t Transport::NewUpdateId() { return rng_() | 1; }

void Transport::NoteRoundTrip(core::Clock::time_point t0) {
  const double ms = 1000 * core::SecondsSince(*options_.clock, t0);
  if (min_rtt_ms_ == 0 || ms < min_rtt_ms_) min_rtt_ms_ = ms;
}

absl::StatusOr<protos::JoinReply> Transport::Join(const protos::JoinRequest& request) {
  auto stub = NewStub();
  protos::JoinReply reply;
  grpc::ClientContext ctx;
  // The first call on a channel also connects it (TCP and TLS): a coordinator that
  // thousands of clients join at once needs a while for every handshake, and a client that
  // gave up early only adds another.
  PrepareContext(&ctx, options_.call_timeout_s);
  {
    absl::MutexLock lock(&events_mu_);
    if (stop_) return absl::CancelledError("stopped");
    join_ctx_ = &ctx;  // Stop() cancels a join that waits on a slow coordinator
  }
  const auto t0 = options_.clock->Now();
  const grpc::Status st = stub->Join(&ctx, request, &reply);
  {
    absl::MutexLock lock(&events_mu_);
    join_ctx_ = nullptr;
  }
  if (!st.ok()) return FromGrpc(st, "join");
  NoteRoundTrip(t0);
  return reply;
}

absl::Status Transport::RunEvents(
    const std::function<absl::StatusOr<EventVerdict>(const protos::ServerEvent&)>& handle) {
  auto stub = NewStub();
  grpc::ClientContext ctx;
  PrepareContext(&ctx, 0);
  {
    absl::MutexLock lock(&events_mu_);
    if (stop_) return absl::OkStatus();
    events_ctx_ = &ctx;
  }
  auto stream = stub->Events(&ctx);
  protos::ServerEvent event;
  absl::Status result;
  bool ended_here = false;
  while (!stop_ && stream->Read(&event)) {
    auto verdict = handle(event);
    if (!verdict.ok()) result = verdict.status();
    if (!verdict.ok() || *verdict == EventVerdict::kStop) {
      ended_here = true;
      break;
    }
  }
  stream->WritesDone();
  if (ended_here || stop_) ctx.TryCancel();
  const grpc::Status st = stream->Finish();
  {
    absl::MutexLock lock(&events_mu_);
    events_ctx_ = nullptr;
  }
  if (!result.ok()) return result;
  if (ended_here || stop_) return absl::OkStatus();
  return FromGrpc(st, "event stream");
}

absl::StatusOr<std::string> Transport::DownloadBlob(const std::string& name, uint64_t version,
                                                    SystemTime deadline) {
  auto got = Fetch(name, version, deadline, std::nullopt);
  if (!got.ok()) return got.status();
  if (got->chain) {
    return absl::DataLossError(StrCat(name.empty() ? "model" : name, " ", version,
                                      " came as a chain of deltas, which was not asked for"));
  }
  return std::move(got->bytes);
}

absl::StatusOr<Transport::ModelDownload> Transport::DownloadModel(const std::string& name,
                                                                  uint64_t version,
                                                                  SystemTime deadline,
                                                                  std::optional<uint64_t> held) {
  return Fetch(name, version, deadline, held);
}

absl::StatusOr<Transport::ModelDownload> Transport::Fetch(const std::string& name, uint64_t version,
                                                          SystemTime deadline,
                                                          std::optional<uint64_t> held) {
  const std::string what = name.empty() ? "model" : name;
  auto stub = NewStub();
  std::string blob;
  uint64_t total = 0;
  uint32_t crc = 0;
  ModelDownload out;  // chain and from: those of the first chunk (once `known`)
  bool known = false;
  for (int attempt = 0; !stop_; ++attempt) {
    if (options_.clock->WallNow() > deadline) {
      return absl::DeadlineExceededError(
          StrCat("round deadline passed while downloading ", what, " ", version));
    }
    if (attempt > 0) {
      metrics_->AddResume(options_.client_id, "download");
      Backoff(attempt - 1);
      if (RefreshChannelIfDown()) stub = NewStub();
    }
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options_.call_timeout_s);
    protos::ModelRequest req;
    req.set_client_id(options_.client_id);
    req.set_version(version);
    req.set_offset(blob.size());
    req.set_blob(name);
    if (held.has_value()) req.set_held_version(*held);
    auto reader = stub->DownloadModel(&ctx, req);
    protos::ModelChunk chunk;
    bool bad = false, changed = false;
    while (reader->Read(&chunk)) {
      // A resumed download whose blob is another (the coordinator restarted and rebuilt
      // it): start over from offset 0.
      if (known && (chunk.total_bytes() != total || chunk.crc32c() != crc)) {
        changed = true;
        ctx.TryCancel();
        break;
      }
      if (chunk.version() != version || chunk.offset() != blob.size() ||
          chunk.total_bytes() > (uint64_t{4} << 30) ||
          blob.size() + chunk.data().size() > chunk.total_bytes() ||
          (known && (out.chain != chunk.chain() || out.from != chunk.from_version()))) {
        bad = true;
        ctx.TryCancel();
        break;
      }
      known = true;
      out.chain = chunk.chain();
      out.from = chunk.from_version();
      total = chunk.total_bytes();
      crc = chunk.crc32c();
      blob += chunk.data();
      // A chain's float32 equivalent (the model it rebuilds) is counted once it is applied.
      metrics_->AddDownlink(options_.client_id, chunk.data().size(),
                            out.chain ? 0 : chunk.data().size());
    }
    const grpc::Status st = reader->Finish();
    if (bad) return absl::DataLossError(StrCat(what, " download: inconsistent chunks"));
    if (changed || (st.error_code() == grpc::StatusCode::OUT_OF_RANGE && !blob.empty())) {
      blob.clear();  // the offset is past a blob that got shorter, or another blob
      known = false;
      continue;
    }
    if (st.ok() && blob.size() == total) {
      if (Crc32c(blob.data(), blob.size()) != crc) {
        blob.clear();  // corrupted: start over
        known = false;
        continue;
      }
      out.bytes = std::move(blob);
      return out;
    }
    if (!st.ok() && !Retryable(st.error_code())) return FromGrpc(st, StrCat(what, " download"));
  }
  return absl::CancelledError("stopped");
}

absl::Status Transport::Upload(const PendingUpdate& p, const std::string& codec_label,
                               SystemTime deadline, const std::optional<ShareFields>& share) {
  return share ? UploadAs<protos::GossipChunk>(p, codec_label, deadline, *share)
               : UploadAs<protos::UpdateChunk>(p, codec_label, deadline, ShareFields());
}

template <typename Msg>
Msg Transport::ChunkHead(const PendingUpdate& p, const ShareFields& share) const {
  Msg m;
  Wire<Msg>::SetShare(&m, share);
  protos::UpdateChunk& chunk = *Wire<Msg>::Chunk(&m);
  chunk.set_client_id(options_.client_id);
  chunk.set_round(p.round);
  chunk.set_update_id(p.update_id);
  return m;
}

template <typename Msg>
absl::StatusOr<std::set<uint32_t>> Transport::QueryHeld(protos::Coordinator::StubInterface* stub,
                                                        const PendingUpdate& p,
                                                        const ShareFields& share) {
  grpc::ClientContext ctx;
  PrepareContext(&ctx, 10);
  protos::UploadReceipt receipt;
  auto q = Wire<Msg>::Open(stub, &ctx, &receipt);
  q->Write(ChunkHead<Msg>(p, share));  // no frame: a query
  q->WritesDone();
  const grpc::Status st = q->Finish();
  if (!st.ok()) return FromGrpc(st, "upload query");
  return std::set<uint32_t>(receipt.held_chunks().begin(), receipt.held_chunks().end());
}

template <typename Msg>
absl::Status Transport::UploadAs(const PendingUpdate& p, const std::string& codec_label,
                                 SystemTime deadline, const ShareFields& share) {
  auto stub = NewStub();
  std::set<uint32_t> held;
  std::vector<int> sends(p.frames.size(), 0);
  const std::vector<uint64_t> raw = RawBytes(p.frames);
  for (int attempt = 0; !stop_; ++attempt) {
    if (options_.clock->WallNow() > deadline) {
      return absl::DeadlineExceededError(
          StrCat("round ", p.round, " deadline passed during upload"));
    }
    if (attempt > 0) {
      metrics_->AddResume(options_.client_id, "upload");
      Backoff(attempt - 1);
      if (RefreshChannelIfDown()) stub = NewStub();
      // Ask what arrived before the break, so only the missing chunks are resent. The
      // server's word replaces ours: after a coordinator restart it may hold less.
      auto now_held = QueryHeld<Msg>(stub.get(), p, share);
      if (!now_held.ok()) {
        if (Retryable(static_cast<grpc::StatusCode>(now_held.status().code()))) continue;
        return now_held.status();
      }
      held = *std::move(now_held);
    }
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options_.call_timeout_s);
    protos::UploadReceipt receipt;
    auto writer = Wire<Msg>::Open(stub.get(), &ctx, &receipt);
    Msg msg = ChunkHead<Msg>(p, share);
    protos::UpdateChunk& chunk = *Wire<Msg>::Chunk(&msg);
    chunk.set_chunk_count(static_cast<uint32_t>(p.frames.size()));
    chunk.set_num_samples(p.num_samples);
    // Chunks go in index order, which the mode made its upload order (codecs/priority.h:
    // coordinate order by default, or what matters most first).
    for (uint32_t i = 0; i < p.frames.size() && !stop_; ++i) {
      if (held.count(i)) continue;
      chunk.set_chunk_index(i);
      chunk.set_frame(p.frames[i]);
      chunk.set_scale(i < p.scales.size() ? p.scales[i] : 0.0f);
      chunk.set_part(i < p.parts.size() ? p.parts[i] : 0);
      if (!writer->Write(msg)) break;
      metrics_->AddChunks(options_.client_id, sends[i]++ == 0 ? "sent" : "retransmitted", 1);
      metrics_->AddUplink(options_.client_id, codec_label, p.frames[i].size(), raw[i]);
    }
    writer->WritesDone();
    const grpc::Status st = writer->Finish();
    if (st.ok()) {
      held = std::set<uint32_t>(receipt.held_chunks().begin(), receipt.held_chunks().end());
      if (held.size() == p.frames.size()) return absl::OkStatus();
      continue;
    }
    if (!Retryable(st.error_code())) return FromGrpc(st, "upload");
  }
  return absl::CancelledError("stopped");
}

absl::Status Transport::Report(protos::ProgressReport report, SystemTime deadline) {
  auto stub = NewStub();
  report.set_client_id(options_.client_id);
  for (int attempt = 0; !stop_; ++attempt) {
    if (options_.clock->WallNow() > deadline) return absl::OkStatus();
    if (attempt > 0) {
      Backoff(attempt - 1);
      if (RefreshChannelIfDown()) stub = NewStub();
    }
    report.set_rtt_ms(min_rtt_ms_);
    protos::ReportAck ack;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, 10);
    const auto t0 = options_.clock->Now();
    const grpc::Status st = stub->Report(&ctx, report, &ack);
    if (st.ok()) {
      NoteRoundTrip(t0);
      return absl::OkStatus();
    }
    const absl::Status as = FromGrpc(st, "report");
    if (absl::IsFailedPrecondition(as)) return absl::OkStatus();  // the round moved on
    if (absl::IsInvalidArgument(as) || absl::IsPermissionDenied(as)) return as;
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::edge_client
