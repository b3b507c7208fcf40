// Image folders (see image_folder.h).
#include "core/image_folder.h"

#include <stb/stb_image.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <limits>
#include <memory>

#include "codecs/str.h"
#include "core/atomic_file.h"

namespace fedlgc::core {
namespace {

namespace fs = std::filesystem;

bool IsImageName(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == "png" || ext == "jpg" || ext == "jpeg";
}

bool IsPng(std::string_view b) { return b.substr(0, 8) == std::string_view("\x89PNG\r\n\x1a\n", 8); }
bool IsJpeg(std::string_view b) { return b.substr(0, 3) == "\xFF\xD8\xFF"; }

struct StbFree {
  void operator()(unsigned char* p) const { stbi_image_free(p); }
};

}  // namespace

absl::StatusOr<DecodedImage> DecodeImage(std::string_view bytes, std::string_view what,
                                         int channels, uint64_t max_pixels) {
  if (!IsPng(bytes) && !IsJpeg(bytes)) {
    return absl::InvalidArgumentError(StrCat(what, ": not a PNG or JPEG file"));
  }
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(StrCat(what, ": too large"));
  }
  const auto* data = reinterpret_cast<const stbi_uc*>(bytes.data());
  const int len = static_cast<int>(bytes.size());
  int w = 0, h = 0, comp = 0;
  if (stbi_info_from_memory(data, len, &w, &h, &comp) == 0) {
    return absl::InvalidArgumentError(
        StrCat(what, ": cannot be decoded (", stbi_failure_reason(), ")"));
  }
  if (w <= 0 || h <= 0 || static_cast<uint64_t>(w) * static_cast<uint64_t>(h) > max_pixels) {
    return absl::InvalidArgumentError(StrCat(what, ": ", w, "x", h, " pixels is over the ",
                                             max_pixels, " an image may have"));
  }
  const int want = channels != 0 ? channels : (comp <= 2 ? 1 : 3);
  int got_w = 0, got_h = 0, file_comp = 0;
  std::unique_ptr<unsigned char, StbFree> px(
      stbi_load_from_memory(data, len, &got_w, &got_h, &file_comp, want));
  if (px == nullptr) {
    return absl::InvalidArgumentError(
        StrCat(what, ": cannot be decoded (", stbi_failure_reason(), "; truncated?)"));
  }
  if (got_w != w || got_h != h) {
    return absl::InvalidArgumentError(StrCat(what, ": its header and its pixels disagree"));
  }
  DecodedImage img;
  img.width = w;
  img.height = h;
  img.channels = want;
  img.pixels.assign(px.get(), px.get() + static_cast<size_t>(w) * h * want);
  return img;
}

absl::StatusOr<ImageFolder> ReadImageFolder(const std::string& dir, size_t limit) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(StrCat(dir, ": not a folder (images:DIR wants one subfolder per class)"));
  }
  ImageFolder f;
  std::vector<std::vector<std::string>> files;
  std::vector<fs::path> class_dirs;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory()) class_dirs.push_back(e.path());
  }
  if (ec) return absl::NotFoundError(StrCat(dir, ": ", ec.message()));
  std::sort(class_dirs.begin(), class_dirs.end());
  if (class_dirs.empty()) {
    return absl::InvalidArgumentError(
        StrCat(dir, ": no class subfolders (images:DIR wants DIR/<class>/<image>.png)"));
  }
  size_t total = 0;
  for (const fs::path& c : class_dirs) {
    f.classes.push_back(c.filename().string());
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(c, ec)) {
      if (e.is_regular_file() && IsImageName(e.path().filename().string())) {
        names.push_back(e.path().string());
      }
    }
    std::sort(names.begin(), names.end());
    total += names.size();
    files.push_back(std::move(names));
  }
  if (total == 0) return absl::InvalidArgumentError(StrCat(dir, ": no .png, .jpg or .jpeg files"));
  size_t example_size = 0;
  std::string first;  // the first image's path, for messages
  for (size_t k = 0; k < files.size(); ++k) {
    for (const std::string& path : files[k]) {
      if (limit > 0 && f.labels.size() >= limit) return f;
      auto bytes = ReadFile(path);
      if (!bytes.ok()) return absl::NotFoundError(StrCat(path, ": cannot read"));
      auto img = DecodeImage(*bytes, path, f.channels);
      if (!img.ok()) return img.status();
      if (f.labels.empty()) {
        first = path;
        f.width = img->width;
        f.height = img->height;
        f.channels = img->channels;
        example_size = static_cast<size_t>(f.width) * f.height * f.channels;
        f.x.reserve(example_size * (limit > 0 ? std::min(limit, total) : total));
      } else if (img->width != f.width || img->height != f.height) {
        return absl::InvalidArgumentError(
            StrCat(path, ": ", img->width, "x", img->height, " pixels; the first image (",
                   first, ") is ", f.width, "x", f.height,
                   ": every image of a data set must have one size"));
      }
      // HWC bytes to CHW floats.
      const size_t base = f.x.size();
      f.x.resize(base + example_size);
      const size_t plane = static_cast<size_t>(f.width) * f.height;
      for (size_t p = 0; p < plane; ++p) {
        for (int c = 0; c < f.channels; ++c) {
          f.x[base + c * plane + p] = img->pixels[p * f.channels + c] * (1.0f / 255.0f);
        }
      }
      f.labels.push_back(static_cast<int32_t>(k));
    }
  }
  return f;
}

}  // namespace fedlgc::core
