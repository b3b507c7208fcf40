// Options as users give them: the coordinator's and the modes' flags read back from the
// config file ConfigText writes (what fedlgc-sim passes to the coordinator), flags on the
// command line over the file, unknown keys refused, and each mode's Validate.
#include "modes/mode_options.h"

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>

#include "base/flags.h"
#include "base/log.h"
#include "coordinator/flags.h"
#include "gtest/gtest.h"
#include "modes/drivers.h"

namespace fedlgc::modes {
namespace {

using coordinator::CoordinatorOptions;

std::string WriteConfig(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name + ".toml";
  std::ofstream(path) << text;
  return path;
}

// Parses `args` (after the program name) into fresh options.
int Parse(std::vector<std::string> args, CoordinatorOptions* co, ModeOptions* mo) {
  CLI::App app("test", "fedlgc-coordinator");
  fedlgc::AddCommonFlags(app);
  coordinator::AddCoordinatorFlags(app, co);
  AddModeFlags(app, mo);
  std::vector<char*> argv = {const_cast<char*>("fedlgc-coordinator")};
  for (std::string& a : args) argv.push_back(a.data());
  const auto code = fedlgc::ParseFlags(app, static_cast<int>(argv.size()), argv.data());
  return code.value_or(0);
}

// --print-config prints what the command line over --config over the defaults gives, as a
// file --config reads back to the same options, and the binary goes no further.
TEST(ModeOptions, PrintConfigPrintsTheEffectiveConfigurationAFileThatReadsBack) {
  const std::string file = WriteConfig("print_in", "rounds=9\ncodec='qsgd(bits=4)'\n");
  CoordinatorOptions co;
  ModeOptions mo;
  ::testing::internal::CaptureStdout();
  const int code = Parse({"--config", file, "--codec", "fp16", "--insecure", "--no-sgp-reference",
                          "--log-level", "warning", "--print-config"},
                         &co, &mo);
  const std::string text = ::testing::internal::GetCapturedStdout();
  fedlgc::log::SetLevel(fedlgc::log::Level::kInfo);
  EXPECT_EQ(code, 0);
  for (const char* line : {"rounds=9\n", "codec='fp16'\n", "insecure=true\n",
                           "sgp-reference=false\n", "log-level='warning'\n", "mode='fedavg'\n"}) {
    EXPECT_NE(("\n" + text).find(std::string("\n") + line), std::string::npos) << line << " in\n"
                                                                               << text;
  }
  EXPECT_EQ(text.find("print-config"), std::string::npos) << "it does not print itself";

  CoordinatorOptions back;
  ModeOptions mback;
  ASSERT_EQ(Parse({"--config", WriteConfig("print_out", text)}, &back, &mback), 0);
  EXPECT_EQ(back.rounds, 9u);
  EXPECT_EQ(back.plan.codec, "fp16");
  EXPECT_TRUE(back.insecure);
  EXPECT_FALSE(mback.sgp.reference);
  fedlgc::log::SetLevel(fedlgc::log::Level::kInfo);
}

TEST(ModeOptions, EveryOptionSurvivesAConfigFileRoundTrip) {
  CoordinatorOptions co;
  co.model = "mlp";
  co.mode = "lsgd";
  co.rounds = 7;
  co.fraction = 0.5;
  co.plan.codec = "topk(ratio=0.01,values=qsgd(bits=8))";
  co.plan.warmup_codecs = {"topk(ratio=0.1,values=qsgd(bits=8))", "fp16"};
  co.plan.lr = 0.125f;
  co.plan.local_steps = 33;
  co.insecure = true;
  co.state_dir = "/tmp/a dir/with spaces";
  co.seed = 1234567890123ull;
  ModeOptions mo;
  mo.lsgd.groups = {{"client-0", "client-1"}, {"client-2"}};
  mo.lsgd.pull = 0.25;
  mo.sgp.reference = false;
  mo.sgp.overlap = true;
  mo.lgc.leader = "client-3";
  mo.fedavg.server_momentum = 0.5f;
  CLI::App writer;
  fedlgc::CaptureDefaults(writer);
  CoordinatorOptions co_copy = co;
  ModeOptions mo_copy = mo;
  coordinator::AddCoordinatorFlags(writer, &co_copy);
  AddModeFlags(writer, &mo_copy);
  const std::string path = WriteConfig("round_trip", fedlgc::ConfigText(writer));

  CoordinatorOptions back;
  ModeOptions mback;
  ASSERT_EQ(Parse({"--config", path}, &back, &mback), 0);
  EXPECT_EQ(back.model, "mlp");
  EXPECT_EQ(back.mode, "lsgd");
  EXPECT_EQ(back.rounds, 7u);
  EXPECT_EQ(back.fraction, 0.5);
  EXPECT_EQ(back.plan.codec, co.plan.codec);
  EXPECT_EQ(back.plan.warmup_codecs, co.plan.warmup_codecs);
  EXPECT_EQ(back.plan.lr, 0.125f);
  EXPECT_EQ(back.plan.local_steps, 33u);
  EXPECT_TRUE(back.insecure);
  EXPECT_EQ(back.state_dir, co.state_dir);
  EXPECT_EQ(back.seed, co.seed);
  EXPECT_EQ(mback.lsgd.groups, mo.lsgd.groups);
  EXPECT_EQ(mback.lsgd.pull, 0.25);
  EXPECT_FALSE(mback.sgp.reference);
  EXPECT_TRUE(mback.sgp.overlap);
  EXPECT_EQ(mback.lgc.leader, "client-3");
  EXPECT_EQ(mback.fedavg.server_momentum, 0.5f);

  // A flag on the command line wins over the file.
  CoordinatorOptions over;
  ModeOptions mover;
  ASSERT_EQ(Parse({"--config", path, "--rounds", "9", "--sgp-reference"}, &over, &mover), 0);
  EXPECT_EQ(over.rounds, 9u);
  EXPECT_TRUE(mover.sgp.reference);
  EXPECT_EQ(over.model, "mlp");
}

TEST(ModeOptions, AnEmptyValueIsEmptyAndTheLastOfARepeatedFlagWins) {
  CoordinatorOptions co;
  ModeOptions mo;
  ASSERT_EQ(Parse({"--metrics-listen=", "--state-dir=/x", "--codec=qsgd(bits=4)", "--codec=fp32",
                   "--lsgd-groups="},
                  &co, &mo),
            0);
  EXPECT_EQ(co.metrics_listen, "");  // no exposer
  EXPECT_EQ(co.state_dir, "/x");
  EXPECT_EQ(co.plan.codec, "fp32");
  EXPECT_TRUE(mo.lsgd.groups.empty());
}

TEST(ModeOptions, UnknownKeysAndBadValuesAreRefused) {
  CoordinatorOptions co;
  ModeOptions mo;
  EXPECT_NE(Parse({"--config", WriteConfig("typo", "roundz=3\n")}, &co, &mo), 0);
  EXPECT_NE(Parse({"--rounds", "many"}, &co, &mo), 0);
  EXPECT_NE(Parse({"--lsgd-groups", "a,b;b,c"}, &co, &mo), 0);  // b in two groups
  EXPECT_NE(Parse({"--no-such-flag"}, &co, &mo), 0);
}

TEST(ModeOptions, EachModeValidatesItsOwnAndRefusesAnothersChangedOptions) {
  ModeOptions mo;
  for (const ModeInfo& m : kModes) EXPECT_TRUE(mo.Validate(m.mode).ok()) << m.name;
  mo.fedavg.server_lr = 0.5f;
  EXPECT_TRUE(mo.Validate(Mode::kFedAvg).ok());
  EXPECT_TRUE(mo.Validate(Mode::kLgc).ok());
  const absl::Status sgp = mo.Validate(Mode::kSgp);
  EXPECT_TRUE(absl::IsInvalidArgument(sgp)) << sgp;
  EXPECT_NE(std::string(sgp.message()).find("--server-lr"), std::string::npos) << sgp;
  mo = ModeOptions();
  mo.lsgd.period = 60;  // does not divide the global period of 128
  EXPECT_TRUE(absl::IsInvalidArgument(mo.Validate(Mode::kLsgd)));
  // A mode's flag in a job of another mode would do nothing: refused, naming it.
  const absl::Status lsgd_in_fedavg = mo.Validate(Mode::kFedAvg);
  EXPECT_TRUE(absl::IsInvalidArgument(lsgd_in_fedavg));
  EXPECT_NE(std::string(lsgd_in_fedavg.message()).find("--lsgd-"), std::string::npos);
  mo = ModeOptions();
  mo.sgp.reference = false;
  EXPECT_TRUE(absl::IsInvalidArgument(mo.Validate(Mode::kLsgd)));
  mo = ModeOptions();
  mo.lgc.leader = "client-1";
  EXPECT_TRUE(absl::IsInvalidArgument(mo.Validate(Mode::kFedAvg)));
  EXPECT_TRUE(mo.Validate(Mode::kLgc).ok());
  mo = ModeOptions();
  mo.lgc.ae_device = "tpu";
  EXPECT_TRUE(absl::IsInvalidArgument(mo.Validate(Mode::kLgc)));
}

TEST(CoordinatorOptions, TheJobsModeComesFromTheModeAndTheCodec) {
  CoordinatorOptions co;
  co.insecure = true;
  const auto mode = [&co] { return JobMode(co); };
  EXPECT_EQ(mode().value()->mode, Mode::kFedAvg);
  co.plan.codec = "lgc(ratio=0.01)";
  co.plan.warmup_codecs = {"fp32"};
  EXPECT_EQ(mode().value()->mode, Mode::kLgc);  // --mode fedavg with an lgc codec
  co.mode = "lgc";
  EXPECT_EQ(mode().value()->mode, Mode::kLgc);
  EXPECT_TRUE(ValidateJob(co).ok()) << ValidateJob(co);
  co.mode = "sgp";
  EXPECT_TRUE(absl::IsInvalidArgument(mode().status()));
  co.mode = "gossip";
  const auto unknown = mode();
  EXPECT_TRUE(absl::IsInvalidArgument(unknown.status()));
  EXPECT_NE(std::string(unknown.status().message()).find("fedavg, lgc, lsgd, sgp"),
            std::string::npos)
      << unknown.status();
  co.mode = "lgc";
  co.plan.codec = "fp32";
  EXPECT_TRUE(absl::IsInvalidArgument(mode().status()));
  // A malformed lgc(...) is LGC's to refuse, with its own message.
  co.mode = "fedavg";
  co.plan.codec = "lgc(ratio=2)";
  EXPECT_EQ(mode().value()->mode, Mode::kLgc);
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateJob(co)));
  // Checkpoints of FedAvg and LGC jobs carry no mode in their key, those of LSGD do.
  co.plan.codec = "fp32";
  co.plan.warmup_codecs.clear();
  const std::string fedavg = co.JobKey(10, nullptr, *mode().value());
  EXPECT_EQ(fedavg, "cnn/10/fp32/1/seed1");
  co.mode = "lsgd";
  EXPECT_EQ(co.JobKey(10, nullptr, *mode().value()), fedavg + "/mode:lsgd");
}

