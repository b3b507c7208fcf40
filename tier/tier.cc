// The aggregator tier (see tier.h).
#include "tier/tier.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "base/file.h"
#include "base/log.h"
#include "base/str.h"
#include "core/float_bytes.h"
#include "core/state_file.h"
#include "core/state_message.h"
#include "modes/catalog.h"
#include "modes/clients.h"
#include "protos/fedlgc.pb.h"
#include "protos/state.pb.h"

namespace fedlgc::tier {
namespace {

// An aggregator's kept round: u32 magic 'FLRT', u32 version, then version 3: the message
// state::KeptRound (protos/state.proto, core/state_message.h); version 2: u64 round, u64
// model_version, u32 handed, floats delta, floats carry. CRC32C at the end.
constexpr uint32_t kKeptMagic = 0x54524C46;  // "FLRT"
constexpr uint32_t kKeptVersion = 3;

}  // namespace

edge_client::EdgeClientOptions UpstreamOptions(const coordinator::CoordinatorOptions& o) {
  edge_client::EdgeClientOptions u;
  u.server = o.parent;
  u.client_id = o.parent_id;
  u.state_dir = StrCat(o.state_dir, "/parent");
  u.tls_ca = o.parent_tls_ca.empty() ? o.tls_ca : o.parent_tls_ca;
  u.tls_cert = o.parent_tls_cert;
  u.tls_key = o.parent_tls_key;
  u.tls_server_name = o.parent_tls_server_name;
  u.insecure = o.insecure;
  u.device = "cpu";  // it encodes and uploads; the local round trains nothing here
  // A TorchScript job: the aggregator's file, which must be its parent's.
  if (o.model_options().IsFile()) u.model = o.model;
  u.metrics_listen = o.parent_metrics_listen;
  u.max_message_bytes = o.max_message_bytes;
  u.torch_threads = o.torch_threads;
  u.clock = o.clock;
  return u;
}

absl::Status SaveKeptRound(const std::string& path, const KeptRound& kept) {
  state::KeptRound m;
  m.set_round(kept.round);
  m.set_model_version(kept.model_version);
  m.set_handed(kept.handed);
  m.set_delta(core::FloatsToBytes(kept.delta));
  m.set_carry(core::FloatsToBytes(kept.carry));
  core::StateWriter w;
  w.U32(kKeptMagic);
  w.U32(kKeptVersion);
  if (absl::Status st = core::AppendMessage(m, &w, path); !st.ok()) return st;
  return fedlgc::AtomicWriteFile(path, w.Finish());
}

absl::StatusOr<std::optional<KeptRound>> LoadKeptRound(const std::string& path) {
  auto bytes = fedlgc::ReadFileIfExists(path);
  if (!bytes.ok()) return bytes.status();
  if (!bytes->has_value()) return std::nullopt;
  auto reader = core::StateReader::Open(**bytes, path);
  if (!reader.ok()) return reader.status();
  const auto malformed = [&] {
    return absl::DataLossError(StrCat(path, ": malformed aggregator round"));
  };
  KeptRound kept;
  uint32_t magic = 0, version = 0;
  if (!reader->U32(&magic) || !reader->U32(&version) || magic != kKeptMagic || version < 2 ||
      version > kKeptVersion) {
    return malformed();
  }
  if (version == 2) {
    uint32_t handed = 0;
    if (!reader->U64(&kept.round) || !reader->U64(&kept.model_version) || !reader->U32(&handed) ||
        handed > 1 || !reader->Floats(&kept.delta) || !reader->Floats(&kept.carry) ||
        !reader->done()) {
      return malformed();
    }
    kept.handed = handed != 0;
  } else {
    state::KeptRound m;
    if (absl::Status st = core::ParseMessage(*reader, &m, path); !st.ok()) return st;
    auto delta = core::FloatsFromBytes(m.delta(), path);
    auto carry = core::FloatsFromBytes(m.carry(), path);
    if (!delta.ok() || !carry.ok()) return malformed();
    kept.round = m.round();
    kept.model_version = m.model_version();
    kept.handed = m.handed();
    kept.delta = *std::move(delta);
    kept.carry = *std::move(carry);
  }
  if (!kept.carry.empty() && kept.carry.size() != kept.delta.size()) return malformed();
  return kept;
}

Tier::Tier(coordinator::Coordinator* local, std::string state_dir, uint32_t min_clients,
           double reserve)
    : local_(local),
      state_dir_(std::move(state_dir)),
      min_clients_(min_clients),
      reserve_(reserve) {}

absl::StatusOr<std::unique_ptr<Tier>> Tier::Create(edge_client::EdgeClientOptions upstream,
                                                   coordinator::Coordinator* local,
                                                   const std::string& state_dir,
                                                   uint32_t min_clients, double reserve) {
  std::unique_ptr<Tier> t(new Tier(local, state_dir, min_clients, reserve));
  // An aggregator sends its parent plain updates of the job codec: a parent whose mode
  // needs more of its clients is refused for good.
  auto plain_only =
      [](Mode mode,
         edge_client::ClientEnv& env) -> absl::StatusOr<std::unique_ptr<edge_client::ClientMode>> {
    if (!modes::TraitsOf(mode).plain_clients) {
      return absl::FailedPreconditionError(
          StrCat("the parent runs a ", ModeName(mode),
                 " job, whose clients take part in its own protocol; an aggregator sends "
                 "plain updates (FedAvg jobs)"));
    }
    return modes::MakeClientMode(mode, env);
  };
  auto client = edge_client::EdgeClient::Create(std::move(upstream), plain_only,
                                                /*stubs=*/nullptr, t.get());
  if (!client.ok()) return client.status();
  t->client_ = *std::move(client);
  return t;
}

Tier::~Tier() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void Tier::Start() {
  thread_ = std::thread([this] { RunUpstream(); });
}

void Tier::RunUpstream() {
  // Join once the local quorum is here: the join carries this aggregator's weight, the
  // samples of its clients. A restart (a checkpoint with clients in it) joins at once: it
  // may have a kept round to send, or the job may be over.
  const bool restarted =
      local_->engine().current_round() > 1 && local_->engine().roster().RegisteredSamples() > 0;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) break;
    }
    if (restarted || (local_->ConnectedClients().size() >= min_clients_ &&
                      local_->engine().roster().RegisteredSamples() > 0)) {
      break;
    }
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(100));
  }
  absl::Status st;
  bool stopped = false;
  {
    absl::MutexLock lock(&mu_);
    stopped = stop_;
  }
  if (!stopped) st = client_->Run();
  if (!st.ok()) log::Warning("aggregator", "its parent's client: %s", st.ToString().c_str());
  absl::MutexLock lock(&mu_);
  over_ = true;
  upstream_result_ = st;
}

