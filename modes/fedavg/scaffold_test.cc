// SCAFFOLD (scaffold_rounds.h, scaffold_client.h) on a loopback host
// (tests/coordinator/loopback_host.h): FedAvgClients whose local training is SGD on a
// quadratic f_i(w) = 0.5 ||w - a_i||^2 (FakeClientEnv::train) run rounds against the
// FedAvg driver with --algorithm scaffold, and every round's model and control variate
// equal a reference SCAFFOLD written out below to 1e-5, under full and partial
// participation with unequal weights; the coordinator's sum of the control variates is
// the clients' less their residuals, with a lossy codec and chunks that never arrive; the
// server's state survives a restart to the bit, a client's update in flight survives one
// and goes out again as the very same bytes; the jobs SCAFFOLD does not run are refused.
#include <cmath>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "base/str.h"
#include "coordinator/robust.h"
#include "core/float_bytes.h"
#include "gtest/gtest.h"
#include "modes/fedavg/algorithm.h"
#include "modes/fedavg/fedavg_driver.h"
#include "modes/fedavg/fedavg_state.h"
#include "modes/fedavg/fedavg_state.pb.h"
#include "modes/fedavg/fedavg_test_clients.h"
#include "modes/fedavg/scaffold_client.h"
#include "protos/fedlgc.pb.h"
#include "tests/coordinator/loopback_host.h"

namespace fedlgc::modes {
namespace {

using edge_client::FakeClientEnv;
using testing::LoopbackHost;

constexpr int kSteps = 5;    // K
constexpr float kLr = 0.1f;  // the clients' SGD step
constexpr size_t kClients = 3;

// 6 coordinates, all trainable (no buffers: the model has no scale cuts).
codecs::ModelLayout Layout() {
  return codecs::ModelLayout::Create({{"w", {2, 2}}, {"b", {2}}}).value();
}

// Client i's optimum: far apart, so that FedAvg drifts and SCAFFOLD's correction matters.
std::vector<float> Target(size_t i, size_t dim) {
  std::vector<float> a(dim);
  for (size_t j = 0; j < dim; ++j) {
    a[j] = static_cast<float>(3.0 * std::sin(1.3 * static_cast<double>(i + 1) * (j + 1)));
  }
  return a;
}

// K steps of SGD on 0.5 ||w - a||^2, each followed by SCAFFOLD's -lr x correction, as
// core::Model::Train takes them (optimizer step, then the correction: model.cc).
void QuadraticTraining(FakeClientEnv& env, std::vector<float> a) {
  env.train = [a = std::move(a)](
                  const protos::RoundStart& start, std::vector<float>* w,
                  std::span<const float> correction) -> absl::StatusOr<edge_client::LocalTrained> {
    const float lr = start.lr();
    const int64_t k = start.local_steps();
    for (int64_t s = 0; s < k; ++s) {
      for (size_t j = 0; j < w->size(); ++j) {
        (*w)[j] -= lr * ((*w)[j] - a[j]);
        if (!correction.empty()) (*w)[j] -= lr * correction[j];
      }
    }
    return edge_client::LocalTrained{
        .loss = 0, .steps = k, .lr_sum = static_cast<double>(lr) * static_cast<double>(k)};
  };
}

// SCAFFOLD as Karimireddy et al. 2020 (option II) and Flower's niid_bench write it, in
// doubles: x += the weighted mean of the participants' y - x; c += (W_S / W_all) x the
// weighted mean of their c_i+ - c_i.
struct Reference {
  std::vector<std::vector<double>> a;  // each client's optimum
  std::vector<double> w;               // each client's weight (sample count)
  std::vector<double> x, c;
  std::vector<std::vector<double>> ci;