// --bn-stats on: refused where the clients' figures would reach the coordinator against
// the job's promise (--dp, --secagg), where commits happen while clients train (buffered
// rounds), in a mode whose clients keep models of their own, and at an aggregator; auto
// (the default) is accepted everywhere and runs the phase only where on would be.
TEST(CoordinatorOptions, TheStatisticsPhaseIsRefusedWhereItCannotRun) {
  CoordinatorOptions co;
  co.insecure = true;
  co.bn_stats = "on";
  ModeOptions mo;
  EXPECT_TRUE(CheckEvaluation(co, mo).ok());
  EXPECT_TRUE(co.Validate(TraitsOf(Mode::kFedAvg)).ok()) << co.Validate(TraitsOf(Mode::kFedAvg));
  // LGC's own rules refuse a float32 codec; not the phase.
  EXPECT_EQ(co.Validate(TraitsOf(Mode::kLgc)).message().find("--bn-stats"), std::string::npos);
  for (Mode m : {Mode::kLsgd, Mode::kSgp}) {
    const absl::Status st = co.Validate(TraitsOf(m));
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_NE(st.message().find("--bn-stats on"), std::string::npos) << st;
  }
  for (const char* option : {"dp", "secagg", "rounds_mode"}) {
    ModeOptions o;
    if (std::string(option) == "dp") o.fedavg.dp = "gaussian(noise=0.01,clip=2)";
    if (std::string(option) == "secagg") o.fedavg.secagg = "secagg(clip=2)";
    if (std::string(option) == "rounds_mode") o.fedavg.rounds_mode = "buffered(k=2,concurrency=2)";
    const absl::Status st = CheckEvaluation(co, o);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << option << ": " << st;
    EXPECT_NE(st.message().find("--bn-stats on"), std::string::npos) << st;
    // off, and auto (which leaves the phase out there: RoundDriver::AllowsClientStatistics).
    for (const char* quiet : {"off", "auto"}) {
      co.bn_stats = quiet;
      EXPECT_TRUE(CheckEvaluation(co, o).ok()) << option << " " << quiet;
    }
    co.bn_stats = "on";
  }
  co.parent = "127.0.0.1:1";
  EXPECT_TRUE(absl::IsInvalidArgument(co.Validate(TraitsOf(Mode::kFedAvg))));
  co.bn_stats = "auto";
  // auto stays off at an aggregator (what else an aggregator needs is refused apart).
  EXPECT_EQ(co.Validate(TraitsOf(Mode::kFedAvg)).message().find("--bn-stats"), std::string::npos)
      << co.Validate(TraitsOf(Mode::kFedAvg));
  co.parent.clear();
  for (Mode m : {Mode::kLsgd, Mode::kSgp}) EXPECT_TRUE(co.Validate(TraitsOf(m)).ok());
  co.bn_stats = "sometimes";
  EXPECT_TRUE(absl::IsInvalidArgument(co.Validate(TraitsOf(Mode::kFedAvg))));
}

