// Tests for the data readers (core/npz.h, core/csv.h, core/image_folder.h) and
// LoadDataset: what numpy writes reads back exactly, and every kind of bad file is refused
// with a message that names the file and what is wrong.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "base/file.h"
#include "core/csv.h"
#include "core/dataset.h"
#include "core/image_folder.h"
#include "core/npz.h"
#include "core/partition.h"
#include "gtest/gtest.h"

namespace fedlgc::core {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const std::string dir = (fs::temp_directory_path() / ("fedlgc_data_test_" + name)).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

template <typename T>
NpyArray Array(NpyType type, std::vector<int64_t> shape, const std::vector<T>& values) {
  NpyArray a;
  a.type = type;
  a.shape = std::move(shape);
  a.data.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  return a;
}

DataOptions Npz(const std::string& path) {
  DataOptions o;
  o.spec = "npz:" + path;
  return o;
}

testing::AssertionResult FailsWith(const absl::Status& st, std::initializer_list<std::string> parts) {
  if (st.ok()) return testing::AssertionFailure() << "succeeded";
  const std::string msg(st.message());
  for (const std::string& p : parts) {
    if (msg.find(p) == std::string::npos) {
      return testing::AssertionFailure() << "'" << msg << "' lacks '" << p << "'";
    }
  }
  return testing::AssertionSuccess();
}

TEST(Npz, WrittenArraysReadBackAsADataset) {
  const std::string dir = TempDir("roundtrip");
  std::vector<uint8_t> pixels(6 * 2 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7);
  const std::vector<int64_t> labels{0, 2, 1, 2, 0, 4};
  ASSERT_TRUE(WriteNpz(dir + "/d.npz", {{"x", Array(NpyType::kU8, {6, 2, 3}, pixels)},
                                        {"y", Array(NpyType::kI64, {6}, labels)}})
                  .ok());
  auto d = LoadDataset(Npz(dir + "/d.npz"), true);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 6u);
  EXPECT_EQ(d->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(d->classes, 5u);  // the largest label + 1
  EXPECT_EQ(d->labels, (std::vector<int32_t>{0, 2, 1, 2, 0, 4}));
  for (size_t i = 0; i < pixels.size(); ++i) EXPECT_FLOAT_EQ(d->x[i], pixels[i] / 255.0f);
  auto limited = LoadDataset(Npz(dir + "/d.npz"), true, 4);
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->size(), 4u);
  EXPECT_EQ(limited->classes, 3u);
}

TEST(Npz, FloatTargetsAndTheTargetsOption) {
  const std::string dir = TempDir("targets");
  const std::vector<float> x{1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(WriteNpz(dir + "/r.npz", {{"x", Array(NpyType::kF32, {3, 2}, x)},
                                        {"y", Array(NpyType::kF64, {3, 1},
                                                    std::vector<double>{0.5, -1, 2})}})
                  .ok());
  auto d = LoadDataset(Npz(dir + "/r.npz"), true);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->classification());
  EXPECT_EQ(d->target_shape, (std::vector<int64_t>{1}));
  EXPECT_EQ(d->targets, (std::vector<float>{0.5f, -1, 2}));
  DataOptions as_classes = Npz(dir + "/r.npz");
  as_classes.targets = "classes";
  EXPECT_TRUE(FailsWith(LoadDataset(as_classes, true).status(), {"y[0]", "0.5", "whole number"}));
  // Integer labels read as values.
  ASSERT_TRUE(WriteNpz(dir + "/i.npz", {{"x", Array(NpyType::kF32, {3, 2}, x)},
                                        {"y", Array(NpyType::kI32, {3}, std::vector<int32_t>{3, 1, 2})}})
                  .ok());
  DataOptions as_values = Npz(dir + "/i.npz");
  as_values.targets = "values";
  auto v = LoadDataset(as_values, true);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->targets, (std::vector<float>{3, 1, 2}));
}

