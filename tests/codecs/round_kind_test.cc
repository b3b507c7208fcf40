// A spec's round kind (codecs/round_kind.h): what each codec's registry entry declares,
// found at the top of a spec or inside the codecs that wrap it.
#include "codecs/round_kind.h"

#include <string>

#include "codecs/registry.h"
#include "gtest/gtest.h"

namespace fedlgc::codecs {
namespace {

TEST(RoundKind, APlainCodecNeedsNothingOfItsRound) {
  for (const char* spec : {"fp32", "qsgd(bits=4)", "ef(topk(ratio=0.01))", "zstd(qsgd(bits=4))",
                           "randk(ratio=0.1,seed=7)", "terngrad(shared=0)", "powersgd(rank=2)",
                           "no codec", "zstd(("}) {
    const RoundKind k = RoundKindOf(spec);
    EXPECT_FALSE(k.VariesByRound()) << spec;
    EXPECT_EQ(k.NeedName(), "") << spec;
    EXPECT_FALSE(k.basis_named.has_value()) << spec;
  }
}

TEST(RoundKind, EachNeedIsFoundAtTheTopOrInside) {
  struct Case {
    std::string spec;
    Placement RoundKind::*need;
    Placement where;
    std::string name;
  };
  const Case cases[] = {
      {"terngrad(bucket=128,clip=2.5,shared=1)", &RoundKind::shared_scale, Placement::kTop,
       "terngrad(shared=1)"},
      {"zstd(terngrad(shared=1))", &RoundKind::shared_scale, Placement::kNested,
       "terngrad(shared=1)"},
      {"ef(zstd(terngrad(bucket=64,shared=1)))", &RoundKind::shared_scale, Placement::kNested,
       "terngrad(shared=1)"},
      {"powersgd(phases=2)", &RoundKind::two_phase, Placement::kTop, "powersgd(..., phases=2)"},
      {"zstd(powersgd(phases=2))", &RoundKind::two_phase, Placement::kNested,
       "powersgd(..., phases=2)"},
      {"gradiveq(dims=3,slice=8)", &RoundKind::basis, Placement::kTop, "gradiveq"},
      {"ef(gradiveq(dims=3,slice=8))", &RoundKind::basis, Placement::kNested, "gradiveq"},
      {"randk(ratio=0.02,seed=round)", &RoundKind::round_seed, Placement::kTop,
       "randk(seed=round)"},
      {"ef( randk(ratio=0.01, seed = round) )", &RoundKind::round_seed, Placement::kNested,
       "randk(seed=round)"},
  };
  for (const Case& c : cases) {
    const RoundKind k = RoundKindOf(c.spec);
    EXPECT_EQ(k.*c.need, c.where) << c.spec;
    EXPECT_TRUE(k.VariesByRound()) << c.spec;
    EXPECT_EQ(k.NeedName(), c.name) << c.spec;
    // Only the need the spec names.
    int needs = 0;
    for (auto n : {&RoundKind::shared_scale, &RoundKind::two_phase, &RoundKind::basis,
                   &RoundKind::round_seed}) {
      needs += Present(k.*n);
    }
    EXPECT_EQ(needs, 1) << c.spec;
  }
  // A seed word that is not `round`, or a topk's: no round seed.
  EXPECT_FALSE(Present(RoundKindOf("topk(seed=round)").round_seed));
  EXPECT_FALSE(Present(RoundKindOf("terngrad(shared=1)").round_seed));
}

// The codecs that declare a need are the ones whose rounds FedAvg serves, and each
// declares exactly one.
TEST(RoundKind, TheRegistryDeclaresTheNeedsOfFourCodecs) {
  std::string declared;
  for (const CodecEntry* e : DefaultRegistry().List()) {
    if (e->round_needs != nullptr) declared += e->name + " ";
  }
  EXPECT_EQ(declared, "gradiveq powersgd randk terngrad ");
}

TEST(RoundKind, TheSummedCodesGridAndKeptCoordinates) {
  EXPECT_EQ(RoundKindOf("qsgd(bits=4)").sum_levels.value(), 7);
  EXPECT_EQ(RoundKindOf("terngrad(bucket=64)").sum_levels.value(), 1);
  const RoundKind r = RoundKindOf("randk(k=64,values=terngrad,seed=7)");
  EXPECT_EQ(r.sum_levels.value(), 1);
  EXPECT_EQ(r.SumKept(1000).value(), 64u);
  EXPECT_EQ(RoundKindOf("qsgd(bits=4)").SumKept(1000).value(), 1000u);
  EXPECT_TRUE(absl::IsInvalidArgument(RoundKindOf("topk(ratio=0.1)").sum_levels.status()));
  EXPECT_TRUE(absl::IsInvalidArgument(RoundKindOf("qsgd(bits=4,elias=1)").sum_levels.status()));
}

TEST(RoundKind, AGradiveqSpecNamesItsServedBasis) {
  EXPECT_FALSE(RoundKindOf("gradiveq(dims=3,slice=8)").basis_named.has_value());
  const RoundKind k = RoundKindOf("ef(gradiveq(dims=3,slice=8,basis=v4h00ff))");
  ASSERT_TRUE(k.basis_named.has_value());
  EXPECT_EQ(k.basis_named->first, 4u);
  EXPECT_EQ(k.basis_named->second, "v4h00ff");
}

}  // namespace
}  // namespace fedlgc::codecs
