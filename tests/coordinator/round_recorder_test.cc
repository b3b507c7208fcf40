// The round recorder's TensorBoard scalars: each committed round's figures under their
// tags, only those the round has, read back from the file by the tests' own reader.
#include "coordinator/round_recorder.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "tests/monitoring/tensorboard_reader.h"

namespace fedlgc::coordinator {
namespace {

std::map<std::string, double> AsMap(const std::vector<monitoring::Scalar>& v) {
  std::map<std::string, double> out;
  for (const auto& s : v) EXPECT_TRUE(out.emplace(s.tag, s.value).second) << s.tag;
  return out;
}

RoundReport FullRound() {
  RoundReport r;
  r.round = 4;
  r.accuracy = 0.8125;
  r.loss = 0.5;
  r.uplink_bytes = 1000;
  r.raw_uplink_bytes = 240000;
  r.downlink_bytes = 4000;
  r.raw_downlink_bytes = 120000;
  r.seconds = 2.5;
  r.participants = 9;
  r.stragglers = 1;
  r.federated_eval = FederatedEval{10, 9, 1, 0, 900, 0.625, 0.75};
  r.figures["dp_epsilon"] = 1.25;
  r.figures["eval_seconds"] = 0.125;
  return r;
}

TEST(RoundScalars, EveryFigureOfARoundUnderItsTag) {
  EXPECT_EQ(AsMap(RoundScalars(FullRound())),
            (std::map<std::string, double>{{"accuracy/server", 0.8125},
                                           {"loss/server", 0.5},
                                           {"accuracy/federated", 0.75},
                                           {"loss/federated", 0.625},
                                           {"bytes/uplink", 1000},
                                           {"bytes/downlink", 4000},
                                           {"ratio/uplink", 240},
                                           {"ratio/downlink", 30},
                                           {"round/participants", 9},
                                           {"round/stragglers", 1},
                                           {"round/seconds", 2.5},
                                           {"privacy/epsilon", 1.25},
                                           {"mode/eval_seconds", 0.125}}));
}

TEST(RoundScalars, WhatARoundDidNotMeasureIsLeftOut) {
  RoundReport r;  // not evaluated, no bytes, no figures
  r.round = 2;
  r.participants = 3;
  r.federated_eval = FederatedEval{4, 0, 0, 4, 0, -1, -1};  // nobody answered
  r.figures["lgc_stage"] = std::nan("");
  const auto m = AsMap(RoundScalars(r));
  for (const char* absent : {"accuracy/server", "loss/server", "accuracy/federated",
                             "loss/federated", "ratio/uplink", "ratio/downlink",
                             "privacy/epsilon", "mode/lgc_stage"}) {
    EXPECT_EQ(m.count(absent), 0u) << absent;
  }
  EXPECT_EQ(m.at("round/participants"), 3);
  EXPECT_EQ(m.at("bytes/uplink"), 0);
}

TEST(RoundRecorder, WritesEachRecordedRoundToTensorBoard) {
  const std::string dir = ::testing::TempDir() + "/round_recorder_tensorboard";
  std::filesystem::remove_all(dir);
  RecorderParts parts;
  parts.state_dir = dir + "/state";
  auto tb = monitoring::TensorBoardWriter::Open(dir + "/tb");
  ASSERT_TRUE(tb.ok()) << tb.status();
  parts.tensorboard = *std::move(tb);
  {
    RoundRecorder recorder(std::move(parts));
    recorder.Start();
    for (uint64_t round = 1; round <= 3; ++round) {
      RoundReport r = FullRound();
      r.round = round;
      r.accuracy = 0.25 * round;
      recorder.Later(r, {}, false, 0);
    }
  }  // records every round handed over
  const auto files = testing::EventFiles(dir + "/tb");
  ASSERT_EQ(files.size(), 1u);
  auto events = testing::ReadEvents(testing::ReadBytes(files[0]));
  ASSERT_TRUE(events.ok()) << events.status();
  const auto by_step = testing::ScalarsByStep(*events);
  ASSERT_EQ(by_step.size(), 3u);
  for (int64_t round = 1; round <= 3; ++round) {
    EXPECT_EQ(by_step.at(round).size(), 13u);
    EXPECT_EQ(by_step.at(round).at("accuracy/server"), static_cast<float>(0.25 * round));
    EXPECT_EQ(by_step.at(round).at("ratio/uplink"), 240.0f);
  }
}

}  // namespace
}  // namespace fedlgc::coordinator