TEST(Npz, BadArchivesAreRefusedNamingTheFile) {
  const std::string dir = TempDir("bad");
  const std::vector<float> x{1, 2, 3, 4};
  const std::string good = dir + "/good.npz";
  ASSERT_TRUE(WriteNpz(good, {{"x", Array(NpyType::kF32, {2, 2}, x)},
                              {"y", Array(NpyType::kI64, {2}, std::vector<int64_t>{0, 1})}})
                  .ok());
  const std::string bytes = ReadFile(good).value();
  // Truncated anywhere: refused, never read in part.
  for (size_t cut : {size_t{10}, bytes.size() / 2, bytes.size() - 30, bytes.size() - 1}) {
    const std::string path = dir + "/cut.npz";
    ASSERT_TRUE(AtomicWriteFile(path, bytes.substr(0, cut)).ok());
    EXPECT_TRUE(FailsWith(LoadDataset(Npz(path), true).status(), {path})) << cut;
  }
  EXPECT_TRUE(FailsWith(LoadDataset(Npz(dir + "/none.npz"), true).status(), {"none.npz"}));
  ASSERT_TRUE(AtomicWriteFile(dir + "/text.npz", "x,y\n1,2\n").ok());
  EXPECT_TRUE(FailsWith(LoadDataset(Npz(dir + "/text.npz"), true).status(),
                        {"text.npz", "not an .npz"}));
  // Missing arrays: the message lists what is there.
  ASSERT_TRUE(WriteNpz(dir + "/other.npz", {{"features", Array(NpyType::kF32, {2, 2}, x)}}).ok());
  EXPECT_TRUE(FailsWith(LoadDataset(Npz(dir + "/other.npz"), true).status(),
                        {"no arrays x and y", "features (2, 2)"}));
  // NaN features, negative labels, rows that do not agree, integer inputs.
  std::vector<float> nan = x;
  nan[3] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(WriteNpz(dir + "/nan.npz", {{"x", Array(NpyType::kF32, {2, 2}, nan)},
                                          {"y", Array(NpyType::kI64, {2}, std::vector<int64_t>{0, 1})}})
                  .ok());
  EXPECT_TRUE(FailsWith(LoadDataset(Npz(dir + "/nan.npz"), true).status(),
                        {"nan.npz", "example 1", "finite"}));
  ASSERT_TRUE(WriteNpz(dir + "/neg.npz", {{"x", Array(NpyType::kF32, {2, 2}, x)},
                                          {"y", Array(NpyType::kI64, {2}, std::vector<int64_t>{0, -3})}})
                  .ok());
  EXPECT_TRUE(FailsWith(LoadDataset(Npz(dir + "/neg.npz"), true).status(), {"y[1]", "-3"}));
  ASSERT_TRUE(WriteNpz(dir + "/rows.npz", {{"x", Array(NpyType::kF32, {2, 2}, x)},
                                           {"y", Array(NpyType::kI64, {3}, std::vector<int64_t>{0, 1, 1})}})
                  .ok());
  EXPECT_TRUE(FailsWith(LoadDataset(Npz(dir + "/rows.npz"), true).status(),
                        {"x has 2 rows", "y has 3"}));
  ASSERT_TRUE(WriteNpz(dir + "/int.npz", {{"x", Array(NpyType::kI64, {2, 1}, std::vector<int64_t>{1, 2})},
                                          {"y", Array(NpyType::kI64, {2}, std::vector<int64_t>{0, 1})}})
                  .ok());
  // Integer inputs are token ids: kept as integers (uint8 stays images, divided by 255).
  auto ids = LoadDataset(Npz(dir + "/int.npz"), true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_TRUE(ids->integer_inputs);
  EXPECT_EQ(ids->ids, (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(ids->x.empty());
  EXPECT_EQ(Subset(*ids, std::vector<uint32_t>{1}).ids, (std::vector<int64_t>{2}));
  DataOptions as_float = Npz(dir + "/int.npz");
  as_float.inputs = "float";
  auto floats = LoadDataset(as_float, true);
  ASSERT_TRUE(floats.ok()) << floats.status();
  EXPECT_FALSE(floats->integer_inputs);
  EXPECT_EQ(floats->x, (std::vector<float>{1, 2}));
  // --inputs ids of floats: whole numbers only.
  DataOptions forced = Npz(good);
  forced.inputs = "ids";
  auto whole = LoadDataset(forced, true);  // good.npz: 1, 2, 3, 4
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->ids, (std::vector<int64_t>{1, 2, 3, 4}));
  ASSERT_TRUE(WriteNpz(dir + "/frac.npz",
                       {{"x", Array(NpyType::kF32, {2, 2}, std::vector<float>{1, 2.5f, 3, 4})},
                        {"y", Array(NpyType::kI64, {2}, std::vector<int64_t>{0, 1})}})
                  .ok());
  forced.spec = "npz:" + dir + "/frac.npz";
  EXPECT_TRUE(FailsWith(LoadDataset(forced, true).status(), {"example 0", "2.5", "whole numbers"}));
  forced.spec = "fashion-mnist";
  EXPECT_TRUE(FailsWith(LoadDataset(forced, true).status(), {"--inputs ids", "npz or csv"}));
}

TEST(Npy, HeaderLiesAreCaughtBeforeAnyAllocation) {
  NpyArray a = Array(NpyType::kF32, {2, 2}, std::vector<float>{1, 2, 3, 4});
  std::string bytes = NpyBytes(a);
  ASSERT_TRUE(ParseNpy(bytes, "ok").ok());
  const size_t at = bytes.find("(2, 2)");
  std::string huge = bytes;
  huge.replace(at, 6, "(999999999999, 9)");
  // The header grew: fix its length field so only the shape lies.
  const uint16_t len = static_cast<uint16_t>(huge.size() - bytes.size() + (bytes[8] & 0xFF) +
                                             ((bytes[9] & 0xFF) << 8));
  huge[8] = static_cast<char>(len & 0xFF);
  huge[9] = static_cast<char>(len >> 8);
  EXPECT_TRUE(FailsWith(ParseNpy(huge, "huge").status(), {"huge", "truncated"}));
  std::string structured = bytes;
  structured.replace(structured.find("'<f4'"), 5, "'|V8'");
  EXPECT_TRUE(FailsWith(ParseNpy(structured, "s").status(), {"dtype"}));
}

#ifdef FEDLGC_TEST_MODELS
// Files numpy itself wrote (tests/core/make_test_models.py): plain and deflated archives,
// Keras's split names, big-endian arrays, and a Fortran-order array.
class NumpyFiles : public testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(Path("done"))) GTEST_SKIP() << "no python3-torch/numpy: fixtures not made";
  }
  static std::string Path(const std::string& name) {
    return std::string(FEDLGC_TEST_MODELS) + "/" + name;
  }
};

