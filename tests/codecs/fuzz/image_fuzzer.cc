// Fuzz target for the image decoder (core/image_folder.h, libpng and libjpeg-turbo): any
// bytes decode to an image of the size its header gives and at most the pixel budget, or
// fail with a status. Seeds are small PNG and JPEG files, gray, gray+alpha, RGB and RGBA.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/image_folder.h"

namespace {

std::string Encode(int w, int h, int c, bool jpeg) {
  fedlgc::core::DecodedImage img;
  img.width = w;
  img.height = h;
  img.channels = c;
  img.pixels.resize(static_cast<size_t>(w) * h * c);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(i * 37);
  return fedlgc::core::EncodeImage(img, jpeg, 90).value();
}

}  // namespace

extern "C" const char* FedlgcFuzzSpec() { return "image"; }

std::vector<std::string> FedlgcFuzzSeeds() {
  return {Encode(5, 4, 1, false), Encode(3, 3, 3, false), Encode(2, 6, 4, false),
          Encode(4, 4, 2, false), Encode(8, 8, 1, true), Encode(9, 7, 3, true)};
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