  Reference(size_t dim, const std::vector<uint64_t>& samples) : x(dim, 1.0), c(dim, 0.0) {
    for (size_t i = 0; i < samples.size(); ++i) {
      const std::vector<float> t = Target(i, dim);
      a.emplace_back(t.begin(), t.end());
      w.push_back(static_cast<double>(samples[i]));
      ci.emplace_back(dim, 0.0);
    }
  }
  void Round(const std::vector<size_t>& participants) {
    const size_t d = x.size();
    const double lr = static_cast<double>(kLr);
    double w_s = 0, w_all = 0;
    for (double wi : w) w_all += wi;
    std::vector<double> dy(d, 0.0), dc(d, 0.0);
    for (size_t i : participants) {
      std::vector<double> y = x;
      for (int k = 0; k < kSteps; ++k) {
        for (size_t j = 0; j < d; ++j) y[j] -= lr * (y[j] - a[i][j]) + lr * (c[j] - ci[i][j]);
      }
      for (size_t j = 0; j < d; ++j) {
        const double next = ci[i][j] - c[j] + (x[j] - y[j]) / (kSteps * lr);
        dy[j] += w[i] * (y[j] - x[j]);
        dc[j] += w[i] * (next - ci[i][j]);
        ci[i][j] = next;
      }
      w_s += w[i];
    }
    for (size_t j = 0; j < d; ++j) {
      x[j] += dy[j] / w_s;
      c[j] += dc[j] / w_all;  // (W_S / W_all) x the weighted mean over S
    }
  }
};

std::string Id(size_t i) { return StrCat("c", i); }

// A SCAFFOLD job over a model of ones on a loopback host, its driver and its clients.
struct Job {
  codecs::ModelLayout layout = Layout();
  coordinator::RoundPlan plan;
  coordinator::DriverEnv env;
  std::unique_ptr<FedAvgDriver> driver;
  std::unique_ptr<LoopbackHost> host;