TEST_F(NumpyFiles, PlainAndDeflatedArchivesReadAsNumpyWroteThem) {
  auto plain = LoadDataset(Npz(Path("numpy_plain.npz")), true);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->size(), 50u);
  EXPECT_EQ(plain->shape, (std::vector<int64_t>{8, 8}));
  auto train = LoadDataset(Npz(Path("numpy_deflated.npz")), true);
  auto test = LoadDataset(Npz(Path("numpy_deflated.npz")), false);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(train->size(), 50u);
  EXPECT_EQ(test->size(), 10u);
  // The same examples through uint8, float32 and float64 files.
  EXPECT_EQ(train->labels, plain->labels);
  for (size_t i = 0; i < train->x.size(); ++i) ASSERT_FLOAT_EQ(train->x[i], plain->x[i]);
  for (size_t i = 0; i < test->x.size(); ++i) ASSERT_FLOAT_EQ(test->x[i], plain->x[i]);
  auto big = LoadDataset(Npz(Path("big_endian.npz")), true);
  ASSERT_TRUE(big.ok()) << big.status();
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(big->x[i], static_cast<float>(i));
  EXPECT_EQ(big->targets, (std::vector<float>{0.5f, 1.5f, 2.5f}));
  EXPECT_TRUE(FailsWith(LoadDataset(Npz(Path("fortran.npz")), true).status(), {"Fortran"}));
  EXPECT_TRUE(FailsWith(LoadDataset(Npz(Path("x.npy")), true).status(), {"x.npy", "not an .npz"}));
}
#endif

CsvTable MustParse(std::string_view text, std::string_view label = "label") {
  auto t = ParseCsv(text, "t.csv", label);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : CsvTable();
}

TEST(Csv, ReadsANamedLabelColumnAndTheRestAsFeatures) {
  const CsvTable t = MustParse("a, label ,\"b, quoted\"\r\n1,0,2.5\n\n-3e2,1,+4\n");
  EXPECT_EQ(t.rows, 2u);
  EXPECT_EQ(t.feature_names, (std::vector<std::string>{"a", "b, quoted"}));
  EXPECT_EQ(t.features, (std::vector<float>{1, 2.5f, -300, 4}));
  EXPECT_EQ(t.labels, (std::vector<double>{0, 1}));
  EXPECT_EQ(MustParse("x,y\n1,2\n3,4", "y").labels, (std::vector<double>{2, 4}));
}

