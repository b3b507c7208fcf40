// Fashion-MNIST IDX reader (through zlib, so the .gz files need no unpacking) and the
// synthetic dataset.
#include "core/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>

#include "codecs/str.h"

namespace fedlgc::core {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// Opens `base` or `base.gz` (zlib reads plain files transparently too).
absl::StatusOr<GzFile> Open(const std::string& base) {
  for (const std::string& path : {base, base + ".gz"}) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (f != nullptr) return GzFile(f);
  }
  return absl::NotFoundError(StrCat("cannot open ", base, "(.gz); install the Debian package ",
                                    "dataset-fashion-mnist (scripts/setup.sh does)"));
}

absl::Status ReadExactly(gzFile f, void* dst, size_t n, const std::string& what) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
    const int got = gzread(f, p, chunk);
    if (got <= 0) return absl::DataLossError(StrCat(what, ": truncated"));
    p += got;
    n -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ReadBigEndian(gzFile f, const std::string& what) {
  uint8_t b[4];
  if (absl::Status st = ReadExactly(f, b, 4, what); !st.ok()) return st;
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}

}  // namespace

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, bool train, size_t limit) {
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  const std::string image_path = prefix + "-images-idx3-ubyte";
  const std::string label_path = prefix + "-labels-idx1-ubyte";
  auto images = Open(image_path);
  if (!images.ok()) return images.status();
  auto labels = Open(label_path);
  if (!labels.ok()) return labels.status();

  uint32_t header[4];
  for (int i = 0; i < 4; ++i) {
    auto v = ReadBigEndian(images->get(), image_path);
    if (!v.ok()) return v.status();
    header[i] = *v;
  }
  if (header[0] != 0x803 || header[2] == 0 || header[3] == 0 || header[2] > 1024 ||
      header[3] > 1024) {
    return absl::DataLossError(StrCat(image_path, ": not an IDX3 image file"));
  }
  uint32_t lheader[2];
  for (int i = 0; i < 2; ++i) {
    auto v = ReadBigEndian(labels->get(), label_path);
    if (!v.ok()) return v.status();
    lheader[i] = *v;
  }
  if (lheader[0] != 0x801 || lheader[1] != header[1]) {
    return absl::DataLossError(StrCat(label_path, ": not an IDX1 label file matching the images"));
  }
  Dataset d;
  d.rows = header[2];
  d.cols = header[3];
  const size_t n = limit > 0 ? std::min<size_t>(limit, header[1]) : header[1];
  std::vector<uint8_t> raw(n * d.pixels());
  if (absl::Status st = ReadExactly(images->get(), raw.data(), raw.size(), image_path); !st.ok()) {
    return st;
  }
  d.labels.resize(n);
  if (absl::Status st = ReadExactly(labels->get(), d.labels.data(), n, label_path); !st.ok()) {
    return st;
  }
  for (uint8_t l : d.labels) {
    if (l >= d.classes) return absl::DataLossError(StrCat(label_path, ": label ", l, " >= 10"));
  }
  d.images.resize(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) d.images[i] = raw[i] * (1.0f / 255.0f);
  return d;
}

Dataset SyntheticImages(size_t n, uint64_t seed, float noise) {
  Dataset d;
  std::mt19937_64 pattern_rng(0xFED1C);  // class patterns are the same for every seed
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> patterns(d.classes * d.pixels());
  for (float& p : patterns) p = u(pattern_rng) < 0.3f ? 1.0f : 0.0f;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> gauss(0.0f, noise);
  d.labels.resize(n);
  d.images.resize(n * d.pixels());
  for (size_t i = 0; i < n; ++i) {
    const uint8_t c = static_cast<uint8_t>(rng() % d.classes);
    d.labels[i] = c;
    for (size_t j = 0; j < d.pixels(); ++j) {
      d.images[i * d.pixels() + j] =
          std::clamp(patterns[c * d.pixels() + j] + gauss(rng), 0.0f, 1.0f);
    }
  }
  return d;
}

absl::StatusOr<Dataset> LoadNamedDataset(const std::string& name, const std::string& dir,
                                         bool train, size_t limit) {
  if (name == "fashion-mnist") return LoadFashionMnist(dir, train, limit);
  if (name.rfind("synthetic:", 0) == 0) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(name.c_str() + 10, &end, 10);
    if (*end == '\0' && n > 0 && n <= 10000000) {
      return SyntheticImages(limit > 0 ? std::min<size_t>(limit, n) : n, train ? 11 : 12);
    }
  }
  return absl::InvalidArgumentError(
      StrCat("data set \"", name, "\": expected fashion-mnist or synthetic:N"));
}

}  // namespace fedlgc::core