  Job(const std::string& codec, const std::string& folder, const std::string& aggregator = "mean") {
    plan.codec = codec;
    plan.local_steps = kSteps;
    plan.lr = kLr;
    host = std::make_unique<LoopbackHost>(plan, layout);
    env = host->DriverEnvFor(&plan, folder);
    if (aggregator == "streaming") env.robust.kind = coordinator::AggregatorKind::kStreaming;
    Make();
  }
  void Make() {
    FedAvgOptions options;
    options.algorithm = "scaffold";
    driver = FedAvgDriver::Create(options, env).value();
    host->set_driver(driver.get());
  }
  FakeClientEnv& Add(size_t i, uint64_t samples) {
    FakeClientEnv& e = AddFedAvgClient(*host, layout, Id(i), samples, 1.0f);
    QuadraticTraining(e, Target(i, layout.dim()));
    return e;
  }
  // One round of `participants`; every client trains from the model the engine serves.
  coordinator::CommitResult Run(const std::vector<std::string>& participants) {
    for (const std::string& p : participants) host->client(p).env->model = model();
    RoundReport report;
    coordinator::CommitResult commit;
    const auto deadline = host->Now() + std::chrono::seconds(60);
    EXPECT_TRUE(driver->RunRound(*host, participants, deadline, &commit, &report).ok());
    EXPECT_TRUE(host->refused().empty());
    EXPECT_TRUE(driver->Save(commit.round).ok());
    host->SendReceipts(commit);
    return commit;
  }
  std::vector<float> model() { return host->engine().ModelVector(); }
  // c as the clients download it.
  std::vector<float> Control() {
    auto blob = driver->Blob("c0", kScaffoldControlBlob, host->engine().model()->version);
    EXPECT_TRUE(blob.ok()) << blob.status();
    return core::FloatsFromBytes((*blob)->bytes, layout.dim(), "c").value();
  }
};

// A client's saved SCAFFOLD state: c_i and the residual of its changes (zeros: empty).
struct ClientControl {
  std::vector<float> control, residual;
};
ClientControl SavedControl(LoopbackHost::Client& c, size_t dim) {
  std::map<std::string, std::string> slots;
  EXPECT_TRUE(c.mode->SaveState(&slots).ok());
  pb::FedAvgClientState slot;
  EXPECT_TRUE(slot.ParseFromString(slots.at("fedavg")));
  ClientControl out;
  out.control = core::FloatsFromBytes(slot.scaffold_control(), "c_i").value();
  out.residual = core::FloatsFromBytes(slot.scaffold_residual(), "r_i").value();
  if (out.control.empty()) out.control.assign(dim, 0.0f);
  if (out.residual.empty()) out.residual.assign(dim, 0.0f);
  return out;
}

// The clients' weighted sum of their control variates, sum_i w_i c_i, as saved.
std::vector<double> ClientsSum(LoopbackHost& host, const std::vector<uint64_t>& samples,
                               size_t dim) {
  std::vector<double> sum(dim, 0.0);
  for (size_t i = 0; i < samples.size(); ++i) {
    const ClientControl cc = SavedControl(host.client(Id(i)), dim);
    for (size_t j = 0; j < dim; ++j) sum[j] += static_cast<double>(samples[i]) * cc.control[j];
  }
  return sum;
}

// With nothing left in a residual, S is the clients' sum, to float32 rounding (the
// clients hold c_i as float32, S is a double).
void ExpectServerSumIsTheClients(const ScaffoldControl& server,
                                 const std::vector<double>& clients) {
  ASSERT_EQ(server.sum.size(), clients.size());
  for (size_t j = 0; j < clients.size(); ++j) {
    EXPECT_NEAR(server.sum[j], clients[j], 1e-6 * std::max(1.0, std::abs(clients[j]))) << j;
  }
}

TEST(Scaffold, ControlChangeIsOptionTwoOverTheTrainableCoordinates) {
  const std::vector<float> x = {1, 2, 3, 4}, y = {0.5f, 2.5f, 3, 9}, c = {0.1f, 0, -0.2f, 7};
  // K lr = 0.5; the last coordinate is a buffer's (trainable_end 3): no change there.
  const std::vector<float> d = ControlChange(x, y, c, 0.5, 3).value();
  EXPECT_FLOAT_EQ(d[0], -0.1f + 1.0f);
  EXPECT_FLOAT_EQ(d[1], 0.0f - 1.0f);
  EXPECT_FLOAT_EQ(d[2], 0.2f);
  EXPECT_FLOAT_EQ(d[3], 0.0f);
  // No step taken: c_i stays.
  const std::vector<float> none = ControlChange(x, y, c, 0, 4).value();
  for (float v : none) EXPECT_EQ(v, 0.0f);
  EXPECT_FALSE(ControlChange(x, y, std::vector<float>(3), 0.5, 4).ok());
}

// (a) Every round's model and c are the reference's, fp32, with both aggregators that sum:
// all three clients, then two of them (W_S / W_all = 4/6 and 5/6), then all again.
TEST(Scaffold, EveryRoundIsTheReferenceScaffoldOnQuadraticClients) {
  for (const char* aggregator : {"mean", "streaming"}) {
    Job job("fp32", StrCat("scaffold_test_exact_", aggregator), aggregator);
    const std::vector<uint64_t> samples = {100, 300, 200};
    for (size_t i = 0; i < kClients; ++i) job.Add(i, samples[i]);
    Reference ref(job.layout.dim(), samples);
    const std::vector<std::vector<size_t>> rounds = {{0, 1, 2}, {0, 1, 2}, {0, 1}, {1, 2},
                                                     {0, 2},    {0, 1, 2}, {2},    {0, 1, 2}};
    for (size_t r = 0; r < rounds.size(); ++r) {
      std::vector<std::string> ids;
      for (size_t i : rounds[r]) ids.push_back(Id(i));
      const coordinator::CommitResult commit = job.Run(ids);
      ASSERT_EQ(commit.participants, static_cast<int>(ids.size())) << aggregator << " round " << r;
      ref.Round(rounds[r]);
      const std::vector<float> m = job.model(), c = job.Control();
      for (size_t j = 0; j < m.size(); ++j) {
        EXPECT_NEAR(m[j], ref.x[j], 1e-5) << aggregator << " round " << r << " x " << j;
        EXPECT_NEAR(c[j], ref.c[j], 1e-5) << aggregator << " round " << r << " c " << j;
      }
      for (size_t i = 0; i < kClients; ++i) {
        const ClientControl cc = SavedControl(job.host->client(Id(i)), job.layout.dim());
        for (size_t j = 0; j < m.size(); ++j) {
          EXPECT_NEAR(cc.control[j], ref.ci[i][j], 1e-5) << "round " << r << " c_" << i;
        }
      }
    }
    // The clients trained with c - c_i: the first round's correction is 0, later ones not.
    const FakeClientEnv& e0 = *job.host->client(Id(0)).env;
    ASSERT_FALSE(e0.corrections.empty());
    for (float v : e0.corrections.front()) EXPECT_EQ(v, 0.0f);
    EXPECT_GT(coordinator::L2Norm(e0.corrections.back()), 0.0);
  }
}

// (b) The coordinator's S = sum_i w_i c_i less what waits in the clients' residuals: a
// biased codec (top-k, its error fed back), partial participation, and chunks that never
// arrive (the model update of one client, the control change of another), which their
// receipts leave uncounted and the clients put back.
TEST(Scaffold, TheServersSumIsTheClientsControlVariatesLessTheirResiduals) {
  Job job("topk(ratio=0.25)", "scaffold_test_invariant");
  const std::vector<uint64_t> samples = {100, 300, 200};
  for (size_t i = 0; i < kClients; ++i) job.Add(i, samples[i]);
  const size_t dim = job.layout.dim();
  for (int r = 1; r <= 6; ++r) {
    std::vector<std::string> ids = {"c0", "c1", "c2"};
    if (r == 3) ids = {"c1", "c2"};
    // One frame a part (the model is small): chunk 0 is the model update, chunk 1 the
    // change (checked below by the receipts).
    // Round 2: c1's change is lost; its model update counts, the change waits in r_1.
    // Round 4: c2's model update is lost; the mean aggregator then leaves c2 out (no part 0
    // to weigh), its receipt counts nothing and both parts go back.
    if (r == 2) job.host->client("c1").drop = {1};
    if (r == 4) job.host->client("c2").drop = {0};
    const coordinator::CommitResult commit = job.Run(ids);
    for (const std::string& id : ids) {
      const size_t counted = commit.receipts.at(id).counted.size();
      if (r == 2 && id == "c1") {
        EXPECT_EQ(counted, 1u);  // the model update alone
      } else if (r == 4 && id == "c2") {
        EXPECT_EQ(counted, 0u);
      } else {
        EXPECT_EQ(counted, 2u) << "round " << r << " " << id;
      }
    }
    const ScaffoldControl server = LoadScaffoldControl(job.env.state_dir, r).value();
    ASSERT_EQ(server.sum.size(), dim);
    std::vector<double> clients(dim, 0.0), owed(dim, 0.0);
    double w_all = 0;
    for (size_t i = 0; i < kClients; ++i) {
      const ClientControl cc = SavedControl(job.host->client(Id(i)), dim);
      const double w = static_cast<double>(samples[i]);
      w_all += w;
      for (size_t j = 0; j < dim; ++j) {
        clients[j] += w * cc.control[j];
        owed[j] += w * cc.residual[j];
      }
    }
    for (size_t j = 0; j < dim; ++j) {
      EXPECT_NEAR(server.sum[j] + owed[j], clients[j], 1e-4 * std::max(1.0, std::abs(clients[j])))
          << "round " << r << " coordinate " << j;
      EXPECT_NEAR(server.control[j], server.sum[j] / w_all, 1e-6) << "round " << r;
    }
    EXPECT_DOUBLE_EQ(server.total_weight, w_all);
  }
  // With fp32 and every chunk in, nothing is owed: S is the clients' sum itself.
  Job exact("fp32", "scaffold_test_invariant_fp32");
  for (size_t i = 0; i < kClients; ++i) exact.Add(i, samples[i]);
  for (int r = 1; r <= 3; ++r) exact.Run({"c0", "c1", "c2"});
  const ScaffoldControl server = LoadScaffoldControl(exact.env.state_dir, 3).value();
  for (size_t i = 0; i < kClients; ++i) {
    for (float v : SavedControl(exact.host->client(Id(i)), dim).residual) EXPECT_EQ(v, 0.0f);
  }
  ExpectServerSumIsTheClients(server, ClientsSum(*exact.host, samples, dim));
}

// A coordinator restarted from a checkpoint serves the same c, at the same version, to
// the bit; a job restarted from a SCAFFOLD checkpoint without --algorithm scaffold is
// refused, and so is one whose server state of that round is lost.
TEST(Scaffold, TheServersControlVariateSurvivesARestart) {
  Job job("fp32", "scaffold_test_restart");
  for (size_t i = 0; i < kClients; ++i) job.Add(i, 100);
  job.Run({"c0", "c1", "c2"});
  job.Run({"c0", "c1"});
  const std::vector<float> before = job.Control();
  job.env.committed_round = 2;
  job.env.initial_model = job.model();
  job.Make();  // the restarted coordinator's driver
  EXPECT_EQ(job.Control(), before);
  // Only the driver is made again: the loopback engine keeps its model version, as a
  // restarted engine reads it from the checkpoint.
  FedAvgOptions plain;
  auto refused = FedAvgDriver::Create(plain, job.env);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("--algorithm scaffold"), std::string::npos);
  // The file of the checkpoint's round lost while round 1's is there: refused, not c = 0.
  std::filesystem::remove(ScaffoldControlPath(job.env.state_dir, 2));
  FedAvgOptions scaffold;
  scaffold.algorithm = "scaffold";
  auto lost = FedAvgDriver::Create(scaffold, job.env);
  EXPECT_TRUE(absl::IsDataLoss(lost.status())) << lost.status();
}

// A client killed after its upload and before the receipt: restarted from its state file
// (what its last Persist wrote: the update in flight with both parts, c_i+, the residuals),
// the round's start again makes it send the very same bytes, not train again; the receipt
// then settles it as if nothing had happened.
TEST(Scaffold, AClientRestartedBeforeItsReceiptSendsTheSameUpdateAgain) {
  Job job("fp32", "scaffold_test_client_restart");
  for (size_t i = 0; i < kClients; ++i) job.Add(i, 100);
  job.Run({"c0", "c1", "c2"});
  // Round 2 commits; its receipts are held back (SendReceipts comes after the restart).
  for (size_t i = 0; i < kClients; ++i) job.host->client(Id(i)).env->model = job.model();
  coordinator::CommitResult commit;
  RoundReport report;
  const auto deadline = job.host->Now() + std::chrono::seconds(60);
  ASSERT_TRUE(job.driver->RunRound(*job.host, {"c0", "c1", "c2"}, deadline, &commit, &report).ok());
  LoopbackHost::Client& c = job.host->client("c0");
  const edge_client::PendingUpdate sent = c.env->uploads.back();
  ASSERT_FALSE(sent.parts.empty());  // both parts travel in one update, part 1 after part 0
  EXPECT_EQ(sent.parts.front(), 0u);
  EXPECT_EQ(sent.parts.back(), 1u);
  // What the state file holds (the fake's Persist writes nothing: the test takes state()
  // with the mode's slot, as EdgeClient::Persist writes them).
  edge_client::ClientState persisted = c.env->state();
  ASSERT_TRUE(c.mode->SaveState(&persisted.modes).ok());
  ASSERT_TRUE(persisted.pending.has_value());
  const ClientControl held = SavedControl(c, job.layout.dim());
  // The restart: a new mode over the persisted state, and the round's start again (as a
  // reconnect brings it while the round is open).
  const int trained = c.env->trained;
  c.mode = std::make_unique<FedAvgClient>(*c.env);
  c.env->state() = persisted;
  ASSERT_TRUE(c.mode->LoadState(persisted).ok());
  ASSERT_TRUE(c.mode->OnRoundStart(c.env->trained_with.back()).ok());
  EXPECT_EQ(c.env->trained, trained);  // not trained a second time
  EXPECT_EQ(c.env->uploads.back().frames, sent.frames);
  EXPECT_EQ(c.env->uploads.back().parts, sent.parts);
  EXPECT_EQ(c.env->uploads.back().update_id, sent.update_id);
  c.fed = c.env->uploads.size();  // the resend reaches a closed round: duplicates, refused
  // The receipt counts every chunk: nothing goes back, c_i is what the update carried.
  job.host->SendReceipts(commit);
  EXPECT_FALSE(c.env->state().pending.has_value());
  const ClientControl after = SavedControl(c, job.layout.dim());
  EXPECT_EQ(after.control, held.control);
  EXPECT_EQ(after.residual, held.residual);
}

// A client whose state folder held another job's control variate (rounds further on than
// this job's) starts it again at 0: this job's coordinator never summed it, and S stays
// the clients' sum.
TEST(Scaffold, AnotherJobsControlVariateStartsAgainAtZero) {
  const std::vector<uint64_t> samples = {100, 300, 200};
  Job before("fp32", "scaffold_test_other_job_before");
  for (size_t i = 0; i < kClients; ++i) before.Add(i, samples[i]);
  for (int r = 1; r <= 3; ++r) before.Run({"c0", "c1", "c2"});
  LoopbackHost::Client& old = before.host->client("c0");
  edge_client::ClientState kept = old.env->state();
  ASSERT_TRUE(old.mode->SaveState(&kept.modes).ok());
  ASSERT_GT(coordinator::L2Norm(SavedControl(old, before.layout.dim()).control), 0.0);

  Job job("fp32", "scaffold_test_other_job");
  for (size_t i = 0; i < kClients; ++i) job.Add(i, samples[i]);
  LoopbackHost::Client& c = job.host->client("c0");
  c.env->state() = kept;
  ASSERT_TRUE(c.mode->LoadState(kept).ok());
  job.Run({"c0", "c1", "c2"});
  // The first round's correction is 0 for every client, c0 included.
  for (float v : c.env->corrections.back()) EXPECT_EQ(v, 0.0f);
  const ScaffoldControl server = LoadScaffoldControl(job.env.state_dir, 1).value();
  ExpectServerSumIsTheClients(server, ClientsSum(*job.host, samples, job.layout.dim()));
}

// What SCAFFOLD does not run with is refused by name; a codec that keeps a residual of its
// own (dgc, or ef(...) around another) is refused by its check.
TEST(Scaffold, RefusesWhatItDoesNotRunWith) {
  const codecs::ModelLayout layout = Layout();
  coordinator::RoundPlan plan;
  plan.codec = "dgc(ratio=0.25)";
  LoopbackHost host(plan, layout);
  const coordinator::DriverEnv env = host.DriverEnvFor(&plan, "scaffold_test_refusals");
  FedAvgOptions options;
  options.algorithm = "scaffold";
  auto dgc = FedAvgDriver::Create(options, env);
  EXPECT_TRUE(absl::IsInvalidArgument(dgc.status())) << dgc.status();
  EXPECT_NE(dgc.status().message().find("momentum"), std::string::npos) << dgc.status();
  // ef(...) is refused too, and told to give the codec inside it.
  plan.codec = "ef(topk(ratio=0.25))";
  auto ef = FedAvgDriver::Create(options, env);
  EXPECT_TRUE(absl::IsInvalidArgument(ef.status())) << ef.status();
  EXPECT_NE(ef.status().message().find("give the codec inside ef(...)"), std::string::npos)
      << ef.status();
  plan.codec = "fp32";
  for (const char* flag : {"dp", "secagg", "rounds_mode"}) {
    FedAvgOptions o = options;
    if (std::string(flag) == "dp") o.dp = "gaussian(noise=0.01,clip=2)";
    if (std::string(flag) == "secagg") o.secagg = "secagg(clip=2)";
    if (std::string(flag) == "rounds_mode") o.rounds_mode = "buffered(k=2,concurrency=2)";
    auto made = FedAvgDriver::Create(o, env);
    EXPECT_TRUE(absl::IsInvalidArgument(made.status())) << flag << ": " << made.status();
    EXPECT_NE(made.status().message().find("--algorithm scaffold"), std::string::npos);
  }
  // The ladder sizes codecs for one model-sized vector; a robust aggregator would bound
  // part 0 and sum part 1 unbounded.
  coordinator::DriverEnv ladder = env;
  ladder.codec_ladder = true;
  EXPECT_TRUE(absl::IsInvalidArgument(FedAvgDriver::Create(options, ladder).status()));
  for (const char* spec : {"median", "krum(f=1)", "trimmed_mean(trim=0.2)", "bulyan(f=1)"}) {
    coordinator::DriverEnv robust = env;
    robust.robust = coordinator::AggregatorOptions::Parse(spec, 2).value();
    const absl::Status st = FedAvgDriver::Create(options, robust).status();
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << spec << ": " << st;
    EXPECT_NE(st.message().find("--aggregator mean or streaming"), std::string::npos) << st;
  }
  EXPECT_EQ(Algorithm::Parse("scaffold")->ToString(), "scaffold");
  EXPECT_FALSE(Algorithm::Parse("scaffold(lr=1)").ok());
}

}  // namespace
}  // namespace fedlgc::modes
