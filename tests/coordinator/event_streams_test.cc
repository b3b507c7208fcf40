// The book of event streams without gRPC: fake sinks stand for the clients' streams and a
// fake clock for the time. A client's second stream replaces the first, which is closed;
// a push reaches only a registered stream; JobDone reaches everyone connected and everyone
// who opens later, instead of the round's start; nothing pushed while a stream opens
// overtakes its catch-up; LastSeen follows streams and calls; the final model's takers are
// kept.
#include "coordinator/event_streams.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/core/fake_clock.h"

namespace fedlgc::coordinator {
namespace {

// A client's stream that keeps what it is sent; like EventsReactor, it takes nothing once
// closed.
class FakeSink final : public EventSink {
 public:
  void Push(const protos::ServerEvent& event) override {
    absl::MutexLock lock(&mu_);
    if (!closed_) events_.push_back(event);
  }
  void Close(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    if (!closed_) closed_ = status;
  }

  std::vector<protos::ServerEvent> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  std::optional<absl::Status> closed() const {
    absl::MutexLock lock(&mu_);
    return closed_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<protos::ServerEvent> events_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> closed_ ABSL_GUARDED_BY(mu_);
};

protos::ServerEvent ReceiptFor(uint64_t round) {
  protos::ServerEvent e;
  e.mutable_receipt()->set_round(round);
  return e;
}

protos::ServerEvent RoundStartFor(uint64_t round) {
  protos::ServerEvent e;
  e.mutable_round_start()->set_round(round);
  return e;
}

// Opens `sink` for `client` with no catch-up but the round's start, when given.
bool OpenPlain(EventStreams& book, const std::string& client, FakeSink* sink,
               std::optional<protos::ServerEvent> start = std::nullopt) {
  return book.Open(
      client, sink, [] { return std::vector<protos::ServerEvent>{}; }, [&] { return start; });
}

TEST(EventStreams, ASecondStreamReplacesTheFirstWhichIsClosed) {
  core::FakeClock clock;
  EventStreams book(&clock);
  FakeSink first, second;
  EXPECT_FALSE(OpenPlain(book, "a", &first));
  EXPECT_TRUE(OpenPlain(book, "a", &second));  // a resume
  ASSERT_TRUE(first.closed().has_value());
  EXPECT_EQ(first.closed()->code(), absl::StatusCode::kCancelled);
  EXPECT_NE(first.closed()->message().find("replaced by a newer event stream"), std::string::npos);
  EXPECT_FALSE(second.closed().has_value());
  EXPECT_EQ(book.Connected(), std::vector<std::string>{"a"});

  ASSERT_TRUE(book.Push("a", ReceiptFor(3)));
  EXPECT_TRUE(first.events().empty());
  ASSERT_EQ(second.events().size(), 1u);
  EXPECT_EQ(second.events()[0].receipt().round(), 3u);

  // The replaced stream's end does not unregister the newer one.
  book.Unregister("a", &first);
  EXPECT_EQ(book.Connected(), std::vector<std::string>{"a"});
  EXPECT_TRUE(book.Push("a", ReceiptFor(4)));
  book.Unregister("a", &second);
  EXPECT_TRUE(book.Connected().empty());
}

TEST(EventStreams, APushToAClientWithoutAStreamIsRefused) {
  core::FakeClock clock;
  EventStreams book(&clock);
  EXPECT_FALSE(book.Push("ghost", ReceiptFor(1)));
  FakeSink a;
  OpenPlain(book, "a", &a);
  EXPECT_FALSE(book.Push("b", ReceiptFor(1)));
  EXPECT_TRUE(book.Push("a", ReceiptFor(1)));
  book.Unregister("a", &a);
  EXPECT_FALSE(book.Push("a", ReceiptFor(2)));
  EXPECT_EQ(a.events().size(), 1u);
}

TEST(EventStreams, AnOpenedStreamGetsItsReceiptsThenTheRoundsStart) {
  core::FakeClock clock;
  EventStreams book(&clock);
  FakeSink a, b;
  book.Open(
      "a", &a,
      [] {
        return std::vector<protos::ServerEvent>{ReceiptFor(1), ReceiptFor(2)};
      },
      [] { return std::optional<protos::ServerEvent>(RoundStartFor(3)); });
  const auto got = a.events();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].receipt().round(), 1u);
  EXPECT_EQ(got[1].receipt().round(), 2u);
  EXPECT_EQ(got[2].round_start().round(), 3u);
  OpenPlain(book, "b", &b);  // not in the round
  EXPECT_TRUE(b.events().empty());
}

TEST(EventStreams, JobDoneReachesEveryoneConnectedAndLaterOpenersInsteadOfARoundStart) {
  core::FakeClock clock;
  EventStreams book(&clock);
  FakeSink a, b, late;
  OpenPlain(book, "a", &a);
  OpenPlain(book, "b", &b);
  book.BroadcastDone(/*rounds=*/7, /*accuracy=*/0.5f, /*model_version=*/42);
  for (const FakeSink* s : {&a, &b}) {
    ASSERT_EQ(s->events().size(), 1u);
    const protos::JobDone& done = s->events()[0].done();
    EXPECT_EQ(done.rounds(), 7u);
    EXPECT_FLOAT_EQ(done.final_accuracy(), 0.5f);
    EXPECT_EQ(done.model_version(), 42u);
  }
  // A later opener gets its receipts, then JobDone; the round's start is not even made.
  int starts_made = 0;
  book.Open(
      "late", &late, [] { return std::vector<protos::ServerEvent>{ReceiptFor(6)}; },
      [&] {
        ++starts_made;
        return std::optional<protos::ServerEvent>(RoundStartFor(8));
      });
  EXPECT_EQ(starts_made, 0);
  const auto got = late.events();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].receipt().round(), 6u);
  ASSERT_TRUE(got[1].has_done());
  EXPECT_EQ(got[1].done().model_version(), 42u);
}