uint64_t Tier::NumSamples() { return local_->engine().roster().RegisteredSamples(); }

std::vector<float> Tier::Unhanded(size_t dim, uint64_t committed, uint64_t* kept_round,
                                  uint64_t* kept_version) {
  *kept_round = *kept_version = 0;
  auto kept = LoadKeptRound(KeptPath());
  if (!kept.ok()) {
    log::Error("aggregator", "%s: what it holds is lost", kept.status().ToString().c_str());
    return {};
  }
  if (!kept->has_value() || (*kept)->handed || (*kept)->delta.size() != dim) return {};
  std::vector<float> out = (*kept)->carry;
  // The round's own update counts when the checkpoint holds the round (a crash between
  // tier.result and the checkpoint runs the round again: its clients were never told).
  if ((*kept)->round <= committed) {
    if (out.empty()) out.assign(dim, 0.0f);
    for (size_t i = 0; i < dim; ++i) out[i] += (*kept)->delta[i];
    *kept_round = (*kept)->round;
    *kept_version = (*kept)->model_version;
  }
  return out;
}

void Tier::OnJobStartedOver() {
  std::error_code ec;
  if (std::filesystem::remove(KeptPath(), ec)) {
    log::Warning("aggregator", "the parent's job started afresh: %s (the earlier run's) is dropped",
                 KeptPath());
  }
}

void Tier::MarkHanded() {
  auto kept = LoadKeptRound(KeptPath());
  if (!kept.ok() || !kept->has_value()) return;
  (*kept)->handed = true;
  if (absl::Status st = SaveKeptRound(KeptPath(), **kept); !st.ok()) {
    log::Warning("aggregator", "%s", st.ToString().c_str());
  }
}

