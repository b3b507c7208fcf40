// One emulated client of fedlgc-load (see load_client.h).
#include "sim/load_client.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "base/str.h"
#include "codecs/frame.h"
#include "codecs/registry.h"
#include "codecs/rng.h"
#include "core/float_bytes.h"
#include "core/model.h"
#include "core/protocol.h"
#include "edge_client/client_mode.h"
#include "modes/catalog.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::sim {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// What a retry cannot fix: identity, configuration, a job these clients cannot run.
bool Permanent(const absl::Status& st) {
  // DATA_LOSS: a receipt that names chunks this client never sent.
  return absl::IsPermissionDenied(st) || absl::IsUnauthenticated(st) ||
         absl::IsInvalidArgument(st) || absl::IsFailedPrecondition(st) || absl::IsDataLoss(st);
}

}  // namespace

std::vector<float> SyntheticUpdate(uint64_t seed, uint32_t index, uint64_t round, uint64_t dim,
                                   float scale) {
  const uint32_t key = codecs::BlockKey(seed, (uint64_t{index} << 32) ^ round);
  std::vector<float> v(dim);
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = scale * (2.0f * codecs::HashUniform(key, static_cast<uint32_t>(i)) - 1.0f);
  }
  return v;
}

LoadClient::LoadClient(uint32_t index, LoadClientOptions options, LoadBook* book,
                       monitoring::Metrics* metrics)
    : index_(index),
      options_(std::move(options)),
      book_(book),
      transport_(options_.transport, metrics),
      think_rng_(options_.seed * 7919 + index) {}

absl::Status LoadClient::Run() {
  if (absl::Status st = transport_.Connect(); !st.ok()) return st;
  for (int attempt = 0; !transport_.stopped();) {
    absl::Status st = JoinJob();
    if (absl::IsUnavailable(st)) {
      if (absl::Status c = transport_.Connect(); !c.ok()) return c;
    }
    if (st.ok()) {
      st = transport_.RunEvents([this](const protos::ServerEvent& e) { return Handle(e); });
      if (done_) return absl::OkStatus();
      if (st.ok()) attempt = 0;  // a clean end of stream: reconnect promptly
    }
    if (!st.ok() && Permanent(st)) return st;
    if (!st.ok() && !transport_.stopped()) book_->Broke(st);
    transport_.Backoff(attempt++);
  }
  return absl::CancelledError("stopped");
}

absl::Status LoadClient::JoinJob() {
  protos::JoinRequest req;
  req.set_client_id(options_.transport.client_id);
  req.set_num_samples(options_.samples);
  req.set_device("load");
  req.set_protocol_version(kProtocolVersion);
  auto reply = transport_.Join(req);
  if (!reply.ok()) return reply.status();
  if (reply->protocol_version() != kProtocolVersion) {
    return absl::FailedPreconditionError(StrCat("the coordinator speaks protocol version ",
                                                reply->protocol_version(), "; fedlgc-load ",
                                                kProtocolVersion));
  }
  // An emulated client uploads plain updates of the job codec and nothing else.
  const std::optional<Mode> mode = ParseMode(reply->mode());
  if (!mode || !modes::TraitsOf(*mode).plain_clients) {
    return absl::FailedPreconditionError(
        StrCat("the job runs mode '", reply->mode(),
               "', whose clients take part in its own protocol; fedlgc-load emulates clients "
               "that send plain updates (FedAvg jobs)"));
  }
  dim_ = reply->dim();
  model_ = core::ModelOptions();
  model_.model = reply->model();
  model_.buffers = reply->buffers().empty() ? "average" : reply->buffers();
  model_.freeze = reply->freeze();
  model_.local_params = reply->local_params();
  return absl::OkStatus();
}

namespace {

// The layout of a zoo model, built once per process for all emulated clients (per-tensor
// codecs such as powersgd need it); null when the model is not in this build's zoo.
const codecs::ModelLayout* SharedLayout(const core::ModelOptions& model) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* layouts = new std::map<std::string, std::unique_ptr<codecs::ModelLayout>>();
  absl::MutexLock lock(&mu);
  // The job's rules leave frozen and personal parameters out of the layout.
  const std::string key = StrCat(model.model, "\n", model.buffers, "\n", model.freeze, "\n",
                                 model.local_params);
  auto it = layouts->find(key);
  if (it == layouts->end()) {
    auto made = core::ModelLayoutOf(model);
    it = layouts
             ->emplace(key, made.ok() ? std::make_unique<codecs::ModelLayout>(*std::move(made))
                                        : nullptr)
             .first;
  }
  return it->second.get();
}

}  // namespace

absl::StatusOr<edge_client::EventVerdict> LoadClient::Handle(const protos::ServerEvent& event) {
  absl::Status st;
  switch (event.kind_case()) {
    case protos::ServerEvent::kRoundStart:
      st = OnRoundStart(event.round_start());
      break;
    case protos::ServerEvent::kReceipt:
      st = OnReceipt(event.receipt());
      break;
    case protos::ServerEvent::kDone:
      done_ = true;
      return edge_client::EventVerdict::kStop;
    default:
      break;
  }
  if (!st.ok()) return st;
  return edge_client::EventVerdict::kContinue;
}

