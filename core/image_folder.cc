// Image folders (see image_folder.h).
#include "core/image_folder.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <limits>
#include <memory>

#include "base/file.h"
#include "base/str.h"

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

absl::Status TooLarge(std::string_view what, uint64_t w, uint64_t h, uint64_t max_pixels) {
  return absl::InvalidArgumentError(
      StrCat(what, ": ", w, "x", h, " pixels is over the ", max_pixels, " an image may have"));
}

// libpng's simplified API. Read with an alpha channel, which is then dropped (not
// composited), so that a transparent pixel keeps its colour.
absl::StatusOr<DecodedImage> DecodePng(std::string_view bytes, std::string_view what,
                                       int channels, uint64_t max_pixels) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  struct Free {
    png_image* img;
    ~Free() { png_image_free(img); }
  } free_it{&img};
  if (png_image_begin_read_from_memory(&img, bytes.data(), bytes.size()) == 0) {
    return absl::InvalidArgumentError(StrCat(what, ": cannot be decoded (", img.message, ")"));
  }
  if (img.width == 0 || img.height == 0 ||
      static_cast<uint64_t>(img.width) * img.height > max_pixels) {
    return TooLarge(what, img.width, img.height, max_pixels);
  }
  const int want = channels != 0 ? channels : (img.format & PNG_FORMAT_FLAG_COLOR) ? 3 : 1;
  img.format = want == 1 ? PNG_FORMAT_GA : PNG_FORMAT_RGBA;
  std::vector<uint8_t> with_alpha(PNG_IMAGE_SIZE(img));
  if (png_image_finish_read(&img, nullptr, with_alpha.data(), 0, nullptr) == 0) {
    return absl::InvalidArgumentError(
        StrCat(what, ": cannot be decoded (", img.message, "; truncated?)"));
  }
  DecodedImage out;
  out.width = static_cast<int>(img.width);
  out.height = static_cast<int>(img.height);
  out.channels = want;
  const size_t pixels = static_cast<size_t>(out.width) * out.height;
  out.pixels.resize(pixels * want);
  for (size_t p = 0; p < pixels; ++p) {
    for (int c = 0; c < want; ++c) out.pixels[p * want + c] = with_alpha[p * (want + 1) + c];
  }
  return out;
}

struct TjDestroy {
  void operator()(void* h) const { tjDestroy(h); }
};

// libjpeg-turbo's TurboJPEG API; a warning (a truncated or corrupt stream) is an error.
absl::StatusOr<DecodedImage> DecodeJpeg(std::string_view bytes, std::string_view what,
                                        int channels, uint64_t max_pixels) {
  std::unique_ptr<void, TjDestroy> h(tjInitDecompress());
  if (h == nullptr) return absl::InternalError("TurboJPEG: cannot make a decompressor");
  auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto size = static_cast<unsigned long>(bytes.size());
  int w = 0, ht = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(h.get(), data, size, &w, &ht, &subsamp, &colorspace) != 0) {
    return absl::InvalidArgumentError(
        StrCat(what, ": cannot be decoded (", tjGetErrorStr2(h.get()), ")"));
  }
  if (w <= 0 || ht <= 0 || static_cast<uint64_t>(w) * static_cast<uint64_t>(ht) > max_pixels) {
    return TooLarge(what, static_cast<uint64_t>(std::max(w, 0)),
                    static_cast<uint64_t>(std::max(ht, 0)), max_pixels);
  }
  const int want = channels != 0 ? channels : colorspace == TJCS_GRAY ? 1 : 3;
  DecodedImage out;
  out.width = w;
  out.height = ht;
  out.channels = want;
  out.pixels.resize(static_cast<size_t>(w) * ht * want);
  if (tjDecompress2(h.get(), data, size, out.pixels.data(), w, 0, ht,
                    want == 1 ? TJPF_GRAY : TJPF_RGB, TJFLAG_STOPONWARNING) != 0) {
    return absl::InvalidArgumentError(
        StrCat(what, ": cannot be decoded (", tjGetErrorStr2(h.get()), ")"));
  }
  return out;
}

}  // namespace

absl::StatusOr<DecodedImage> DecodeImage(std::string_view bytes, std::string_view what,
                                         int channels, uint64_t max_pixels) {
  if (channels != 0 && channels != 1 && channels != 3) {
    return absl::InvalidArgumentError(StrCat("images have 1 or 3 channels, not ", channels));
  }
  if (IsPng(bytes)) return DecodePng(bytes, what, channels, max_pixels);
  if (IsJpeg(bytes)) return DecodeJpeg(bytes, what, channels, max_pixels);
  return absl::InvalidArgumentError(StrCat(what, ": not a PNG or JPEG file"));
}

absl::StatusOr<std::string> EncodeImage(const DecodedImage& image, bool jpeg, int quality) {
  const int c = image.channels;
  if (image.width <= 0 || image.height <= 0 || c < 1 || c > 4 ||
      image.pixels.size() != static_cast<size_t>(image.width) * image.height * c) {
    return absl::InvalidArgumentError("EncodeImage: an image of inconsistent size");
  }
  if (jpeg) {
    if (c != 1 && c != 3) return absl::InvalidArgumentError("a JPEG has 1 or 3 channels");
    std::unique_ptr<void, TjDestroy> h(tjInitCompress());
    unsigned char* buf = nullptr;
    unsigned long size = 0;
    if (tjCompress2(h.get(), image.pixels.data(), image.width, 0, image.height,
                    c == 1 ? TJPF_GRAY : TJPF_RGB, &buf, &size, c == 1 ? TJSAMP_GRAY : TJSAMP_444,
                    quality, 0) != 0) {
      return absl::InternalError(StrCat("TurboJPEG: ", tjGetErrorStr2(h.get())));
    }
    std::string out(reinterpret_cast<const char*>(buf), size);
    tjFree(buf);
    return out;
  }
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(image.width);
  img.height = static_cast<png_uint_32>(image.height);
  static constexpr png_uint_32 kFormats[] = {PNG_FORMAT_GRAY, PNG_FORMAT_GA, PNG_FORMAT_RGB,
                                             PNG_FORMAT_RGBA};
  img.format = kFormats[c - 1];
  png_alloc_size_t size = 0;
  if (png_image_write_to_memory(&img, nullptr, &size, 0, image.pixels.data(), 0, nullptr) == 0) {
    return absl::InternalError(StrCat("libpng: ", img.message));
  }
  std::string out(size, '\0');
  if (png_image_write_to_memory(&img, out.data(), &size, 0, image.pixels.data(), 0, nullptr) == 0) {
    return absl::InternalError(StrCat("libpng: ", img.message));
  }
  out.resize(size);
  return out;
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
  // The classes in turn (the first file of each class, then the second, ...), so that a
  // limit keeps every class: folders hold their classes one after the other.
  std::vector<std::pair<size_t, const std::string*>> order;
  order.reserve(total);
  for (size_t j = 0; order.size() < total; ++j) {
    for (size_t k = 0; k < files.size(); ++k) {
      if (j < files[k].size()) order.emplace_back(k, &files[k][j]);
    }
  }
  if (limit > 0 && order.size() > limit) order.resize(limit);
  size_t example_size = 0;
  std::string first;  // the first image's path, for messages
  for (const auto& [k, file] : order) {
    const std::string& path = *file;
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
      f.x.reserve(example_size * order.size());
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
  return f;
}

}  // namespace fedlgc::core
