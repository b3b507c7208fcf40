// Tests for codecs/spec.cc and the registry's spec handling: grammar, precise errors,
// canonical specs that round-trip.
#include "base/spec.h"

#include <set>
#include <string>
#include <string_view>

#include "codecs/registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/codecs/test_util.h"

namespace fedlgc::codecs {
namespace {

using absl::StatusCode;
using testing::FailsWith;
using ::testing::HasSubstr;

TEST(SpecParse, NestedSpec) {
  auto node = ParseSpec("ef(topk(ratio=0.01, values=qsgd(bits=8)))");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(node->name, "ef");
  ASSERT_EQ(node->args.size(), 1u);
  EXPECT_TRUE(node->args[0].key.empty());
  const SpecNode& topk = *node->args[0].node;
  EXPECT_EQ(topk.name, "topk");
  ASSERT_EQ(topk.args.size(), 2u);
  EXPECT_EQ(topk.args[0].key, "ratio");
  EXPECT_TRUE(topk.args[0].is_number);
  EXPECT_DOUBLE_EQ(topk.args[0].number, 0.01);
  EXPECT_EQ(topk.args[1].node->name, "qsgd");
  EXPECT_DOUBLE_EQ(topk.args[1].node->args[0].number, 8);
}

TEST(SpecParse, VersionsAndWords) {
  auto node = ParseSpec("qsgd/1(norm=linf, bucket=1e3)");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(node->version, 1u);
  EXPECT_EQ(node->args[0].node->name, "linf");
  EXPECT_TRUE(node->args[0].node->IsWord());
  EXPECT_DOUBLE_EQ(node->args[1].number, 1000);
}

TEST(SpecParse, FormatSpecReadsBackAsTheSameTree) {
  for (const char* spec :
       {"qsgd/1(norm=linf,bucket=1e3)", "ef(topk(ratio=0.01,values=qsgd(bits=8)))",
        "zstd(qsgd(bits=4))", "fp32", "lgc()"}) {
    auto node = ParseSpec(spec);
    ASSERT_TRUE(node.ok()) << spec;
    const std::string text = FormatSpec(*node);
    EXPECT_EQ(FormatSpec(ParseSpec(text).value()), text) << spec;
  }
  EXPECT_EQ(FormatSpec(ParseSpec(" zstd( qsgd( bits = 4 ) ) ").value()), "zstd(qsgd(bits=4))");
}

TEST(SpecParse, ErrorsNameTheColumn) {
  struct Case {
    const char* spec;
    const char* message;
  } cases[] = {
      {"", "column 1: expected a codec name, found end of spec"},
      {"qsgd(bits=4", "column 12: expected ',' or ')', found end of spec"},
      {"qsgd(bits=4,)", "column 13: expected a codec name, found ')'"},
      {"qsgd bits", "column 6: expected end of spec, found 'b'"},
      {"qsgd/0", "column 6: expected a version number >= 1 after '/'"},
      {"qsgd(bits=4x)", "column 12: expected ',' or ')', found 'x'"},
      {"qsgd(bits=1.2.3)", "column 11: expected a number"},
      {"Qsgd", "column 1: expected a codec name, found 'Q'"},
      {"qsgd(bits=+-4)", "column 11: expected a number"},
  };
  for (const Case& c : cases) {
    auto node = ParseSpec(c.spec);
    ASSERT_TRUE(FailsWith(node, StatusCode::kInvalidArgument)) << c.spec;
    EXPECT_THAT(std::string(node.status().message()), HasSubstr(c.message)) << c.spec;
  }
}

TEST(SpecParse, DepthAndLengthLimits) {
  std::string deep;
  for (int i = 0; i < 20; ++i) deep += "ef(";
  deep += "fp32";
  for (int i = 0; i < 20; ++i) deep += ")";
  EXPECT_THAT(std::string(ParseSpec(deep).status().message()), HasSubstr("nest too deeply"));
  EXPECT_THAT(std::string(ParseSpec(std::string(5000, 'a')).status().message()),
              HasSubstr("the limit is 1024"));
}

TEST(Registry, PreciseErrors) {
  struct Case {
    const char* spec;
    const char* message;
    StatusCode code = StatusCode::kInvalidArgument;
  } cases[] = {
      {"qsdg", "unknown codec 'qsdg'", StatusCode::kNotFound},
      {"qsgd(bitz=4)", "qsgd: unknown parameter 'bitz'"},
      {"qsgd(bits=12)", "qsgd: parameter 'bits' must be an integer in [2, 8], got 12"},
      {"qsgd(bits=4, s=3)", "give one of them"},
      {"qsgd(bits=4, bits=5)", "given twice"},
      {"qsgd(bucket=100)", "must be a multiple of 8"},
      {"qsgd(norm=l3)", "must be one of l2, linf, got l3"},
      {"qsgd/2", "codec 'qsgd' version 2 is not supported", StatusCode::kUnimplemented},
      {"topk(ratio=2)", "topk: parameter 'ratio' must be a number in [1e-09, 1]"},
      {"topk(values=topk)", "must be a dense codec"},
      {"topk(values=3)", "must be a codec spec, got 3"},
      {"ef", "ef: needs the codec it wraps"},
      {"ef(ef(fp32))", "nested in error feedback"},
      {"fp32(x=1)", "fp32: unknown parameter 'x'"},
      {"ef(fp32, fp16)", "takes 1 positional argument(s), got 2"},
  };
  for (const Case& c : cases) {
    auto codec = MakeCodec(c.spec);
    ASSERT_TRUE(FailsWith(codec, c.code)) << c.spec;
    EXPECT_THAT(std::string(codec.status().message()), HasSubstr(c.message)) << c.spec;
  }
}

// A codec without examples would go untested by the shared suites (codec_property_test,
// hostile_test, unbiased_test): every registered codec must bring some, and each must build
// (with the example layout exactly when the flag says it needs one) as the codec it is
// listed under.
TEST(Registry, EveryCodecHasExamplesThatBuild) {
  for (const CodecEntry* e : DefaultRegistry().List()) {
    EXPECT_FALSE(e->examples.empty()) << e->name << " has no examples";
    for (const std::string& spec : e->examples) {
      auto node = ParseSpec(spec);
      ASSERT_TRUE(node.ok()) << spec << ": " << node.status();
      EXPECT_EQ(node->name, e->name) << spec << " is listed under " << e->name;
      const testing::Example example{e->name, spec, testing::NestsLayoutCodec(*node)};
      auto codec = testing::MakeExample(example);
      EXPECT_TRUE(codec.ok()) << spec << ": " << codec.status();
      if (example.needs_layout) {
        EXPECT_TRUE(FailsWith(MakeCodec(spec), StatusCode::kInvalidArgument)) << spec;
      }
    }
  }
}

// Each codec's decoder is fuzzed (tests/codecs/CMakeLists.txt, FEDLGC_FUZZ_DECODERS, one
// target per spec: libFuzzer takes its spec at compile time, so that list is kept by hand).
// A codec registered without a fuzz target fails here. Not in the list, with targets of
// their own: the codecs that need a layout (powersgd, gradiveq); and ef, whose frames are
// its inner codec's.
TEST(Registry, EveryCodecsDecoderIsFuzzed) {
  std::set<std::string> fuzzed;
  for (std::string_view rest = FEDLGC_FUZZED_DECODERS; !rest.empty();) {
    const size_t bar = rest.find('|');
    auto node = ParseSpec(rest.substr(0, bar));
    ASSERT_TRUE(node.ok()) << rest.substr(0, bar) << ": " << node.status();
    fuzzed.insert(node->name);
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
  }
  for (const CodecEntry* e : DefaultRegistry().List()) {
    if (e->needs_layout || e->name == "ef") continue;
    EXPECT_EQ(fuzzed.count(e->name), 1u) << e->name << " has no decoder fuzz target";
  }
}

TEST(Registry, CanonicalSpecsRoundTrip) {
  for (const testing::Example& e : testing::RegistryExamples()) {
    const ModelLayout* layout = e.needs_layout ? &testing::ExampleLayout() : nullptr;
    auto a = MakeCodec(e.spec, layout);
    ASSERT_TRUE(a.ok()) << e.spec << ": " << a.status();
    auto b = MakeCodec((*a)->spec(), layout);
    ASSERT_TRUE(b.ok()) << (*a)->spec() << ": " << b.status();
    EXPECT_EQ((*a)->spec(), (*b)->spec());
    EXPECT_THAT((*a)->spec(), HasSubstr("/1"));
  }
  // Spaces in a spec are not part of it.
  EXPECT_EQ((*MakeCodec("qsgd(s=5, norm=linf, bucket=64)"))->spec(),
            (*MakeCodec("qsgd(s=5,norm=linf,bucket=64)"))->spec());
  EXPECT_EQ((*MakeCodec("qsgd(bits=4)"))->spec(), "qsgd/1(bits=4,bucket=512,norm=l2,elias=0)");
  EXPECT_EQ((*MakeCodec("ef(topk(ratio=0.01,values=qsgd(bits=8)))"))->wire_spec(),
            "topk/1(ratio=0.01,values=qsgd/1(bits=8,bucket=512,norm=l2,elias=0),sampled=0)");
}

TEST(Registry, DuplicateNamesAreAnError) {
  Registry r;
  ASSERT_TRUE(RegisterBuiltinCodecs(r).ok());
  absl::Status again = RegisterBuiltinCodecs(r);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(again.message()), HasSubstr("already registered"));
  EXPECT_GE(DefaultRegistry().List().size(), 12u);
}

TEST(SpecNumber, ShortestForm) {
  EXPECT_EQ(FormatSpecNumber(512), "512");
  EXPECT_EQ(FormatSpecNumber(0.01), "0.01");
  EXPECT_EQ(FormatSpecNumber(2.5), "2.5");
  EXPECT_EQ(FormatSpecNumber(1e-5), "1e-05");
}

}  // namespace
}  // namespace fedlgc::codecs
