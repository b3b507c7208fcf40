// Fuzz target for the broadcast decoders (codecs/broadcast.h): any bytes must parse as a
// delta, a chain or a saved encoder state, or fail with a status; a parsed delta or chain
// must apply to the model at its version or fail leaving the model untouched (a chain: all
// or nothing); what applies is finite. Seeds are serialized deltas, a chain and a state of
// a 4-bit QSGD broadcast. Built like decode_fuzzer.cc.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "codecs/broadcast.h"

namespace {

constexpr size_t kDim = 3000;

std::vector<float> Start() {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> m(kDim);
  for (float& x : m) x = normal(rng);
  return m;
}

const fedlgc::codecs::BroadcastEncoder& Encoder() {
  static fedlgc::codecs::BroadcastEncoder* enc = [] {
    fedlgc::codecs::BroadcastOptions o;
    o.codec = "qsgd(bits=4,bucket=64)";
    o.max_frame_bytes = 512;
    return fedlgc::codecs::BroadcastEncoder::Create(o, Start(), 0).value().release();
  }();
  return *enc;
}

}  // namespace

extern "C" const char* FedlgcFuzzSpec() { return "broadcast"; }

std::vector<std::string> FedlgcFuzzSeeds() {
  fedlgc::codecs::BroadcastOptions o;
  o.codec = "qsgd(bits=4,bucket=64)";
  o.max_frame_bytes = 512;
  auto enc = fedlgc::codecs::BroadcastEncoder::Create(o, Start(), 0).value();
  std::vector<float> m = Start();
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0, 0.01f);
  std::vector<std::string> seeds;
  for (uint64_t v = 1; v <= 3; ++v) {
    for (float& x : m) x += normal(rng);
    seeds.push_back(fedlgc::codecs::SerializeDelta(*enc->Advance(v, m).value()));
  }
  const auto chain = enc->ChainFrom(0);
  seeds.push_back(fedlgc::codecs::SerializeChain(enc->version(), enc->held_crc(), chain));
  seeds.push_back(enc->SaveState());
  return seeds;
}

namespace {

void FuzzChain(std::string_view bytes) {
  auto chain = fedlgc::codecs::ParseChain(bytes);
  if (!chain.ok()) return;
  static const std::vector<float> start = Start();
  std::vector<float> model = start;
  const uint64_t from = chain->deltas.empty() ? chain->to : chain->deltas.front().from;
  uint64_t version = from;
  const auto st = fedlgc::codecs::ApplyChain(Encoder().codec(), *chain, &version, &model);
  if (st.ok()) {
    if (version != chain->to) std::abort();
    for (float x : model) {
      if (!std::isfinite(x)) std::abort();
    }
  } else if (version != from ||
             std::memcmp(model.data(), start.data(), kDim * sizeof(float)) != 0) {
    std::abort();  // a refused chain changed the model
  }
}

void FuzzState(std::string_view bytes) {
  fedlgc::codecs::BroadcastOptions o;
  o.codec = "qsgd(bits=4,bucket=64)";
  o.max_frame_bytes = 512;
  auto enc = fedlgc::codecs::BroadcastEncoder::Restore(o, bytes);
  if (!enc.ok()) return;
  for (float x : (*enc)->held()) {
    if (!std::isfinite(x)) std::abort();
  }
  if (fedlgc::codecs::ModelCrc((*enc)->held()) != (*enc)->held_crc()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  FuzzChain(bytes);
  FuzzState(bytes);
  auto delta = fedlgc::codecs::ParseDelta(bytes);
  if (!delta.ok()) return 0;
  static const std::vector<float> start = Start();
  std::vector<float> model = start;
  uint64_t version = delta->from;
  const auto st = fedlgc::codecs::ApplyDelta(Encoder().codec(), *delta, &version, &model);
  if (st.ok()) {
    if (version != delta->to) std::abort();
    for (float x : model) {
      if (!std::isfinite(x)) std::abort();
    }
  } else if (version != delta->from ||
             std::memcmp(model.data(), start.data(), kDim * sizeof(float)) != 0) {
    std::abort();  // a refused delta changed the model
  }
  return 0;
}
