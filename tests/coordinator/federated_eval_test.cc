// Federated evaluation's book (coordinator/federated_eval.h): answers weighed by examples
// under the weight cap, declined and missing clients counted apart, reports that do not
// add up refused by name, a client answering once and only when asked, and the wait for
// answers ending when every client answered, the rest vanished, or the deadline passed.
#include "coordinator/federated_eval.h"

#include <cmath>
#include <thread>

#include "gtest/gtest.h"
#include "protos/fedlgc.pb.h"
#include "tests/core/fake_clock.h"

namespace fedlgc::coordinator {
namespace {

protos::EvalReport Report(uint64_t round, uint64_t examples, double loss,
                          std::vector<uint64_t> class_examples, std::vector<uint64_t> correct) {
  protos::EvalReport r;
  r.set_round(round);
  r.set_model_version(round);
  r.set_examples(examples);
  r.set_loss(loss);
  uint64_t total = 0;
  for (size_t i = 0; i < class_examples.size(); ++i) {
    r.add_class_examples(class_examples[i]);
    r.add_class_correct(correct[i]);
    total += correct[i];
  }
  r.set_correct(total);
  r.set_classified(!class_examples.empty());
  return r;
}

// A report of the accuracy alone (a Python evaluate() that returns "accuracy").
protos::EvalReport AccuracyOnly(uint64_t round, uint64_t examples, uint64_t correct) {
  protos::EvalReport r;
  r.set_round(round);
  r.set_model_version(round);
  r.set_examples(examples);
  r.set_loss(0.5);
  r.set_correct(correct);
  r.set_classified(true);
  return r;
}

const auto kNobodyGone = [](const std::set<std::string>&) { return std::set<std::string>(); };

TEST(EvalBook, AnswersAreWeighedByExamplesUnderTheCap) {
  core::FakeClock clock;
  EvalBook book(/*max_client_weight=*/0.5, &clock);
  book.Ask(3, 3, {"a", "b", "c", "d"}, clock.Now() + std::chrono::seconds(60));
  // a: 100 examples, 90% right; b: 300, 60%; c declines; d never answers (it vanished).
  ASSERT_TRUE(book.Accept("a", Report(3, 100, 0.5, {50, 50}, {45, 45})).ok());
  ASSERT_TRUE(book.Accept("b", Report(3, 300, 1.0, {100, 200}, {60, 120})).ok());
  protos::EvalReport declined;
  declined.set_round(3);
  declined.set_model_version(3);
  declined.set_declined("no held-out data");
  ASSERT_TRUE(book.Accept("c", declined).ok());
  auto s = book.Settle(3, [](const std::set<std::string>& waiting) { return waiting; });
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->total.asked, 4);
  EXPECT_EQ(s->total.clients, 2);
  EXPECT_EQ(s->total.declined, 1);
  EXPECT_EQ(s->total.missing, 1);
  EXPECT_EQ(s->total.examples, 400u);
  // b's 300 of 400 is capped at half the weight: equal weights.
  EXPECT_NEAR(s->total.accuracy, (0.9 + 0.6) / 2, 1e-12);
  EXPECT_NEAR(s->total.loss, (0.5 + 1.0) / 2, 1e-12);
  EXPECT_EQ(s->class_examples, (std::vector<uint64_t>{150, 250}));
  // Class 0 weighed as the total: each client's counts over its examples, equal weights.
  EXPECT_NEAR(s->class_accuracy[0], (45.0 / 100 + 60.0 / 300) / (50.0 / 100 + 100.0 / 300), 1e-12);
  EXPECT_EQ(s->accuracy.at("a"), 0.9);
  EXPECT_FALSE(book.Asked(3)) << "a settled round is forgotten";
  // Without the cap's bite (cap 1): weighed by examples.
  EvalBook free(1.0, &clock);
  free.Ask(1, 1, {"a", "b"}, clock.Now() + std::chrono::seconds(60));
  ASSERT_TRUE(free.Accept("a", Report(1, 100, 0.5, {100}, {90})).ok());
  ASSERT_TRUE(free.Accept("b", Report(1, 300, 1.0, {300}, {180})).ok());
  auto w = free.Settle(1, kNobodyGone);
  ASSERT_TRUE(w.has_value());
  EXPECT_NEAR(w->total.accuracy, (90.0 + 180.0) / 400, 1e-12);
  // Answers of an accuracy without per-class counts make an accuracy too.
  free.Ask(2, 2, {"a", "b"}, clock.Now() + std::chrono::seconds(60));
  ASSERT_TRUE(free.Accept("a", AccuracyOnly(2, 100, 80)).ok());
  ASSERT_TRUE(free.Accept("b", AccuracyOnly(2, 100, 60)).ok());
  auto acc = free.Settle(2, kNobodyGone);
  ASSERT_TRUE(acc.has_value());
  EXPECT_NEAR(acc->total.accuracy, 0.7, 1e-12);
  EXPECT_EQ(acc->accuracy.at("b"), 0.6);
  // A client that claims ten times the others' examples moves the per-class accuracy by
  // its capped share, as the total.
  EvalBook capped(0.5, &clock);
  capped.Ask(3, 3, {"a", "b", "liar"}, clock.Now() + std::chrono::seconds(60));
  ASSERT_TRUE(capped.Accept("a", Report(3, 100, 0.5, {100}, {100})).ok());
  ASSERT_TRUE(capped.Accept("b", Report(3, 100, 0.5, {100}, {100})).ok());
  ASSERT_TRUE(capped.Accept("liar", Report(3, 2000, 9.0, {2000}, {0})).ok());
  auto c = capped.Settle(3, kNobodyGone);
  ASSERT_TRUE(c.has_value());
  EXPECT_NEAR(c->total.accuracy, 0.5, 1e-9);  // the liar's weight capped at half
  EXPECT_NEAR(c->class_accuracy[0], 0.5, 1e-9);
}

TEST(EvalBook, ReportsThatDoNotAddUpOrWereNotAskedAreRefused) {
  core::FakeClock clock;
  EvalBook book(0.25, &clock);
  book.Ask(5, 5, {"a"}, clock.Now() + std::chrono::seconds(60));
  auto refused = [&](const std::string& client, const protos::EvalReport& r, absl::StatusCode code,
                     const std::string& says) {
    const absl::Status st = book.Accept(client, r);
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_NE(st.message().find(says), std::string::npos) << st;
  };
  protos::EvalReport r = Report(5, 10, 0.3, {5, 5}, {5, 4});
  r.set_correct(11);
  refused("a", r, absl::StatusCode::kInvalidArgument, "11 correct answers of 10");
  r = Report(5, 10, 0.3, {5, 5}, {6, 4});
  refused("a", r, absl::StatusCode::kInvalidArgument, "class 0: 6 correct of 5");
  r = Report(5, 12, 0.3, {5, 5}, {5, 4});
  refused("a", r, absl::StatusCode::kInvalidArgument, "add up to 10 examples");
  r = Report(5, 10, std::nan(""), {}, {});
  refused("a", r, absl::StatusCode::kInvalidArgument, "loss");
  r = Report(5, 0, 0.3, {}, {});
  refused("a", r, absl::StatusCode::kInvalidArgument, "0 examples");
  r = Report(5, uint64_t{1} << 41, 0.3, {}, {});
  refused("a", r, absl::StatusCode::kInvalidArgument, "examples");
  // Per-class counts past the total, which a sum could wrap around to agree with it.
  r = Report(5, 10, 0.3, {~uint64_t{0}, 11}, {0, 0});
  refused("a", r, absl::StatusCode::kInvalidArgument, "class 0");
  r = Report(5, 10, 0.3, {}, {});
  r.set_correct(3);  // right answers for float targets
  refused("a", r, absl::StatusCode::kInvalidArgument, "float targets");
  refused("z", Report(5, 10, 0.3, {}, {}), absl::StatusCode::kFailedPrecondition, "was not asked");
  refused("a", Report(4, 10, 0.3, {}, {}), absl::StatusCode::kFailedPrecondition, "was not asked");
  protos::EvalReport stale = Report(5, 10, 0.3, {}, {});
  stale.set_model_version(4);
  refused("a", stale, absl::StatusCode::kFailedPrecondition, "version 5, not 4");
  ASSERT_TRUE(book.Accept("a", Report(5, 10, 0.3, {}, {})).ok());
  refused("a", Report(5, 10, 0.3, {}, {}), absl::StatusCode::kFailedPrecondition, "already");
  // Float targets: a loss and no accuracy.
  auto s = book.Settle(5, kNobodyGone);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->total.clients, 1);
  EXPECT_TRUE(std::isnan(s->total.accuracy));
  EXPECT_NEAR(s->total.loss, 0.3, 1e-12);
}