TEST(Csv, BadTablesNameTheLineAndColumn) {
  EXPECT_TRUE(FailsWith(ParseCsv("a,b\n1,2\n", "t.csv", "label").status(),
                        {"t.csv", "no column 'label'", "columns: a, b", "--label-column"}));
  EXPECT_TRUE(FailsWith(ParseCsv("a,label\n1,2\n3\n", "t.csv", "label").status(),
                        {"t.csv: line 3", "1 fields, the header has 2"}));
  EXPECT_TRUE(FailsWith(ParseCsv("a,label\n1,2\nNaN,1\n", "t.csv", "label").status(),
                        {"line 3", "column 'a'", "not finite"}));
  EXPECT_TRUE(FailsWith(ParseCsv("a,label\n1,cat\n", "t.csv", "label").status(),
                        {"line 2", "holds text ('cat')", "class indices"}));
  EXPECT_TRUE(FailsWith(ParseCsv("a,label\n1,2\n,3\n", "t.csv", "label").status(),
                        {"line 3", "an empty field"}));
  EXPECT_TRUE(FailsWith(ParseCsv("a,label\n", "t.csv", "label").status(), {"no rows"}));
  EXPECT_TRUE(FailsWith(ParseCsv("", "t.csv", "label").status(), {"empty"}));
  EXPECT_TRUE(FailsWith(ParseCsv("a,label\n\"1,2\n", "t.csv", "label").status(), {"quoted"}));
}

TEST(Csv, LabelsAreClassesOrTargets) {
  const std::string dir = TempDir("csv");
  ASSERT_TRUE(AtomicWriteFile(dir + "/c.csv", "f1,f2,label\n0.1,0.2,1\n0.3,0.4,0\n0.5,0.6,2\n").ok());
  ASSERT_TRUE(AtomicWriteFile(dir + "/r.csv", "f1,f2,label\n0.1,0.2,1.5\n0.3,0.4,-2\n").ok());
  DataOptions o;
  o.spec = "csv:" + dir + "/c.csv";
  auto c = LoadDataset(o, true);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->classes, 3u);
  EXPECT_EQ(c->shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(c->labels, (std::vector<int32_t>{1, 0, 2}));
  o.targets = "values";
  auto v = LoadDataset(o, true);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->classification());
  EXPECT_EQ(v->targets, (std::vector<float>{1, 0, 2}));
  o.spec = "csv:" + dir + "/r.csv";
  o.targets = "auto";
  auto r = LoadDataset(o, true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->targets, (std::vector<float>{1.5f, -2}));
  EXPECT_TRUE(r->target_shape.empty());
  o.targets = "classes";
  EXPECT_TRUE(FailsWith(LoadDataset(o, true).status(), {"r.csv", "row 1", "whole number"}));
  // A split by class needs classes.
  EXPECT_TRUE(CheckPartition(PartitionSpec::Parse("iid").value(), false, "r").ok());
  EXPECT_TRUE(FailsWith(CheckPartition(PartitionSpec::Parse("labels(2)").value(), false, "csv:r"),
                        {"csv:r", "float targets", "iid"}));
  const auto shards = Partition({}, 5, 0, 2, PartitionSpec::Parse("dirichlet(0.1)").value(), 1)
                         .value();
  EXPECT_EQ(shards[0].size() + shards[1].size(), 5u);
}

// A PNG or JPEG of w x h pixels with `channels`, each pixel (x + y * w + salt) % 256 in
// every channel.
std::string WriteImage(const std::string& path, int w, int h, int channels, int salt, bool jpeg) {
  DecodedImage img;
  img.width = w;
  img.height = h;
  img.channels = channels;
  img.pixels.resize(static_cast<size_t>(w) * h * channels);
  for (size_t i = 0; i < img.pixels.size(); ++i) {
    img.pixels[i] = static_cast<uint8_t>((i / channels + salt) % 256);
  }
  auto bytes = EncodeImage(img, jpeg, 100);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_TRUE(AtomicWriteFile(path, bytes.value_or("")).ok()) << path;
  return path;
}

TEST(ImageCodec, PngIsLosslessAndTruncationIsRefused) {
  for (int channels : {1, 3}) {
    DecodedImage img{5, 3, channels, {}};
    for (int i = 0; i < 15 * channels; ++i) img.pixels.push_back(static_cast<uint8_t>(i * 17));
    for (bool jpeg : {false, true}) {
      const std::string bytes = EncodeImage(img, jpeg, 100).value();
      auto back = DecodeImage(bytes, "x");
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(back->channels, channels);
      if (!jpeg) {
        EXPECT_EQ(back->pixels, img.pixels);
      }
      // Cut inside the pixel data; a PNG cut inside its trailer (IEND, after every
      // pixel) still holds the whole image and decodes.
      for (size_t cut : {bytes.size() / 2, jpeg ? bytes.size() - 3 : bytes.size() / 3}) {
        EXPECT_FALSE(DecodeImage(bytes.substr(0, cut), "cut").ok()) << jpeg << " " << cut;
      }
    }
  }
  EXPECT_FALSE(DecodeImage("GIF89a", "g.gif").ok());
  DecodedImage big{5000, 5000, 1, std::vector<uint8_t>(25000000, 7)};
  auto huge = DecodeImage(EncodeImage(big).value(), "big.png", 0, 1 << 20);
  EXPECT_NE(huge.status().message().find("5000x5000"), std::string::npos) << huge.status();
}