// Every mode of the wire's table has a row, with its traits.
TEST(ModeTraits, EveryModeHasARowThatAnswersForIt) {
  for (const ModeInfo& m : kModes) {
    const coordinator::ModeTraits& t = TraitsOf(m.mode);
    EXPECT_EQ(t.mode, m.mode) << m.name;
    EXPECT_NE(t.check_codecs, nullptr) << m.name;
    EXPECT_GE(t.min_participants, 1u) << m.name;
    EXPECT_EQ(t.report_key.empty(), t.report_heading.empty()) << m.name;
  }
  EXPECT_EQ(TraitsOf(Mode::kSgp).min_participants, 2u);
  EXPECT_TRUE(TraitsOf(Mode::kFedAvg).plain_clients);
  EXPECT_FALSE(TraitsOf(Mode::kLsgd).robust_aggregators);
  // The server optimizer's flags belong to the modes whose rounds commit a summed mean.
  EXPECT_TRUE(TraitsOf(Mode::kFedAvg).summed && TraitsOf(Mode::kLgc).summed);
  EXPECT_FALSE(TraitsOf(Mode::kLsgd).summed || TraitsOf(Mode::kSgp).summed);
  // What a mode's traits refuse: a median in an SGP job, an aggregator under LSGD.
  CoordinatorOptions co;
  co.insecure = true;
  co.mode = "sgp";
  co.aggregator = "median";
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateJob(co)));
  co.mode = "fedavg";
  EXPECT_TRUE(ValidateJob(co).ok()) << ValidateJob(co);
  co.aggregator = "mean";
  co.mode = "lsgd";
  co.parent = "127.0.0.1:1";
  co.parent_id = "agg-0";
  const absl::Status st = ValidateJob(co);
  EXPECT_NE(std::string(st.message()).find("--parent"), std::string::npos) << st;
}

}  // namespace
}  // namespace fedlgc::modes
