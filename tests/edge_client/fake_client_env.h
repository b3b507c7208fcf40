// A ClientEnv for a mode's unit tests (the edge client's seam, client_mode.h): training
// adds a fixed step (different each time) to the weights, or runs a test's `train`;
// downloads give a model of ones (or `model`, or what `floats` holds for the blob, or a
// blob of `blob_source` read as floats) and the blobs a test put in `blobs`, uploads and
// reports are recorded, Persist counts; the clock is a fake.
#ifndef FEDLGC_TESTS_EDGE_CLIENT_FAKE_CLIENT_ENV_H_
#define FEDLGC_TESTS_EDGE_CLIENT_FAKE_CLIENT_ENV_H_

#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "codecs/registry.h"
#include "core/float_bytes.h"
#include "core/mixing.h"
#include "edge_client/client_mode.h"
#include "gtest/gtest.h"
#include "monitoring/metrics.h"
#include "tests/core/fake_clock.h"

namespace fedlgc::edge_client {

class FakeClientEnv final : public ClientEnv {
 public:
  explicit FakeClientEnv(codecs::ModelLayout layout, std::string id = "client-0")
      : trained_sum(layout.dim(), 0.0f), id_(std::move(id)), layout_(std::move(layout)) {}

  const std::string& client_id() const override { return id_; }
  monitoring::Metrics& metrics() override { return metrics_; }
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
  absl::StatusOr<double> TrainLocal(const protos::RoundStart& start,
                                    std::vector<float>* weights) override {
    auto t = TrainLocalWith(start, weights, LocalTerms{});
    if (!t.ok()) return t.status();
    return t->loss;
  }
  // `train` when set; else the fixed step, then one step of -lr x correction per local
  // step the round asks (at least one), as a model's training would take them.
  absl::StatusOr<LocalTrained> TrainLocalWith(const protos::RoundStart& start,
                                              std::vector<float>* weights,
                                              const LocalTerms& terms) override {
    corrections.emplace_back(terms.correction.begin(), terms.correction.end());
    if (train) {
      ++trained;
      trained_with.push_back(start);
      return train(start, weights, terms.correction);
    }
    const int64_t steps = std::max<int64_t>(1, start.local_steps());
    if (!terms.correction.empty() && terms.correction.size() != weights->size()) {
      return absl::InvalidArgumentError("a correction of another size than the model");
    }
    const double l = PlainStep(start, weights);
    for (int64_t k = 0; k < steps && !terms.correction.empty(); ++k) {
      for (size_t i = 0; i < weights->size(); ++i) {
        (*weights)[i] -= start.lr() * terms.correction[i];
      }
    }
    return LocalTrained{
        .loss = l, .steps = steps, .lr_sum = start.lr() * static_cast<double>(steps)};
  }
  // The fixed step of the k-th training.
  double PlainStep(const protos::RoundStart& start, std::vector<float>* weights) {
    ++trained;
    trained_with.push_back(start);
    std::vector<float> step(weights->size());
    for (size_t i = 0; i < step.size(); ++i) {
      step[i] = step_scale * Step(i, trained + step_phase);
      (*weights)[i] += step[i];
    }
    for (size_t i = 0; i < step.size(); ++i) trained_sum[i] += (*weights)[i] - 1.0f;
    return loss;
  }
  // The step the k-th training (1-based) adds to coordinate i.
  static float Step(size_t i, int k) {
    return 0.01f * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(k));
  }
  absl::StatusOr<std::vector<float>> DownloadFloats(const std::string& blob, uint64_t version,
                                                    SystemTime) override {
    ++model_downloads;
    if (auto it = floats.find({blob, version}); it != floats.end()) return it->second;
    if (!blob.empty() && blob_source) {
      // A driver's float blob (SCAFFOLD's control variate), as the service serves it.
      auto bytes = blob_source(blob, version);
      if (!bytes.ok()) return bytes.status();
      return core::FloatsFromBytes(*bytes, layout_.dim(), blob);
    }
    if (!model.empty()) return model;
    return std::vector<float>(layout_.dim(), 1.0f);
  }
  absl::StatusOr<std::string> DownloadBlob(const std::string& name, uint64_t version,
                                           SystemTime) override {
    auto it = blobs.find({name, version});
    if (it != blobs.end()) return it->second;
    if (blob_source) return blob_source(name, version);
    return absl::NotFoundError(name + " " + std::to_string(version) + " is not served");
  }
  absl::Status Report(protos::ProgressReport report, SystemTime) override {
    report.set_client_id(id_);
    if (tamper) tamper(&report);
    reports.push_back(std::move(report));
    return report_status;
  }
  uint64_t NewUpdateId() override { return ++next_id_; }
  absl::Status UploadCopy(const PendingUpdate& p, const std::string&, SystemTime,
                          const ShareFields& share) override {
    absl::MutexLock l(&copies_mu);
    copies.emplace_back(p, share);
    return absl::OkStatus();
  }
  PendingUpdate NewPending(uint64_t round, uint64_t model_version) override {
    PendingUpdate p;
    p.round = round;
    p.model_version = model_version;
    p.update_id = ++next_id_;
    p.num_samples = num_samples;
    return p;
  }
  absl::Status UploadPending(uint64_t, SystemTime, const std::optional<ShareFields>& share,
                             Half) override {
    uploads.push_back(*state_.pending);
    upload_shares.push_back(share);
    return absl::OkStatus();
  }
  void CountUploaded(uint64_t round) override { counted.push_back(round); }
  void ObserveEncode(uint64_t, core::Clock::time_point) override {}
  void AppendRoundLog(const ClientRoundRecord&) override {}

