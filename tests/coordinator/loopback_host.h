// A RoundHost that runs a driver's rounds against clients in the test's thread, with no
// gRPC between them: the coordinator's real round engine and metrics, and each client a
// ClientMode over a FakeClientEnv of its own. StartRound opens the engine's round and
// queues each participant's RoundStart as the service makes it (RoundStartEventOf); the
// driver's pushes are queued as they come. WaitUntil delivers what is queued, feeds each
// client's new uploads to the engine chunk by chunk (ObserveChunk, then AcceptChunk, as
// the service's reactor does) and its new reports to the driver, and while `done` fails moves the
// fake clock 100 ms at a time and ticks, up to the deadline. A client marked silent hears nothing
// and sends nothing (a dead link). After a commit, SendReceipts delivers each client's receipt.
#ifndef FEDLGC_TESTS_COORDINATOR_LOOPBACK_HOST_H_
#define FEDLGC_TESTS_COORDINATOR_LOOPBACK_HOST_H_

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/service.h"
#include "monitoring/metrics.h"
#include "protos/fedlgc.pb.h"
#include "tests/coordinator/fake_round_host.h"
#include "tests/edge_client/fake_client_env.h"

namespace fedlgc::testing {

class LoopbackHost : public FakeRoundHost {
 public:
  using ModeFactory =
      std::function<std::unique_ptr<edge_client::ClientMode>(edge_client::ClientEnv&)>;
  struct Client {
    std::unique_ptr<edge_client::FakeClientEnv> env;
    std::unique_ptr<edge_client::ClientMode> mode;
    size_t fed = 0;       // of env->uploads, how many went to the engine
    size_t reported = 0;  // of env->reports, how many went to the driver
    bool silent = false;  // hears nothing, sends nothing
    // A slow link: what is sent to it is delivered this long after (on the fake clock).
    coordinator::Clock::duration lag{};
    // A lossy link: the chunk indices of its next upload that never reach the engine (the
    // round closes at its deadline without them; the receipt does not count them).
    std::set<uint32_t> drop;
  };

  // The engine's clock is the host's fake one.
  LoopbackHost(coordinator::EngineOptions options, coordinator::EngineState state)
      : layout_(options.layout) {
    options.clock = &clock;
    engine_ = std::make_unique<coordinator::RoundEngine>(std::move(options), std::move(state));
  }

  // A job of `plan` over `layout`'s model of ones, sample counts weighing as they are.
  LoopbackHost(const coordinator::RoundPlan& plan, const codecs::ModelLayout& layout)
      : LoopbackHost(JobOptions(plan, layout), Ones(layout.dim())) {}

  // What the driver of that job is made from (`plan` outlives it): no clipping, state
  // files in a folder of the test's own.
  coordinator::DriverEnv DriverEnvFor(const coordinator::RoundPlan* plan,
                                      const std::string& folder) const {
    coordinator::DriverEnv env;
    env.dim = engine_->dim();
    env.initial_model = engine_->ModelVector();
    env.state_dir = ::testing::TempDir() + "/" + folder;
    env.plan = plan;
    env.layout = layout_;
    env.robust.clip = 0;
    return env;
  }

  void set_driver(coordinator::RoundDriver* driver) { driver_ = driver; }
  // A client of `samples` examples whose model starts as the engine's.
  Client& AddClient(const std::string& id, uint64_t samples, const codecs::ModelLayout& layout,
                    const ModeFactory& make) {
    engine_->roster().Register(id, samples);
    Client& c = clients_[id];
    c.env = std::make_unique<edge_client::FakeClientEnv>(layout, id);
    c.env->model = engine_->ModelVector();
    // Blobs other than the model come from the driver, as the service serves them.
    c.env->blob_source = [this, id](const std::string& name,
                                    uint64_t version) -> absl::StatusOr<std::string> {
      if (driver_ == nullptr) return absl::NotFoundError(name + " has no driver to serve it");
      auto blob = driver_->Blob(id, name, version);
      if (!blob.ok()) return blob.status();
      return (*blob)->bytes;
    };
    c.mode = make(*c.env);
    return c;
  }
  Client& client(const std::string& id) { return clients_.at(id); }
  // Every chunk the engine refused, with its status.
  const std::vector<absl::Status>& refused() const { return refused_; }

