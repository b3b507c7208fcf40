// Image classification data as people keep it: a folder with one subfolder per class, each
// holding PNG or JPEG files (decoded with libpng and libjpeg-turbo, Debian's libpng16 and
// libturbojpeg; both fuzzed upstream. stb_image was tried first: the fuzz target crashed
// Debian's 2022 copy of it on a mutated JPEG within seconds).
// Class k is the k-th subfolder in name order, so a training and a test folder with the
// same class folders agree on every label (an empty class folder still takes its place).
// Every image must have the first image's size; grayscale images load with one channel,
// others with three (RGB; alpha dropped); values are scaled to [0, 1].
#ifndef FEDLGC_CORE_IMAGE_FOLDER_H_
#define FEDLGC_CORE_IMAGE_FOLDER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::core {

struct DecodedImage {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;  // height * width * channels, interleaved (HWC)
};

// Decodes PNG or JPEG bytes (`what` names the file in errors). `channels` 1 or 3 converts
// to that many; 0 keeps the file's (gray and gray+alpha as 1, the rest as 3). An alpha
// channel is dropped. Images over `max_pixels` are refused before they are decoded; a
// truncated or corrupt file is refused, not decoded in part.
absl::StatusOr<DecodedImage> DecodeImage(std::string_view bytes, std::string_view what,
                                         int channels = 0, uint64_t max_pixels = 1ull << 26);
// PNG (1 to 4 channels) or JPEG (1 or 3, at `quality`) bytes of `image`: for tests and
// tools that make image folders.
absl::StatusOr<std::string> EncodeImage(const DecodedImage& image, bool jpeg = false,
                                        int quality = 95);

struct ImageFolder {
  std::vector<std::string> classes;  // the subfolders' names, in label order
  int width = 0, height = 0, channels = 0;
  std::vector<float> x;              // examples as [channels, height, width], in [0, 1]
  std::vector<int32_t> labels;
};

// Reads every PNG/JPEG under dir/<class>/ (class folders and files in name order), the
// classes in turn: the first file of each class, then the second, and so on. `limit` > 0
// keeps the first `limit` images in that order, so every class keeps its share.
absl::StatusOr<ImageFolder> ReadImageFolder(const std::string& dir, size_t limit = 0);

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_IMAGE_FOLDER_H_
