// The rounds of the decentralised modes, LSGD and SGP (see coordinator.h, lsgd_driver.h
// and sgp_driver.h).
#include <algorithm>
#include <cstdio>

#include "codecs/str.h"
#include "coordinator/coordinator.h"
#include "coordinator/service.h"
#include "monitoring/metrics.h"

namespace fedlgc::coordinator {

absl::Status Coordinator::RunLsgdRound(const std::vector<std::string>& participants,
                                       Clock::time_point deadline, CommitResult* commit,
                                       RoundReport* rep) {
  const uint64_t round = engine_->current_round();
  lsgd_->BeginRound(round, participants);
  const std::set<std::string> nobody;  // until elected
  if (absl::Status st = StartRound(participants, deadline, {.separate = true}, &nobody); !st.ok())
    return st;

  // Reports: everyone, or what arrived by half the round's time.
  const auto opened = Clock::now();
  const auto report_deadline = opened + (deadline - opened) / 2;
  WaitUntil(report_deadline, [&] { return lsgd_->AllReported(); });
  if (stop_) return absl::OkStatus();
  if (lsgd_->reports() == 0) {
    // Nobody trained in time: wait for the first report until the deadline.
    WaitUntil(deadline, [&] { return lsgd_->reports() > 0; });
    if (stop_) return absl::OkStatus();
  }

  // Leaders upload; a leader whose event stream stays gone is replaced by the next best
  // of its group.
  const std::vector<std::string> live_list = service_->Connected();
  std::set<std::string> live(live_list.begin(), live_list.end());
  std::set<std::string> excluded;
  LsgdDriver::Election election = lsgd_->Elect(round, live, excluded);
  std::set<std::string> asked;
  const auto ask = [&](const LsgdDriver::Election& e) {
    std::set<std::string> leaders;
    for (const auto& [g, leader] : e.leaders) leaders.insert(leader);
    engine_->SetUploaders(leaders);
    for (const std::string& leader : leaders) {
      if (!asked.insert(leader).second) continue;
      protos::ServerEvent ev;
      *ev.mutable_lead() = lsgd_->LeadFor(round, leader);
      service_->Push(leader, ev);
    }
  };
  ask(election);
  WaitUntil(
      deadline, [&] { return engine_->AllComplete(); },
      [&] {
        std::set<std::string> leaders;
        for (const auto& [g, leader] : election.leaders) leaders.insert(leader);
        const auto separate = engine_->Separate();
        std::set<std::string> gone;
        for (const std::string& c : Vanished(leaders, opened)) {
          auto it = separate.find(c);
          if (it == separate.end() || !it->second.complete) gone.insert(c);
        }
        if (gone.empty()) return;
        excluded.insert(gone.begin(), gone.end());
        for (const std::string& c : gone) live.erase(c);
        election = lsgd_->Elect(round, live, excluded);
        std::fprintf(stderr, "coordinator: round %llu: %zu LSGD leader(s) gone; re-elected\n",
                     static_cast<unsigned long long>(round), gone.size());
        ask(election);
      });
  if (stop_) return absl::OkStatus();
  rep->hit_deadline = !engine_->AllComplete();
  std::set<std::string> counted;
  std::vector<float> model = lsgd_->Commit(round, election, engine_->Separate(), &counted);
  *commit = engine_->CommitModel(std::move(model), counted);
  rep->lsgd_leader = election.best;
  rep->lsgd_losses = lsgd_->Losses();
  for (const std::string& c : participants) metrics_->SetLsgdLeader(c, c == election.best);
  for (const auto& [c, loss] : rep->lsgd_losses) metrics_->SetTrainLoss(c, loss);
  return absl::OkStatus();
}

absl::Status Coordinator::RunSgpRound(const std::vector<std::string>& participants,
                                      Clock::time_point deadline, CommitResult* commit,
                                      RoundReport* rep) {
  const uint64_t round = engine_->current_round();
  sgp_->BeginRound(round, participants);
  // A sender that vanishes is not waited for: the round closes without its share.
  std::set<std::string> waiting = sgp_->Senders();
  if (absl::Status st = StartRound(participants, deadline, {.gossip = true}, &waiting); !st.ok())
    return st;
  const auto opened = Clock::now();
  WaitUntil(
      deadline, [&] { return engine_->AllComplete(); },
      [&] {
        const std::set<std::string> gone = Vanished(waiting, opened);
        if (gone.empty()) return;
        for (const std::string& c : gone) waiting.erase(c);
        engine_->SetUploaders(waiting);
        std::fprintf(stderr, "coordinator: round %llu: %zu SGP sender(s) gone\n",
                     static_cast<unsigned long long>(round), gone.size());
      });
  if (stop_) return absl::OkStatus();
  rep->hit_deadline = !engine_->AllComplete();
  // Shares go to receivers seen in the last 3 s; the others' senders keep theirs.
  std::set<std::string> live(participants.begin(), participants.end());
  for (const std::string& c : Vanished(live, opened)) live.erase(c);
  SgpDriver::Outcome out = sgp_->Commit(round, engine_->Separate(), live, engine_->ModelVector());
  *commit = engine_->CommitModel(std::move(out.model), out.delivered);
  rep->sgp_consensus_distance = out.consensus_distance;
  if (out.consensus_distance >= 0) metrics_->SetSgpConsensusDistance(out.consensus_distance);
  return absl::OkStatus();
}

}  // namespace fedlgc::coordinator
