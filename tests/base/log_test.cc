// The leveled logger: the line's shape, levels that drop what is below them, the names
// --log-level takes, and whole lines from many threads.
#include "base/log.h"

#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace fedlgc::log {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetSinkForTest([this](Level level, std::string_view line) {
      levels_.push_back(level);
      lines_.emplace_back(line);
    });
  }
  void TearDown() override {
    SetSinkForTest(nullptr);
    SetLevel(Level::kInfo);
  }
  std::vector<Level> levels_;
  std::vector<std::string> lines_;
};

TEST_F(LogTest, OneLineWithLevelTimeAndWho) {
  Warning("coordinator", "round %d: %s sender(s) gone", 7, "2");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_TRUE(std::regex_match(
      lines_[0], std::regex(R"(W \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z coordinator: round 7: )"
                            R"(2 sender\(s\) gone\n)")))
      << lines_[0];
  EXPECT_EQ(levels_[0], Level::kWarning);
  Info("", "no speaker\n");  // a message's own newline is not doubled
  ASSERT_EQ(lines_.size(), 2u);
  EXPECT_EQ(lines_[1].substr(0, 2), "I ");
  const std::string tail = "Z no speaker\n";
  ASSERT_GE(lines_[1].size(), tail.size());
  EXPECT_EQ(lines_[1].substr(lines_[1].size() - tail.size()), tail);
}

TEST_F(LogTest, LevelsBelowTheProcessLevelAreDropped) {
  EXPECT_EQ(GetLevel(), Level::kInfo);
  Debug("x", "hidden");
  Info("x", "shown");
  SetLevel(Level::kError);
  Info("x", "hidden");
  Warning("x", "hidden");
  Error("x", "shown");
  SetLevel(Level::kDebug);
  Debug("x", "shown");
  ASSERT_EQ(levels_.size(), 3u);
  EXPECT_EQ(levels_[0], Level::kInfo);
  EXPECT_EQ(levels_[1], Level::kError);
  EXPECT_EQ(levels_[2], Level::kDebug);
  for (const std::string& line : lines_) EXPECT_NE(line.find("x: shown"), std::string::npos);
}

TEST_F(LogTest, LevelNames) {
  for (Level l : {Level::kDebug, Level::kInfo, Level::kWarning, Level::kError}) {
    absl::StatusOr<Level> back = ParseLevel(LevelName(l));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, l);
  }
  absl::StatusOr<Level> bad = ParseLevel("verbose");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("debug, info, warning or error"), std::string::npos);
}

TEST_F(LogTest, ThreadsWriteWholeLines) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 200; ++i) Info("thread", "%d/%d %s", t, i, std::string(64, 'a' + t));
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(lines_.size(), 800u);
  const std::regex whole(R"(I \S+ thread: (\d)/\d+ ([a-d]){64}\n)");
  std::vector<int> per_thread(4);
  for (const std::string& line : lines_) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, whole)) << line;
    const int t = m[1].str()[0] - '0';
    EXPECT_EQ(m[2].str()[0], 'a' + t);
    ++per_thread[t];
  }
  EXPECT_EQ(per_thread, std::vector<int>(4, 200));
}

}  // namespace
}  // namespace fedlgc::log
