// Chunks as a client sends them, for tests that feed a RoundEngine directly: an update
// encoded into several frames, and one of them as the engine takes it.
#ifndef FEDLGC_TESTS_COORDINATOR_CHUNKS_H_
#define FEDLGC_TESTS_COORDINATOR_CHUNKS_H_

#include <string>
#include <vector>

#include "codecs/registry.h"
#include "coordinator/collector.h"
#include "gtest/gtest.h"

namespace fedlgc::testing {

// `x` encoded with `spec` into frames of at most 128 bytes (several chunks).
inline std::vector<std::string> ChunkFrames(const std::vector<float>& x,
                                            const std::string& spec = "fp32") {
  auto codec = codecs::MakeCodec(spec).value();
  std::vector<codecs::Frame> frames;
  codecs::EncodeOptions o;
  o.max_frame_bytes = 128;
  EXPECT_TRUE(codec->Encode(x, o, &frames).ok());
  std::vector<std::string> out;
  for (auto& f : frames) out.push_back(std::move(f.bytes));
  return out;
}

// Chunk `i` of `frames` from `client`: round 1, update 9, 10 samples claimed. The frame
// is a view of `frames[i]`.
inline coordinator::ChunkIn ChunkOf(const std::string& client,
                                    const std::vector<std::string>& frames, uint32_t i) {
  coordinator::ChunkIn c;
  c.client_id = client;
  c.round = 1;
  c.update_id = 9;
  c.chunk_index = i;
  c.chunk_count = static_cast<uint32_t>(frames.size());
  c.num_samples = 10;
  c.frame = frames[i];
  return c;
}

}  // namespace fedlgc::testing

#endif  // FEDLGC_TESTS_COORDINATOR_CHUNKS_H_
