// TensorBoard event files: records byte for byte as the published ones (test vectors of
// TensorBoard's own loader and of a TensorBoard logger), and a writer's file read back by
// the tests' own reader with every CRC checked.
#include "monitoring/tensorboard.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "protos/tensorboard.pb.h"
#include "tests/monitoring/tensorboard_reader.h"

namespace fedlgc::monitoring {
namespace {

using fedlgc::testing::EventFiles;
using fedlgc::testing::ReadBytes;
using fedlgc::testing::ReadEvents;
using fedlgc::testing::ScalarsByStep;

std::string Bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}

std::string FileVersionEvent(double wall_time, const std::string& version) {
  tensorboard::Event e;
  e.set_wall_time(wall_time);
  e.set_file_version(version);
  return e.SerializeAsString();
}

std::string FreshFolder(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/tensorboard_test_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

// The first records of published event files: TensorBoard's event_file_loader test
// (format version 1 and 2) and a logger's test that writes at wall time 256.5.
TEST(TensorBoard, RecordsAreTheBytesOfPublishedEventFiles) {
  const std::string header = Bytes({0x18, 0, 0, 0, 0, 0, 0, 0, 0xa3, 0x7f, 0x4b, 0x22});
  double t1, t2;
  const std::string w1 = Bytes({0x00, 0x00, 0xc0, 0x25, 0xdd, 0x75, 0xd5, 0x41});
  const std::string w2 = Bytes({0x00, 0x00, 0x00, 0x27, 0xe6, 0xb3, 0xd5, 0x41});
  std::memcpy(&t1, w1.data(), 8);
  std::memcpy(&t2, w2.data(), 8);
  EXPECT_EQ(TfRecord(FileVersionEvent(t1, "brain.Event:1")),
            header + "\x09" + w1 + "\x1a\x0d" + "brain.Event:1" + Bytes({0xec, 0xf3, 0x32, 0x8d}));
  EXPECT_EQ(TfRecord(FileVersionEvent(t2, "brain.Event:2")),
            header + "\x09" + w2 + "\x1a\x0d" + "brain.Event:2" + Bytes({0x6a, 0x4d, 0x0b, 0x15}));
  const std::string w3 = Bytes({0, 0, 0, 0, 0, 0x08, 0x70, 0x40});  // 256.5
  EXPECT_EQ(TfRecord(FileVersionEvent(256.5, "brain.Event:2")),
            header + "\x09" + w3 + "\x1a\x0d" + "brain.Event:2" + Bytes({0xbc, 0x98, 0x21, 0x2b}));
  // Its next record: the scalar v/1 = 1.5 at step 1 (25 bytes, the length's CRC 8b f1 08 28).
  tensorboard::Event e;
  e.set_wall_time(256.5);
  e.set_step(1);
  auto* v = e.mutable_summary()->add_value();
  v->set_tag("v/1");
  v->set_simple_value(1.5f);
  const std::string rec = TfRecord(e.SerializeAsString());
  EXPECT_EQ(rec.substr(0, rec.size() - 4),
            Bytes({0x19, 0, 0, 0, 0, 0, 0, 0, 0x8b, 0xf1, 0x08, 0x28}) + "\x09" + w3 +
                Bytes({0x10, 0x01, 0x2a, 0x0c, 0x0a, 0x0a, 0x0a, 0x03}) + "v/1" +
                Bytes({0x15, 0x00, 0x00, 0xc0, 0x3f}));
  EXPECT_EQ(rec.substr(rec.size() - 4, 1), ",");
}

TEST(TensorBoard, AWritersFileReadsBackStepByStep) {
  const std::string dir = FreshFolder("steps");
  auto w = TensorBoardWriter::Open(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<Scalar> one = {{"accuracy/server", 0.25}, {"bytes/uplink", 123456}};
  const std::vector<Scalar> two = {{"accuracy/server", 0.5}, {"round/seconds", 1.75}};
  ASSERT_TRUE((*w)->Write(1, one).ok());
  ASSERT_TRUE((*w)->Write(2, two).ok());
  // Flushed at each Write: readable while the writer is open.
  ASSERT_EQ(EventFiles(dir), std::vector<std::string>{(*w)->path()});
  auto events = ReadEvents(ReadBytes((*w)->path()));
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].file_version(), "brain.Event:2");
  EXPECT_GT((*events)[1].wall_time(), 1.7e9);  // seconds since the epoch
  EXPECT_LE((*events)[1].wall_time(), (*events)[2].wall_time());
  const auto by_step = ScalarsByStep(*events);
  ASSERT_EQ(by_step.size(), 2u);
  EXPECT_EQ(by_step.at(1).at("accuracy/server"), 0.25f);
  EXPECT_EQ(by_step.at(1).at("bytes/uplink"), 123456.0f);
  EXPECT_EQ(by_step.at(2).at("round/seconds"), 1.75f);
  EXPECT_EQ(by_step.at(2).size(), 2u);
}

// The reader's checks are not vacuous: a flipped bit anywhere, or a cut, is an error.
TEST(TensorBoard, TheReaderRefusesDamage) {
  const std::string dir = FreshFolder("damage");
  auto w = TensorBoardWriter::Open(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Write(7, std::vector<Scalar>{{"loss/server", 0.5}}).ok());
  const std::string good = ReadBytes((*w)->path());
  ASSERT_TRUE(ReadEvents(good).ok());
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 0x10;
    EXPECT_FALSE(ReadEvents(bad).ok()) << "byte " << i;
  }
  EXPECT_FALSE(ReadEvents(good.substr(0, good.size() - 1)).ok());
}

TEST(TensorBoard, EachWriterHasAFileOfItsOwn) {
  const std::string dir = FreshFolder("two");
  auto a = TensorBoardWriter::Open(dir);
  auto b = TensorBoardWriter::Open(dir);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->path(), (*b)->path());
  EXPECT_EQ(EventFiles(dir).size(), 2u);
}

TEST(TensorBoard, AFolderThatCannotBeMadeIsAClearError) {
  const std::string dir = FreshFolder("blocked");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/file") << "x";
  auto w = TensorBoardWriter::Open(dir + "/file/tb");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("--tensorboard"), std::string::npos) << w.status();
}

}  // namespace
}  // namespace fedlgc::monitoring