TEST(EvalBook, AnAnswerBeforeTheRequestIsSentCountsAndAClientGoneIsWithdrawn) {
  core::FakeClock clock;
  EvalBook book(1.0, &clock);
  // The coordinator books the round before it sends EvalStart: an answer that comes back
  // before the last request has left finds it asked.
  book.Ask(4, 4, {"a", "b", "c"}, clock.Now() + std::chrono::seconds(60));
  ASSERT_TRUE(book.Accept("a", Report(4, 10, 0.1, {10}, {7})).ok());
  book.Withdraw(4, "c");  // its event stream had closed: never asked
  book.Withdraw(4, "a");  // answered already: stays
  ASSERT_TRUE(book.Accept("b", Report(4, 10, 0.1, {10}, {9})).ok());
  EXPECT_EQ(book.Accept("c", Report(4, 10, 0.1, {10}, {9})).code(),
            absl::StatusCode::kFailedPrecondition);
  auto s = book.Settle(4, kNobodyGone);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->total.asked, 2);
  EXPECT_EQ(s->total.clients, 2);
  EXPECT_EQ(s->total.missing, 0);
}

TEST(EvalBook, TheWaitEndsWithTheLastAnswerOrAtTheDeadline) {
  // On the process's clock: the last answer, from another thread, ends the wait at once.
  EvalBook book(1.0, core::Clock::Real());
  book.Ask(2, 2, {"a", "b"}, core::Clock::Real()->Now() + std::chrono::seconds(60));
  ASSERT_TRUE(book.Accept("a", Report(2, 10, 0.1, {10}, {9})).ok());
  const auto t0 = std::chrono::steady_clock::now();
  std::thread answer([&] {
    // sleep: the recorder is waiting when the last answer comes
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(book.Accept("b", Report(2, 10, 0.2, {10}, {8})).ok());
  });
  auto s = book.Settle(2, kNobodyGone);
  answer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->total.clients, 2);
  EXPECT_EQ(s->total.missing, 0);
  // Nobody answers: the deadline ends the wait with every client missing.
  core::FakeClock clock;
  EvalBook fake(1.0, &clock);
  const auto deadline = clock.Now() + std::chrono::seconds(30);
  fake.Ask(3, 3, {"a", "b"}, deadline);
  auto late = fake.Settle(3, kNobodyGone);
  ASSERT_TRUE(late.has_value());
  EXPECT_GE(clock.Now(), deadline);
  EXPECT_EQ(late->total.missing, 2);
  EXPECT_EQ(late->total.clients, 0);
  EXPECT_FALSE(fake.Settle(9, kNobodyGone).has_value()) << "never asked";
}

}  // namespace
}  // namespace fedlgc::coordinator
