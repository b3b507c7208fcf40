// Fuzz target for GradiVeQ's two parsers over a fixed small layout: the first byte picks
// one, even for the frame decoder (with a fixed fitted basis; the CRC32C is recomputed, as in
// decode_fuzzer.cc), odd for SliceBasis::Parse. Seeds are whole and cut frames and a basis.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/crc32c.h"
#include "codecs/codec.h"
#include "codecs/gradiveq.h"
#include "codecs/layout.h"
#include "codecs/registry.h"

namespace {

using fedlgc::codecs::ModelLayout;
using fedlgc::codecs::SliceBasis;

constexpr const char* kSpec = "gradiveq(dims=3,slice=8)";

const ModelLayout& Layout() {
  static const auto* layout =
      new ModelLayout(ModelLayout::Parse("w:40x21;b:40;m:3x4;k:9x2x8;s:").value());
  return *layout;
}

std::vector<float> Sample(uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> x(Layout().dim());
  for (float& v : x) v = normal(rng);
  return x;
}

const std::shared_ptr<const SliceBasis>& Basis() {
  static const auto* basis = new std::shared_ptr<const SliceBasis>(
      std::make_shared<const SliceBasis>(SliceBasis::Fit(Layout(), 8, 3, 1, Sample(1)).value()));
  return *basis;
}

std::unique_ptr<fedlgc::codecs::Codec> NewCodec() {
  return fedlgc::codecs::MakeCodec(kSpec, &Layout(), Basis()).value();
}

}  // namespace

extern "C" const char* FedlgcFuzzSpec() { return kSpec; }

std::vector<std::string> FedlgcFuzzSeeds() {
  std::vector<std::string> seeds;
  auto codec = NewCodec();
  for (uint64_t budget : {0, 512, 200}) {
    std::vector<fedlgc::codecs::Frame> frames;
    fedlgc::codecs::EncodeOptions opts;
    opts.max_frame_bytes = budget;
    if (codec->Encode(Sample(budget + 2), opts, &frames).ok()) {
      for (auto& f : frames) seeds.push_back(std::string(1, '\0') + f.bytes);
    }
  }
  seeds.push_back(std::string(1, '\1') + Basis()->bytes());
  return seeds;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto* codec = NewCodec().release();
  if (size == 0) return 0;
  std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    (void)SliceBasis::Parse(input, Layout());
    return 0;
  }
  if (input.size() >= 4) {
    const uint32_t crc = fedlgc::Crc32c(input.data(), input.size() - 4);
    std::memcpy(input.data() + input.size() - 4, &crc, 4);
  }
  std::vector<float> out(Layout().dim());
  fedlgc::codecs::FrameLimits limits;
  limits.max_frame_bytes = 1 << 20;
  (void)fedlgc::codecs::DecodeFrameInto(*codec, input, limits, out);
  return 0;
}
