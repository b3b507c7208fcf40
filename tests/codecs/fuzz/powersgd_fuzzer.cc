// Fuzz target for PowerSGD's decoder, which needs a model layout: a fixed small one (three
// matrices, the 6 x 6 one sent dense, a bias and a scalar). The input is taken as a frame with its
// CRC32C recomputed, as in decode_fuzzer.cc; seeds are whole and row-cut frames.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/crc32c.h"
#include "codecs/codec.h"
#include "codecs/layout.h"
#include "codecs/registry.h"

namespace {

constexpr const char* kSpec = "powersgd(rank=2)";

const fedlgc::codecs::ModelLayout& Layout() {
  static const auto* layout = new fedlgc::codecs::ModelLayout(
      fedlgc::codecs::ModelLayout::Parse("w:24x40;b:24;k:6x2x3;v:8x50;s:").value());
  return *layout;
}

std::unique_ptr<fedlgc::codecs::Codec> NewCodec() {
  return fedlgc::codecs::MakeCodec(kSpec, &Layout()).value();
}

}  // namespace

extern "C" const char* FedlgcFuzzSpec() { return kSpec; }

std::vector<std::string> FedlgcFuzzSeeds() {
  std::vector<std::string> seeds;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0, 1);
  for (uint64_t budget : {0, 1024, 600}) {
    auto codec = NewCodec();
    for (int t = 0; t < 2; ++t) {
      std::vector<float> x(Layout().dim());
      for (float& v : x) v = normal(rng);
      std::vector<fedlgc::codecs::Frame> frames;
      fedlgc::codecs::EncodeOptions opts;
      opts.max_frame_bytes = budget;
      if (codec->Encode(x, opts, &frames).ok()) {
        for (auto& f : frames) seeds.push_back(std::move(f.bytes));
      }
    }
  }
  return seeds;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto* codec = NewCodec().release();
  std::string frame(reinterpret_cast<const char*>(data), size);
  if (frame.size() >= 4) {
    const uint32_t crc = fedlgc::Crc32c(frame.data(), frame.size() - 4);
    std::memcpy(frame.data() + frame.size() - 4, &crc, 4);
  }
  std::vector<float> out(Layout().dim());
  fedlgc::codecs::FrameLimits limits;
  limits.max_frame_bytes = 1 << 20;
  (void)fedlgc::codecs::DecodeFrameInto(*codec, frame, limits, out);
  return 0;
}
