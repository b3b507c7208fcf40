// Fuzz target for one decoder, chosen at compile time by FEDLGC_FUZZ_SPEC. The input is
// taken as a frame; its CRC32C is recomputed first so the fuzzer explores the header
// and body checks instead of bouncing off the checksum. Built as a libFuzzer binary with
// clang (FEDLGC_FUZZ=ON) and, everywhere, as a ctest binary that replays seeded
// mutations of valid frames (fuzz_driver.cc).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/crc32c.h"
#include "codecs/codec.h"
#include "codecs/registry.h"

#ifndef FEDLGC_FUZZ_SPEC
#error "define FEDLGC_FUZZ_SPEC to the codec spec under test"
#endif

namespace {

const fedlgc::codecs::Codec& TheCodec() {
  static const auto* codec = fedlgc::codecs::MakeCodec(FEDLGC_FUZZ_SPEC).value().release();
  return *codec;
}

}  // namespace

// The spec the target decodes (used by the driver to build seed frames).
extern "C" const char* FedlgcFuzzSpec() { return FEDLGC_FUZZ_SPEC; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string frame(reinterpret_cast<const char*>(data), size);
  if (frame.size() >= 4) {
    const uint32_t crc = fedlgc::Crc32c(frame.data(), frame.size() - 4);
    std::memcpy(frame.data() + frame.size() - 4, &crc, 4);
  }
  // The receiver's vector size is fixed by the job; use the one the frame claims when it
  // is small, so bodies get decoded, else a fixed size.
  uint64_t dim = 4096;
  uint16_t spec_len = 0;
  if (frame.size() >= 8) std::memcpy(&spec_len, frame.data() + 6, 2);
  if (frame.size() >= 16u + spec_len) {
    uint64_t claimed;
    std::memcpy(&claimed, frame.data() + 8 + spec_len, 8);
    if (claimed <= (1u << 16)) dim = claimed;
  }
  std::vector<float> out(dim);
  fedlgc::codecs::FrameLimits limits;
  limits.max_frame_bytes = 1 << 20;
  (void)fedlgc::codecs::DecodeFrameInto(TheCodec(), frame, limits, out);
  return 0;
}
