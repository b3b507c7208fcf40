// Fuzz target for two-phase PowerSGD's payloads (codecs/powersgd_two_phase.h) as the
// coordinator reads them: the frame (CRC32C recomputed, as in decode_fuzzer.cc), its spec,
// the body against the round's query or factor, then the rebuild of a message. Seeds are
// good P and Q payloads of a fixed small layout (two compressed matrices, a bias, a small
// matrix sent dense).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/crc32c.h"
#include "codecs/frame.h"
#include "codecs/layout.h"
#include "codecs/powersgd_two_phase.h"

namespace {

constexpr const char* kSpec = "powersgd(rank=2,phases=2)";

struct Round {
  fedlgc::codecs::ModelLayout layout;
  std::vector<float> query, factor;
  const fedlgc::codecs::PowerSgdTwoPhase* t = nullptr;
};

const Round& TheRound() {
  static const Round* round = [] {
    auto* r = new Round{fedlgc::codecs::ModelLayout::Parse("w:24x40;b:24;v:8x50;k:3x3").value()};
    r->t = new fedlgc::codecs::PowerSgdTwoPhase(
        fedlgc::codecs::PowerSgdTwoPhase::Create(kSpec, r->layout).value());
    r->query = r->t->DrawQuery(1);
    std::vector<float> m(r->layout.dim());
    std::mt19937 rng(2);
    std::normal_distribution<float> normal(0, 1);
    for (float& v : m) v = normal(rng);
    r->factor = r->t->Orthonormalize(r->t->Project(m, r->query));
    return r;
  }();
  return *round;
}

}  // namespace

extern "C" const char* FedlgcFuzzSpec() { return kSpec; }

std::vector<std::string> FedlgcFuzzSeeds() {
  const Round& r = TheRound();
  std::vector<std::string> seeds;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0, 1);
  for (int k = 0; k < 3; ++k) {
    std::vector<float> m(r.layout.dim());
    for (float& v : m) v = normal(rng);
    seeds.push_back(r.t->Frame(fedlgc::codecs::kPowerSgdProjectionSpec,
                               fedlgc::codecs::PowerSgdTwoPhase::Tag(r.query),
                               r.t->Project(m, r.query)));
    seeds.push_back(r.t->Frame(fedlgc::codecs::kPowerSgdMessageSpec,
                               fedlgc::codecs::PowerSgdTwoPhase::Tag(r.factor),
                               r.t->Message(m, r.factor)));
  }
  return seeds;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Round& r = TheRound();
  std::string frame(reinterpret_cast<const char*>(data), size);
  if (frame.size() >= 4) {
    const uint32_t crc = fedlgc::Crc32c(frame.data(), frame.size() - 4);
    std::memcpy(frame.data() + frame.size() - 4, &crc, 4);
  }
  fedlgc::codecs::FrameLimits limits;
  limits.max_frame_bytes = 1 << 20;
  auto view = fedlgc::codecs::ParseFrame(frame, limits);
  if (!view.ok() || view->dim != r.layout.dim()) return 0;
  using fedlgc::codecs::PowerSgdTwoPhase;
  if (view->spec == fedlgc::codecs::kPowerSgdProjectionSpec) {
    (void)PowerSgdTwoPhase::ReadBody(view->body, PowerSgdTwoPhase::Tag(r.query),
                                     r.t->projection_floats());
  } else if (view->spec == fedlgc::codecs::kPowerSgdMessageSpec) {
    auto msg = PowerSgdTwoPhase::ReadBody(view->body, PowerSgdTwoPhase::Tag(r.factor),
                                          r.t->message_floats());
    if (msg.ok()) {
      std::vector<float> out(r.layout.dim(), 0.0f);
      r.t->AddRebuilt(r.factor, *msg, 0.5, out);
    }
  }
  return 0;
}