absl::StatusOr<double> Tier::Train(const protos::RoundStart& start, std::vector<float>* weights) {
  uint64_t kept_round = 0, kept_version = 0;
  // No local round is open now: the engine's committed round is its checkpoint's.
  const std::vector<float> unhanded =
      Unhanded(weights->size(), local_->engine().current_round() - 1, &kept_round, &kept_version);
  if (kept_round == start.round() && kept_version == start.model_version()) {
    // A restart that committed this round already sends what it committed.
    log::Info("aggregator", "round %llu was committed before a restart: sending it up",
              static_cast<unsigned long long>(start.round()));
  } else {
    auto model = RunLocalRound(start, *weights);
    if (!model.ok() && unhanded.empty()) {
      log::Warning("aggregator", "round %llu: nothing goes up: %s",
                   static_cast<unsigned long long>(start.round()),
                   std::string(model.status().message()).c_str());
      return absl::NotFoundError(model.status().message());
    }
    if (model.ok()) *weights = *std::move(model);
  }
  if (!unhanded.empty() && kept_round != start.round()) {
    log::Warning("aggregator",
                 "round %llu also carries what earlier rounds committed and never sent up",
                 static_cast<unsigned long long>(start.round()));
  }
  for (size_t i = 0; i < unhanded.size(); ++i) (*weights)[i] += unhanded[i];
  MarkHanded();
  return 0.0;
}

absl::StatusOr<std::vector<float>> Tier::RunLocalRound(const protos::RoundStart& start,
                                                       const std::vector<float>& model) {
  // The local round gets what is left of the parent's round but the reserve.
  const auto left = edge_client::DeadlineOf(start) - local_->clock().WallNow();
  if (left <= decltype(left)::zero()) {
    log::Warning("aggregator",
                 "round %llu: the parent's deadline has passed by this host's clock (are the "
                 "clocks in step?)",
                 static_cast<unsigned long long>(start.round()));
  }
  const auto local_left = std::chrono::duration_cast<coordinator::Clock::duration>(
      std::max(left, decltype(left)::zero()) * (1 - reserve_));
  coordinator::RoundOrder order;
  order.round = start.round();
  order.model = model;
  order.deadline = local_->clock().Now() + local_left;
  order.training = {start.local_epochs(), start.local_steps(), start.lr(), start.batch_size(),
                    start.objective().prox_mu()};
  order.total_rounds = static_cast<uint32_t>(client_->job_rounds());
  // No local round is open: the engine's last committed round is its checkpoint's.
  const uint64_t committed = local_->engine().current_round() - 1;
  absl::MutexLock lock(&mu_);
  if (stop_) return absl::CancelledError("the aggregator is stopping");
  order_ = std::move(order);
  order_version_ = start.model_version();
  order_base_ = model;
  order_committed_ = committed;
  outcome_.reset();
  mu_.Await(absl::Condition(
      +[](Tier* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return t->stop_ || t->outcome_; },
      this));
  if (!outcome_) return absl::CancelledError("the aggregator is stopping");
  absl::StatusOr<std::vector<float>> outcome = *std::move(outcome_);
  outcome_.reset();
  return outcome;
}

absl::StatusOr<std::optional<coordinator::RoundOrder>> Tier::Next() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](Tier* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
        return t->stop_ || t->over_ || t->order_.has_value();
      },
      this));
  if (order_) {
    std::optional<coordinator::RoundOrder> order = std::move(order_);
    order_.reset();
    return order;
  }
  if (over_ && !upstream_result_.ok()) return upstream_result_;
  return std::nullopt;
}

absl::Status Tier::Keep(uint64_t round, std::span<const float> model) {
  KeptRound kept;
  kept.round = round;
  kept.delta.assign(model.begin(), model.end());
  uint64_t committed = 0;
  {
    absl::MutexLock lock(&mu_);
    kept.model_version = order_version_;
    committed = order_committed_;
    if (order_base_.size() != kept.delta.size()) {
      return absl::InternalError("an aggregator's round committed without an order");
    }
    for (size_t i = 0; i < kept.delta.size(); ++i) kept.delta[i] -= order_base_[i];
  }
  // What the file holds and never went up stays in it (Train adds it to this round's
  // update): earlier rounds' carry, and the last round's update when it committed.
  // What the file holds counts up to the checkpoint before this round: a round written
  // to it that crashed before its checkpoint (its clients were never told) does not.
  uint64_t kept_round = 0, kept_version = 0;
  kept.carry = Unhanded(kept.delta.size(), committed, &kept_round, &kept_version);
  return SaveKeptRound(KeptPath(), kept);
}

void Tier::Finish(absl::StatusOr<std::vector<float>> model) {
  absl::MutexLock lock(&mu_);
  outcome_ = std::move(model);
}

void Tier::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (client_) client_->Stop();
}

}  // namespace fedlgc::tier