absl::Status LoadClient::EnsureCodec(const std::string& spec) {
  if (codec_ && codec_spec_ == spec) return absl::OkStatus();
  auto made = codecs::MakeCodec(spec, SharedLayout(model_));
  if (!made.ok()) return made.status();
  codec_ = *std::move(made);
  codec_spec_ = spec;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<edge_client::PendingUpdate>> LoadClient::Prepare(
    const protos::RoundStart& start, edge_client::SystemTime deadline) {
  const auto t0 = std::chrono::steady_clock::now();
  auto bytes = transport_.DownloadBlob("", start.model_version(), deadline);
  if (!bytes.ok()) {
    // The round moved on (another version is served) or ended: wait for the next one.
    if (absl::IsNotFound(bytes.status()) || absl::IsDeadlineExceeded(bytes.status())) {
      return std::nullopt;
    }
    return bytes.status();
  }
  book_->Downloaded(start.round(), index_, bytes->size(), Since(t0));
  if (options_.true_models && book_->WantsModel(start.model_version())) {
    auto model = core::FloatsFromBytes(*bytes, dim_, "the model");
    if (!model.ok()) return model.status();
    book_->Model(start.model_version(), *std::move(model));
  }
  std::string().swap(*bytes);  // thousands of clients think at once: hold no model meanwhile
  const double j = options_.think_jitter;
  transport_.Sleep(options_.think_s *
                   std::uniform_real_distribution<double>(1 - j, 1 + j)(think_rng_));
  if (absl::Status st = EnsureCodec(start.codec()); !st.ok()) return st;
  const std::vector<float> update =
      SyntheticUpdate(options_.seed, index_, start.round(), dim_, options_.update_scale);
  codecs::EncodeOptions eopts;
  eopts.seed = start.seed();
  eopts.max_frame_bytes = start.max_chunk_bytes();
  std::vector<codecs::Frame> frames;
  if (absl::Status st = codec_->Encode(update, eopts, &frames); !st.ok()) return st;
  edge_client::PendingUpdate p;
  p.round = start.round();
  p.model_version = start.model_version();
  p.update_id = transport_.NewUpdateId();
  p.num_samples = options_.samples;
  for (codecs::Frame& f : frames) p.frames.push_back(std::move(f.bytes));
  return p;
}

absl::Status LoadClient::OnRoundStart(const protos::RoundStart& start) {
  const edge_client::SystemTime deadline = edge_client::DeadlineOf(start);
  if (pending_ && pending_->round != start.round()) pending_.reset();  // its receipt never came
  book_->Started(start.round(), start.model_version(), index_);
  if (!pending_) {
    auto prepared = Prepare(start, deadline);
    if (!prepared.ok()) return prepared.status();
    if (!prepared->has_value()) {
      // Nothing was sent: no receipt needs to come for the round to settle.
      book_->SentNothing(start.round(), index_);
      return absl::OkStatus();
    }
    pending_ = **std::move(prepared);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const absl::Status st = transport_.Upload(*pending_, codec_spec_, deadline);
  uint64_t bytes = 0;
  for (const std::string& f : pending_->frames) bytes += f.size();
  // Held, or the round closed first: the receipt says what counted.
  if (st.ok() || absl::IsDeadlineExceeded(st) || absl::IsFailedPrecondition(st)) {
    if (st.ok()) {
      book_->Uploaded(start.round(), index_, Since(t0), bytes,
                      static_cast<uint32_t>(pending_->frames.size()));
    }
    return absl::OkStatus();
  }
  return st;
}

absl::Status LoadClient::OnReceipt(const protos::RoundReceipt& receipt) {
  std::vector<CountedChunk> counted;
  if (pending_ && pending_->round == receipt.round() &&
      pending_->update_id == receipt.update_id()) {
    codecs::FrameLimits limits;
    limits.max_frame_bytes = ~uint64_t{0};
    for (uint32_t c : receipt.counted_chunks()) {
      if (c >= pending_->frames.size()) {
        return absl::DataLossError(StrCat("receipt of round ", receipt.round(), " counts chunk ", c,
                                          " of ", pending_->frames.size()));
      }
      auto view = codecs::ParseFrame(pending_->frames[c], limits);
      if (!view.ok()) return view.status();
      CountedChunk chunk{view->begin, std::vector<float>(view->length)};
      if (absl::Status st = codec_->Decode(*view, chunk.values); !st.ok()) return st;
      counted.push_back(std::move(chunk));
    }
  }
  book_->Receipt(receipt.round(), index_, receipt.chunk_count(), counted);
  if (pending_ && pending_->round == receipt.round()) pending_.reset();
  return absl::OkStatus();
}

}  // namespace fedlgc::sim