TEST(EventStreams, NothingPushedWhileAStreamOpensOvertakesItsCatchUp) {
  core::FakeClock clock;
  EventStreams book(&clock);
  FakeSink a;
  // The catch-up waits until another thread is about to push to the client, whose push
  // must then wait for the catch-up to be queued.
  absl::Mutex mu;
  bool catching_up = false, pushing = false;
  bool pushed = false;
  std::thread pusher([&] {
    {
      absl::MutexLock lock(&mu);
      if (!mu.AwaitWithTimeout(absl::Condition(&catching_up), absl::Seconds(30))) return;
      pushing = true;
    }
    pushed = book.Push("a", ReceiptFor(99));
  });
  book.Open(
      "a", &a,
      [&] {
        {
          absl::MutexLock lock(&mu);
          catching_up = true;
          EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&pushing), absl::Seconds(30)));
        }
        std::vector<protos::ServerEvent> receipts;
        for (uint64_t r = 1; r <= 50; ++r) receipts.push_back(ReceiptFor(r));
        return receipts;
      },
      [] { return std::optional<protos::ServerEvent>(RoundStartFor(51)); });
  pusher.join();
  EXPECT_TRUE(pushed);
  const auto got = a.events();
  ASSERT_EQ(got.size(), 52u);
  for (uint64_t r = 1; r <= 50; ++r) EXPECT_EQ(got[r - 1].receipt().round(), r);
  EXPECT_EQ(got[50].round_start().round(), 51u);
  EXPECT_EQ(got[51].receipt().round(), 99u);
}

TEST(EventStreams, LastSeenIsNowWhileAStreamIsOpenElseTheLastCall) {
  core::FakeClock clock;
  EventStreams book(&clock);
  EXPECT_EQ(book.LastSeen("a"), Clock::time_point());  // never
  const auto t0 = clock.Now();
  book.Touch("a");
  clock.Advance(std::chrono::seconds(5));
  EXPECT_EQ(book.LastSeen("a"), t0);
  book.Touch("a");
  EXPECT_EQ(book.LastSeen("a"), t0 + std::chrono::seconds(5));

  FakeSink s;
  OpenPlain(book, "a", &s);
  clock.Advance(std::chrono::seconds(60));
  EXPECT_EQ(book.LastSeen("a"), clock.Now());
  book.Unregister("a", &s);
  // The stream's end is not a call: the last one counts again.
  EXPECT_EQ(book.LastSeen("a"), t0 + std::chrono::seconds(5));
  EXPECT_EQ(book.LastSeen("b"), Clock::time_point());
}

TEST(EventStreams, FinalModelTakersAreKeptWithOrWithoutAStream) {
  core::FakeClock clock;
  EventStreams book(&clock);
  EXPECT_TRUE(book.FinalModelTakers().empty());
  book.AddFinalModelTaker("b");
  book.AddFinalModelTaker("a");
  book.AddFinalModelTaker("b");
  FakeSink a;
  OpenPlain(book, "a", &a);
  book.Unregister("a", &a);
  EXPECT_EQ(book.FinalModelTakers(), (std::set<std::string>{"a", "b"}));
}

}  // namespace
}  // namespace fedlgc::coordinator