  coordinator::RoundEngine& engine() override { return *engine_; }
  monitoring::Metrics& metrics() override { return metrics_; }
  absl::Status StartRound(const std::vector<std::string>& participants,
                          coordinator::Clock::time_point deadline,
                          std::shared_ptr<coordinator::Collector> collector,
                          const std::set<std::string>* uploaders) override {
    if (absl::Status st = engine_->OpenRound(participants, deadline, std::move(collector));
        !st.ok()) {
      return st;
    }
    if (uploaders != nullptr) engine_->SetUploaders(*uploaders);
    for (const std::string& p : participants) QueueRoundStart(p);
    return absl::OkStatus();
  }
  absl::Status StartRollingRound(const std::vector<std::string>& participants,
                                 coordinator::Clock::time_point deadline,
                                 std::shared_ptr<coordinator::Collector> collector) override {
    if (absl::Status st =
            engine_->OpenRound(participants, deadline, std::move(collector), /*rolling=*/true);
        !st.ok()) {
      return st;
    }
    for (const std::string& p : participants) QueueRoundStart(p);
    return absl::OkStatus();
  }
  absl::StatusOr<size_t> AskMore(const std::vector<std::string>& clients,
                                 coordinator::Clock::time_point deadline) override {
    auto added = engine_->AddParticipants(clients, deadline);
    if (!added.ok()) return added.status();
    for (const std::string& p : *added) QueueRoundStart(p);
    return added->size();
  }
  void WaitUntil(coordinator::Clock::time_point deadline, const std::function<bool()>& done,
                 const std::function<void()>& tick) override {
    for (;;) {
      Deliver();
      if (done() || Now() >= deadline) return;
      if (tick) tick();
      if (!AnyReady())
        clock.Advance(std::min<coordinator::Clock::duration>(std::chrono::milliseconds(100),
                                                             deadline - Now()));
    }
  }
  std::vector<std::string> Connected() const override {
    std::vector<std::string> out;
    for (const auto& [id, c] : clients_) {
      if (!c.silent) out.push_back(id);
    }
    return out;
  }
  bool Push(const std::string& client, const protos::ServerEvent& event) override {
    auto it = clients_.find(client);
    if (it == clients_.end() || it->second.silent) return false;
    queue_.push_back({client, event, Now() + it->second.lag});
    return true;
  }

  // The receipts of a commit, delivered (after the checkpoint, as the coordinator does).
  void SendReceipts(const coordinator::CommitResult& commit) {
    engine_->PublishReceipts();
    for (const auto& [client, rc] : commit.receipts) {
      Push(client, coordinator::ReceiptEventOf(rc));
    }
    Deliver();
  }

  // Hands each queued event that is due to its client (in the order queued) and its new
  // uploads to the engine.
  void Deliver() {
    for (;;) {
      auto due = std::find_if(queue_.begin(), queue_.end(),
                              [&](const Queued& q) { return q.due <= Now(); });
      if (due == queue_.end()) return;
      const std::string id = due->client;
      const protos::ServerEvent event = std::move(due->event);
      queue_.erase(due);
      Client& c = clients_.at(id);
      if (c.silent) continue;
      absl::Status st;
      switch (event.kind_case()) {
        case protos::ServerEvent::kRoundStart:
          st = c.mode->OnRoundStart(event.round_start());
          break;
        case protos::ServerEvent::kMode:
          st = c.mode->OnModeEvent(event.mode());
          break;
        case protos::ServerEvent::kReceipt:
          st = c.mode->OnReceipt(event.receipt());
          break;
        default:
          break;
      }
      EXPECT_TRUE(st.ok()) << id << ": " << st;
      Feed(id, c);
    }
  }

 private:
  static coordinator::EngineOptions JobOptions(const coordinator::RoundPlan& plan,
                                               const codecs::ModelLayout& layout) {
    coordinator::EngineOptions eo;
    eo.plan = plan;
    eo.layout = layout;
    eo.max_client_weight = 1;
    return eo;
  }
  static coordinator::EngineState Ones(uint64_t dim) {
    coordinator::EngineState state;
    state.model.assign(dim, 1.0f);
    return state;
  }

  void QueueRoundStart(const std::string& client) {
    auto e = coordinator::RoundStartEventOf(*engine_, *driver_, client, clock);
    if (e) queue_.push_back({client, *std::move(e), Now() + clients_.at(client).lag});
  }
  bool AnyReady() const {
    return std::any_of(queue_.begin(), queue_.end(),
                       [&](const Queued& q) { return q.due <= Now(); });
  }

  void Feed(const std::string& id, Client& c) {
    for (; c.fed < c.env->uploads.size(); ++c.fed) {
      const edge_client::PendingUpdate& p = c.env->uploads[c.fed];
      const std::set<uint32_t> lost = std::exchange(c.drop, {});
      for (uint32_t i = 0; i < p.frames.size(); ++i) {
        if (lost.count(i)) continue;
        protos::UpdateChunk chunk;
        chunk.set_round(p.round);
        chunk.set_update_id(p.update_id);
        chunk.set_chunk_index(i);
        chunk.set_chunk_count(static_cast<uint32_t>(p.frames.size()));
        chunk.set_num_samples(p.num_samples);
        chunk.set_frame(p.frames[i]);
        chunk.set_scale(i < p.scales.size() ? p.scales[i] : 0.0f);
        chunk.set_part(i < p.parts.size() ? p.parts[i] : 0);
        const coordinator::ChunkIn in = coordinator::ChunkInOf(id, chunk);
        driver_->ObserveChunk(id, in);
        const coordinator::ChunkResult r = engine_->AcceptChunk(in);
        if (!r.status.ok()) refused_.push_back(r.status);
      }
    }
    for (; c.reported < c.env->reports.size(); ++c.reported) {
      const absl::Status st = driver_->AcceptReport(id, c.env->reports[c.reported]);
      if (!st.ok()) refused_.push_back(st);
    }
  }

  const codecs::ModelLayout layout_;
  std::unique_ptr<coordinator::RoundEngine> engine_;
  monitoring::Metrics metrics_;
  coordinator::RoundDriver* driver_ = nullptr;
  std::map<std::string, Client> clients_;
  struct Queued {
    std::string client;
    protos::ServerEvent event;
    coordinator::Clock::time_point due;
  };
  std::deque<Queued> queue_;
  std::vector<absl::Status> refused_;
};

}  // namespace fedlgc::testing

#endif  // FEDLGC_TESTS_COORDINATOR_LOOPBACK_HOST_H_
