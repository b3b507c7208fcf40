// The aggregator tier (see tier.h).
#include "tier/tier.h"

#include <chrono>
#include <cstdio>

#include "codecs/str.h"
#include "core/atomic_file.h"
#include "modes/clients.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::tier {
namespace {

constexpr uint32_t kKeptMagic = 0x54524C46;  // "FLRT"
constexpr uint32_t kKeptVersion = 1;

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
  u.metrics_listen = o.parent_metrics_listen;
  u.max_message_bytes = o.max_message_bytes;
  u.torch_threads = o.torch_threads;
  return u;
}

absl::Status SaveKeptRound(const std::string& path, const KeptRound& kept) {
  core::StateWriter w;
  w.U32(kKeptMagic);
  w.U32(kKeptVersion);
  w.U64(kept.round);
  w.U64(kept.model_version);
  w.Floats(kept.model);
  return core::AtomicWriteFile(path, w.Finish());
}

absl::StatusOr<std::optional<KeptRound>> LoadKeptRound(const std::string& path) {
  auto bytes = core::ReadFileIfExists(path);
  if (!bytes.ok()) return bytes.status();
  if (!bytes->has_value()) return std::nullopt;
  auto reader = core::StateReader::Open(**bytes, path);
  if (!reader.ok()) return reader.status();
  KeptRound kept;
  uint32_t magic = 0, version = 0;
  if (!reader->U32(&magic) || !reader->U32(&version) || magic != kKeptMagic ||
      version != kKeptVersion || !reader->U64(&kept.round) || !reader->U64(&kept.model_version) ||
      !reader->Floats(&kept.model) || !reader->done()) {
    return absl::DataLossError(StrCat(path, ": malformed aggregator round"));
  }
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
  auto client = edge_client::EdgeClient::Create(std::move(upstream), modes::MakeClientMode,
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
  // samples of its clients.
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) break;
    }
    if (local_->ConnectedClients().size() >= min_clients_ &&
        local_->engine().RegisteredSamples() > 0) {
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
  if (!st.ok())
    std::fprintf(stderr, "aggregator: its parent's client: %s\n", st.ToString().c_str());
  absl::MutexLock lock(&mu_);
  over_ = true;
  upstream_result_ = st;
}

uint64_t Tier::NumSamples() { return local_->engine().RegisteredSamples(); }

absl::StatusOr<double> Tier::Train(const protos::RoundStart& start, std::vector<float>* weights) {
  // A restart that committed this round already sends what it committed.
  auto kept = LoadKeptRound(KeptPath());
  if (!kept.ok()) {
    std::fprintf(stderr, "aggregator: %s\n", kept.status().ToString().c_str());
  } else if (kept->has_value() && (*kept)->round == start.round() &&
             (*kept)->model_version == start.model_version() &&
             local_->engine().current_round() == start.round() + 1 &&
             (*kept)->model.size() == weights->size()) {
    std::fprintf(stderr, "aggregator: round %llu was committed before a restart: sending it up\n",
                 static_cast<unsigned long long>(start.round()));
    *weights = std::move((*kept)->model);
    return 0.0;
  }
  // The local round gets what is left of the parent's round but the reserve.
  const auto left = edge_client::DeadlineOf(start) - std::chrono::system_clock::now();
  const auto local_left = std::chrono::duration_cast<coordinator::Clock::duration>(
      std::max(left, decltype(left)::zero()) * (1 - reserve_));
  coordinator::RoundOrder order;
  order.round = start.round();
  order.model = *weights;
  order.deadline = coordinator::Clock::now() + local_left;
  order.training = {start.local_epochs(), start.local_steps(), start.lr(), start.batch_size()};
  order.total_rounds = static_cast<uint32_t>(client_->job_rounds());
  absl::MutexLock lock(&mu_);
  if (stop_) return absl::CancelledError("the aggregator is stopping");
  order_ = std::move(order);
  order_version_ = start.model_version();
  outcome_.reset();
  mu_.Await(absl::Condition(
      +[](Tier* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return t->stop_ || t->outcome_; },
      this));
  if (!outcome_) return absl::CancelledError("the aggregator is stopping");
  absl::StatusOr<std::vector<float>> outcome = *std::move(outcome_);
  outcome_.reset();
  if (!outcome.ok()) {
    std::fprintf(stderr, "aggregator: round %llu: nothing goes up: %s\n",
                 static_cast<unsigned long long>(start.round()),
                 std::string(outcome.status().message()).c_str());
    return absl::NotFoundError(outcome.status().message());
  }
  *weights = *std::move(outcome);
  return 0.0;
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
  {
    absl::MutexLock lock(&mu_);
    kept.model_version = order_version_;
  }
  kept.model.assign(model.begin(), model.end());
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