TEST(ImageFolder, OneFolderPerClassInNameOrderTheClassesInTurn) {
  const std::string dir = TempDir("images");
  WriteImage(dir + "/cat/b.png", 4, 3, 1, 1, false);
  WriteImage(dir + "/cat/a.png", 4, 3, 1, 0, false);
  WriteImage(dir + "/dog/x.jpeg", 4, 3, 1, 2, true);
  fs::create_directories(dir + "/empty");  // a class with no images keeps its index
  WriteImage(dir + "/zebra/z.PNG", 4, 3, 1, 3, false);
  ASSERT_TRUE(AtomicWriteFile(dir + "/cat/notes.txt", "not an image").ok());
  DataOptions o;
  o.spec = "images:" + dir;
  auto d = LoadDataset(o, true);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 4u);
  EXPECT_EQ(d->shape, (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(d->classes, 4u);
  // a.png, x.jpeg, z.PNG (each class's first), then b.png (cat's second).
  EXPECT_EQ(d->labels, (std::vector<int32_t>{0, 1, 3, 0}));
  EXPECT_FLOAT_EQ(d->x[0], 0.0f);                // a.png: pixel 0 is 0
  EXPECT_FLOAT_EQ(d->x[3 * 12], 1.0f / 255);     // b.png: pixel 0 is 1
  EXPECT_FLOAT_EQ(d->x[3 * 12 + 5], 6.0f / 255);  // b.png pixel 5
  // A limit keeps every class (an evaluation limit on a folder sorted by class).
  auto few = LoadDataset(o, true, 3);
  ASSERT_TRUE(few.ok()) << few.status();
  EXPECT_EQ(few->labels, (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(few->classes, 4u);
}

TEST(ImageFolder, RgbIsChannelsFirstAndMixedSizesAreRefused) {
  const std::string dir = TempDir("rgb");
  WriteImage(dir + "/a/1.png", 2, 2, 3, 0, false);
  WriteImage(dir + "/b/2.png", 2, 2, 4, 0, false);  // alpha dropped
  DataOptions o;
  o.spec = "images:" + dir;
  auto d = LoadDataset(o, true);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->shape, (std::vector<int64_t>{3, 2, 2}));
  // HWC (0,0,0),(1,1,1),(2,2,2),(3,3,3) as CHW: each plane is 0,1,2,3.
  for (int c = 0; c < 3; ++c) {
    for (int p = 0; p < 4; ++p) EXPECT_FLOAT_EQ(d->x[c * 4 + p], p / 255.0f);
  }
  const std::string other = WriteImage(dir + "/b/3.png", 3, 2, 3, 0, false);
  EXPECT_TRUE(FailsWith(LoadDataset(o, true).status(), {other, "3x2", "one size"}));
  ASSERT_TRUE(AtomicWriteFile(dir + "/b/3.png", "\x89PNG\r\n\x1a\n broken").ok());
  EXPECT_TRUE(FailsWith(LoadDataset(o, true).status(), {"3.png", "cannot be decoded"}));
  o.spec = "images:" + dir + "/nothing";
  EXPECT_TRUE(FailsWith(LoadDataset(o, true).status(), {"nothing", "not a folder"}));
}

TEST(DataOptions, SpecsAreCheckedBeforeAnythingIsRead) {
  for (const char* good : {"fashion-mnist", "synthetic:100", "npz:a.npz", "csv:t.csv", "images:d"}) {
    DataOptions o;
    o.spec = good;
    EXPECT_TRUE(o.Validate().ok()) << good;
  }
  for (const char* bad : {"mnist", "npz:", "synthetic:0", "csv"}) {
    DataOptions o;
    o.spec = bad;
    EXPECT_TRUE(FailsWith(o.Validate(), {"npz:PATH", "images:DIR"})) << bad;
  }
  DataOptions o;
  o.targets = "labels";
  EXPECT_TRUE(FailsWith(o.Validate(), {"--targets"}));
}

}  // namespace
}  // namespace fedlgc::core
