// A ClientEnv for a mode's unit tests (the edge client's seam, client_mode.h): training
// adds a fixed step (different each time) to the weights, downloads give a model of ones,
// uploads are recorded, Persist counts; the transport is not there.
#ifndef FEDLGC_TESTS_EDGE_CLIENT_FAKE_CLIENT_ENV_H_
#define FEDLGC_TESTS_EDGE_CLIENT_FAKE_CLIENT_ENV_H_

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "edge_client/client_mode.h"
#include "monitoring/metrics.h"
#include "tests/core/fake_clock.h"

namespace fedlgc::edge_client {

class FakeClientEnv final : public ClientEnv {
 public:
  explicit FakeClientEnv(codecs::ModelLayout layout)
      : trained_sum(layout.dim(), 0.0f), layout_(std::move(layout)) {}

  const std::string& client_id() const override { return id_; }
  monitoring::Metrics& metrics() override { return metrics_; }
  Transport& transport() override { std::abort(); }
  core::Clock& clock() override { return clock_; }
  ClientState& state() override { return state_; }
  absl::Status Persist() override {
    ++persists;
    return absl::OkStatus();
  }
  uint64_t dim() const override { return layout_.dim(); }
  const codecs::ModelLayout& layout() const override { return layout_; }
  const std::string& device() const override { return device_; }
  uint64_t total_rounds() const override { return 3; }
  absl::StatusOr<double> TrainLocal(const protos::RoundStart&,
                                    std::vector<float>* weights) override {
    ++trained;
    std::vector<float> step(weights->size());
    for (size_t i = 0; i < step.size(); ++i) {
      step[i] = 0.01f * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(trained));
      (*weights)[i] += step[i];
    }
    for (size_t i = 0; i < step.size(); ++i) trained_sum[i] += (*weights)[i] - 1.0f;
    return 0.5;
  }
  absl::StatusOr<std::vector<float>> DownloadFloats(const std::string&, uint64_t,
                                                    SystemTime) override {
    return std::vector<float>(layout_.dim(), 1.0f);
  }
  PendingUpdate NewPending(uint64_t round, uint64_t model_version) override {
    PendingUpdate p;
    p.round = round;
    p.model_version = model_version;
    p.update_id = ++next_id_;
    return p;
  }
  absl::Status UploadPending(uint64_t, SystemTime, const std::optional<ShareFields>&,
                             Half) override {
    uploads.push_back(*state_.pending);
    return absl::OkStatus();
  }
  void CountUploaded(uint64_t) override {}
  void ObserveEncode(uint64_t, core::Clock::time_point) override {}
  void AppendRoundLog(const ClientRoundRecord&) override {}

  int trained = 0, persists = 0;
  std::vector<float> trained_sum;  // of every update trained
  std::vector<PendingUpdate> uploads;

 private:
  const std::string id_ = "client-0", device_ = "cpu";
  codecs::ModelLayout layout_;
  monitoring::Metrics metrics_;
  core::FakeClock clock_;
  ClientState state_;
  uint64_t next_id_ = 0;
};

}  // namespace fedlgc::edge_client

#endif  // FEDLGC_TESTS_EDGE_CLIENT_FAKE_CLIENT_ENV_H_
