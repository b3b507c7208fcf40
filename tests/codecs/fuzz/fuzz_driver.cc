// Runs a fuzz target without libFuzzer: seeded random inputs built by mutating valid
// frames of the target's codec (or, for the spec target, mutated spec strings). Used in
// ctest where clang's libFuzzer is not the compiler. Exit status 0 unless the target
// crashes (the sanitizer build turns memory errors into crashes).
//
//   <target> [iterations] [seed]
//   <target> --seeds DIR      writes the seed inputs into DIR (a libFuzzer corpus)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "codecs/codec.h"
#include "codecs/registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" const char* FedlgcFuzzSpec();
// A target that is not a codec's decoder gives its own seeds.
std::vector<std::string> FedlgcFuzzSeeds() __attribute__((weak));

namespace {

std::vector<std::string> Seeds() {
  if (FedlgcFuzzSeeds) return FedlgcFuzzSeeds();
  std::vector<std::string> seeds;
  const std::string spec = FedlgcFuzzSpec();
  if (spec.empty()) {
    return {"ef(topk(ratio=0.01, values=qsgd(bits=8)))", "qsgd(bits=4,bucket=64,elias=1)",
            "terngrad(clip=2.5)", "randk(k=3,values=natural)", "natdither/1(s=3)"};
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0, 1);
  for (size_t n : {1, 17, 300, 2000}) {
    std::vector<float> x(n);
    for (float& v : x) v = normal(rng);
    // One codec per n: a stateful sender (dgc) fixes its dimension on the first encode.
    auto codec = fedlgc::codecs::MakeCodec(spec).value();
    std::vector<fedlgc::codecs::Frame> frames;
    fedlgc::codecs::EncodeOptions opts;
    opts.shared_scale = 4.0f;
    if (codec->Encode(x, opts, &frames).ok()) {
      for (auto& f : frames) seeds.push_back(std::move(f.bytes));
    }
  }
  return seeds;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--seeds") {
    int i = 0;
    for (const std::string& s : Seeds()) {
      const std::string path = std::string(argv[2]) + "/seed" + std::to_string(i++);
      FILE* f = std::fopen(path.c_str(), "wb");
      if (f == nullptr || std::fwrite(s.data(), 1, s.size(), f) != s.size()) {
        std::fprintf(stderr, "cannot write %s\n", path.c_str());
        return 1;
      }
      std::fclose(f);
    }
    std::printf("%d seeds written to %s\n", i, argv[2]);
    return 0;
  }
  const long iterations = argc > 1 ? std::atol(argv[1]) : 20000;
  std::mt19937_64 rng(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 42);
  const std::vector<std::string> seeds = Seeds();
  for (long it = 0; it < iterations; ++it) {
    std::string input = seeds[rng() % seeds.size()];
    switch (rng() % 6) {
      case 0:  // truncate
        input.resize(rng() % (input.size() + 1));
        break;
      case 1:  // random bytes
        input.assign(rng() % 256, '\0');
        for (char& c : input) c = static_cast<char>(rng());
        break;
      default: {  // a few byte edits anywhere
        const int edits = 1 + static_cast<int>(rng() % 8);
        for (int e = 0; e < edits && !input.empty(); ++e) {
          const size_t pos = rng() % input.size();
          input[pos] = (rng() & 1) ? static_cast<char>(rng())
                                   : static_cast<char>(input[pos] ^ (1 << (rng() % 8)));
        }
      }
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  std::printf("%ld inputs, no crash\n", iterations);
  return 0;
}
