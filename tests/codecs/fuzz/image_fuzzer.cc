// Fuzz target for the image decoder wrapper (core/image_folder.h) over stb_image: any bytes
// decode to an image of the size its header gives and at most the pixel budget, or fail
// with a status. Seeds are small PNG and JPEG files, gray and RGB.
#include <stb/stb_image_write.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/image_folder.h"

namespace {

void Append(void* ctx, void* data, int size) {
  static_cast<std::string*>(ctx)->append(static_cast<const char*>(data), size);
}

std::string Encode(int w, int h, int c, bool jpeg) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * c);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 37);
  std::string out;
  if (jpeg) {
    stbi_write_jpg_to_func(Append, &out, w, h, c, px.data(), 90);
  } else {
    stbi_write_png_to_func(Append, &out, w, h, c, px.data(), w * c);
  }
  return out;
}

}  // namespace

extern "C" const char* FedlgcFuzzSpec() { return "image"; }

std::vector<std::string> FedlgcFuzzSeeds() {
  return {Encode(5, 4, 1, false), Encode(3, 3, 3, false), Encode(2, 6, 4, false),
          Encode(8, 8, 1, true), Encode(9, 7, 3, true)};
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  constexpr uint64_t kBudget = 1 << 20;
  for (int channels : {0, 1, 3}) {
    auto img = fedlgc::core::DecodeImage(bytes, "fuzz.png", channels, kBudget);
    if (!img.ok()) continue;
    const uint64_t pixels = static_cast<uint64_t>(img->width) * img->height;
    if (pixels == 0 || pixels > kBudget ||
        img->pixels.size() != pixels * static_cast<uint64_t>(img->channels) ||
        (channels != 0 && img->channels != channels)) {
      std::abort();
    }
  }
  return 0;
}
