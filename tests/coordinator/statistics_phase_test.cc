// The statistics phase's book (coordinator/statistics_phase.h): an answer is taken only
// from a client asked for that round and version, once; estimates that do not add up are
// refused by name; declines are counted apart; the waiting set shrinks as answers come
// and clients are withdrawn; a client that reconnects unanswered is asked again.
#include "coordinator/statistics_phase.h"

#include <cmath>

#include "coordinator/options.h"
#include "gtest/gtest.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::coordinator {
namespace {

protos::StatisticsReport Report(uint64_t round, uint64_t version, std::vector<float> mean,
                                std::vector<float> var, uint64_t examples = 128) {
  protos::StatisticsReport r;
  r.set_round(round);
  r.set_model_version(version);
  r.set_examples(examples);
  r.set_batches(2);
  r.mutable_mean()->Add(mean.begin(), mean.end());
  r.mutable_var()->Add(var.begin(), var.end());
  return r;
}

TEST(StatsBook, TakesOneAnswerFromEachAskedClientAndRefusesWhatDoesNotAddUp) {
  StatsBook book(/*channels=*/2);
  // Nothing asked yet.
  EXPECT_TRUE(absl::IsFailedPrecondition(book.Accept("a", Report(3, 4, {0, 1}, {1, 1}))));
  protos::StatisticsStart ask;
  ask.set_round(3);
  ask.set_model_version(4);
  ask.set_seed(17);
  EXPECT_FALSE(book.AskFor("a").has_value());
  book.Ask(ask, {"a", "b", "c", "d"});
  EXPECT_EQ(book.Waiting(), (std::set<std::string>{"a", "b", "c", "d"}));
  // A client that reconnects before answering is asked again, with the same ask.
  ASSERT_TRUE(book.AskFor("a").has_value());
  EXPECT_EQ(book.AskFor("a")->statistics().SerializeAsString(), ask.SerializeAsString());
  EXPECT_FALSE(book.AskFor("e").has_value()) << "not asked";
  ASSERT_TRUE(book.Accept("a", Report(3, 4, {0.5f, -1}, {2, 3})).ok());
  EXPECT_FALSE(book.AskFor("a").has_value()) << "answered";
  EXPECT_TRUE(absl::IsFailedPrecondition(book.Accept("a", Report(3, 4, {0, 1}, {1, 1}))))
      << "a second answer";
  EXPECT_TRUE(absl::IsFailedPrecondition(book.Accept("e", Report(3, 4, {0, 1}, {1, 1}))))
      << "not asked";
  EXPECT_TRUE(absl::IsFailedPrecondition(book.Accept("b", Report(3, 3, {0, 1}, {1, 1}))))
      << "another version";
  EXPECT_TRUE(absl::IsFailedPrecondition(book.Accept("b", Report(2, 4, {0, 1}, {1, 1}))))
      << "another round";
  for (const protos::StatisticsReport& bad :
       {Report(3, 4, {0}, {1, 1}), Report(3, 4, {0, 1}, {1, -1}), Report(3, 4, {0, NAN}, {1, 1}),
        Report(3, 4, {0, 1}, {1, INFINITY}), Report(3, 4, {0, 1}, {1, 1}, /*examples=*/1)}) {
    EXPECT_TRUE(absl::IsInvalidArgument(book.Accept("b", bad))) << bad.ShortDebugString();
  }
  // A refused answer is no answer: b may still answer.
  ASSERT_TRUE(book.Accept("b", Report(3, 4, {1, 1}, {1, 1}, 64)).ok());
  protos::StatisticsReport declined;
  declined.set_round(3);
  declined.set_model_version(4);
  declined.set_declined("no training data");
  ASSERT_TRUE(book.Accept("c", declined).ok());
  EXPECT_EQ(book.Waiting(), std::set<std::string>{"d"});
  book.Withdraw("d");
  EXPECT_FALSE(book.AskFor("d").has_value()) << "withdrawn";
  book.Withdraw("a");  // answered: stays answered
  EXPECT_TRUE(book.Waiting().empty());
  const StatsBook::Answers answers = book.Take();
  EXPECT_EQ(answers.asked, 4u);
  EXPECT_EQ(answers.declined, 1u);
  ASSERT_EQ(answers.estimates.size(), 2u);
  EXPECT_EQ(answers.estimates.at("a").mean, (std::vector<float>{0.5f, -1}));
  EXPECT_EQ(answers.estimates.at("b").examples, 64u);
  // Taken: the phase is closed, and no one is asked again.
  EXPECT_FALSE(book.AskFor("b").has_value());
  EXPECT_TRUE(absl::IsFailedPrecondition(book.Accept("d", Report(3, 4, {0, 1}, {1, 1}))));
}

// --bn-stats auto: the phase where updates are compressed, the mode commits one model,
// the coordinator is the root and the driver lets clients send statistics.
TEST(StatisticsAutomatic, OnForCompressedUpdatesOfASummedModeAtTheRootOnly) {
  ModeTraits fedavg;
  fedavg.mode = Mode::kFedAvg;
  fedavg.summed = true;
  CoordinatorOptions o;
  o.plan.codec = "topk(ratio=0.01,values=qsgd(bits=8))";
  EXPECT_TRUE(StatisticsAutomatic(o, fedavg, true));
  EXPECT_FALSE(StatisticsAutomatic(o, fedavg, false)) << "DP, secure aggregation, buffered";
  for (const char* lossless : {"fp32", "fp16", "bf16"}) {
    o.plan.codec = lossless;
    EXPECT_FALSE(StatisticsAutomatic(o, fedavg, true)) << lossless;
  }
  o.codec_ladder = {"fp32", "topk(ratio=0.01)"};
  EXPECT_TRUE(StatisticsAutomatic(o, fedavg, true)) << "a ladder compresses some updates";
  o.codec_ladder.clear();
  o.plan.codec = "qsgd(bits=4)";
  EXPECT_TRUE(StatisticsAutomatic(o, fedavg, true));
  o.parent = "127.0.0.1:1";
  EXPECT_FALSE(StatisticsAutomatic(o, fedavg, true)) << "an aggregator commits to its parent";
  o.parent.clear();
  ModeTraits lgc = fedavg;
  lgc.mode = Mode::kLgc;
  o.plan.codec = "lgc()";
  EXPECT_TRUE(StatisticsAutomatic(o, lgc, true));
  ModeTraits sgp;
  sgp.mode = Mode::kSgp;
  o.plan.codec = "qsgd(bits=4)";
  EXPECT_FALSE(StatisticsAutomatic(o, sgp, true)) << "each client keeps a model of its own";
}

}  // namespace
}  // namespace fedlgc::coordinator