  // A test's local training (SCAFFOLD's exact tests: a quadratic objective): from
  // *weights, in place, with `correction` (empty: none); what TrainLocalWith returns.
  std::function<absl::StatusOr<LocalTrained>(const protos::RoundStart& start,
                                             std::vector<float>* weights,
                                             std::span<const float> correction)>
      train;
  std::vector<std::vector<float>> corrections;  // each training's (empty: none)
  int trained = 0, persists = 0, model_downloads = 0;
  double loss = 0.5;               // what TrainLocal returns
  std::vector<protos::RoundStart> trained_with;  // each TrainLocal's RoundStart
  uint64_t num_samples = 100;      // what NewPending says
  float step_scale = 1;            // of every training step
  int step_phase = 0;              // added to the count of trainings in Step
  std::vector<float> trained_sum;  // of every update trained
  std::vector<float> model;        // what DownloadFloats gives; empty: ones
  std::map<std::pair<std::string, uint64_t>, std::string> blobs;  // by name and version
  // Where a blob not in `blobs` comes from (a loopback host's driver); null: nowhere.
  std::function<absl::StatusOr<std::string>(const std::string& name, uint64_t version)>
      blob_source;
  // Models DownloadFloats gives by blob and version; others: `model`.
  std::map<std::pair<std::string, uint64_t>, std::vector<float>> floats;
  std::vector<PendingUpdate> uploads;
  std::vector<std::optional<ShareFields>> upload_shares;  // beside each of uploads
  std::vector<uint64_t> counted;                          // CountUploaded's rounds
  std::vector<protos::ProgressReport> reports;
  absl::Status report_status;  // what Report returns
  // Changes each report before it is recorded (a client that lies in its reports).
  std::function<void(protos::ProgressReport*)> tamper;
  absl::Mutex copies_mu;       // UploadCopy may run on a mode's thread
  std::vector<std::pair<PendingUpdate, ShareFields>> copies ABSL_GUARDED_BY(copies_mu);

 private:
  const std::string id_, device_ = "cpu";
  codecs::ModelLayout layout_;
  monitoring::Metrics metrics_;
  core::FakeClock clock_;
  ClientState state_;
  uint64_t next_id_ = 0;
};

// a, a + b, a + 2b, ...: a model or update a test can tell apart coordinate by coordinate.
inline std::vector<float> Ramp(size_t n, float a, float b) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = a + b * static_cast<float>(i);
  return v;
}

// An update's fp32 frames (with their scales) decoded into `dim` values.
inline std::vector<float> DecodeFp32(const PendingUpdate& p, size_t dim) {
  auto codec = codecs::MakeCodec("fp32").value();
  std::vector<float> out(dim);
  EXPECT_TRUE(core::DecodeFrames(*codec, p.frames, p.scales, out).ok());
  return out;
}

// A round start's deadline a minute from now, as the coordinator writes it.
inline int64_t DeadlineInAMinute() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             (std::chrono::system_clock::now() + std::chrono::minutes(1)).time_since_epoch())
      .count();
}

}  // namespace fedlgc::edge_client

#endif  // FEDLGC_TESTS_EDGE_CLIENT_FAKE_CLIENT_ENV_H_
