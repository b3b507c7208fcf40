// The data sets (see dataset.h): Fashion-MNIST's IDX files (through zlib, so the .gz
// files need no unpacking), the synthetic task, and the user's files through the npz, csv
// and image folder readers.
#include "core/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>

#include "base/str.h"
#include "core/csv.h"
#include "core/image_folder.h"
#include "core/npz.h"

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



bool StartsWith(const std::string& s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

bool IsWhole(double v) { return v == std::floor(v) && std::fabs(v) < 2147483647.0; }

// Labels from numbers: classes when `targets` allows and every value is a whole number
// >= 0, float targets else. `at(i)` says where value i is, for messages.
template <typename At>
absl::Status SetTargets(Dataset* d, std::span<const double> values, const std::string& targets,
                        const At& at) {
  bool whole = true;
  for (double v : values) whole = whole && IsWhole(v);
  const bool classes = targets == "classes" || (targets == "auto" && whole);
  if (!classes) {
    d->classes = 0;
    d->targets.assign(values.begin(), values.end());
    return absl::OkStatus();
  }
  d->labels.resize(values.size());
  int32_t top = -1;
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    if (!IsWhole(v) || v < 0) {
      return absl::InvalidArgumentError(
          StrCat(d->source, ": ", at(i), " is ", v, ": a class label is a whole number >= 0",
                 targets == "classes" ? " (--targets classes)" : ""));
    }
    d->labels[i] = static_cast<int32_t>(v);
    top = std::max(top, d->labels[i]);
  }
  d->classes = static_cast<uint32_t>(top) + 1;
  return absl::OkStatus();
}

void Truncate(Dataset* d, size_t limit) {
  if (limit == 0 || limit >= d->n) return;
  d->n = limit;
  (d->integer_inputs ? d->ids.resize(limit * d->example_size())
                     : d->x.resize(limit * d->example_size()));
  if (d->classification()) {
    d->labels.resize(limit);
    uint32_t top = 0;
    for (int32_t l : d->labels) top = std::max(top, static_cast<uint32_t>(l) + 1);
    d->classes = top;
  } else {
    d->targets.resize(limit * d->target_size());
  }
}

absl::StatusOr<Dataset> LoadNpz(const std::string& path, const std::string& targets,
                                const std::string& inputs, bool train) {
  auto arrays = ReadNpz(path);
  if (!arrays.ok()) return arrays.status();
  const char* split = train ? "_train" : "_test";
  const std::string xs_split = StrCat("x", split), ys_split = StrCat("y", split);
  const bool has_split = arrays->count(xs_split) && arrays->count(ys_split);
  const std::string xs = has_split ? xs_split : std::string(1, 'x');
  const std::string ys = has_split ? ys_split : std::string(1, 'y');
  if (!arrays->count(xs) || !arrays->count(ys)) {
    std::vector<std::string> names;
    for (const auto& [name, a] : *arrays) names.push_back(StrCat(name, " ", a.shape_text()));
    return absl::InvalidArgumentError(
        StrCat(path, ": no arrays x and y (nor x", split, " and y", split,
               ") in the archive; it holds: ", names.empty() ? "nothing" : StrJoin(names, ", "),
               " (save it with numpy.savez(path, x=..., y=...))"));
  }
  return DatasetFromArrays(arrays->at(xs), arrays->at(ys), targets,
                           StrCat("npz:", path, " (", xs, ", ", ys, ")"), inputs);
}

absl::StatusOr<Dataset> LoadCsv(const DataOptions& o, const std::string& path, size_t limit) {
  auto table = ReadCsv(path, o.label_column, limit);
  if (!table.ok()) return table.status();
  Dataset d;
  d.source = StrCat("csv:", path);
  d.n = table->rows;
  d.shape = {static_cast<int64_t>(table->feature_names.size())};
  d.x = std::move(table->features);
  if (o.inputs == "ids") {
    // Integer columns (token ids, categories) as integers.
    d.integer_inputs = true;
    d.ids.resize(d.x.size());
    for (size_t i = 0; i < d.x.size(); ++i) {
      if (!IsWhole(d.x[i])) {
        return absl::InvalidArgumentError(
            StrCat(d.source, ": row ", i / d.shape[0] + 1, " holds ", d.x[i], " in column '",
                   table->feature_names[i % d.shape[0]], "': --inputs ids reads whole numbers"));
      }
      d.ids[i] = static_cast<int64_t>(d.x[i]);
    }
    d.x.clear();
  }
  if (absl::Status st = SetTargets(&d, table->labels, o.targets,
                                   [&](size_t i) {
                                     return StrCat("column '", o.label_column, "' of row ", i + 1);
                                   });
      !st.ok()) {
    return st;
  }
  return d;
}

absl::StatusOr<Dataset> LoadImages(const std::string& dir, size_t limit) {
  auto folder = ReadImageFolder(dir, limit);
  if (!folder.ok()) return folder.status();
  Dataset d;
  d.source = StrCat("images:", dir);
  d.n = folder->labels.size();
  d.shape = {folder->channels, folder->height, folder->width};
  d.x = std::move(folder->x);
  d.labels = std::move(folder->labels);
  d.classes = static_cast<uint32_t>(folder->classes.size());
  return d;
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
  d.source = "fashion-mnist";
  d.shape = {1, header[2], header[3]};
  d.classes = 10;
  const size_t n = limit > 0 ? std::min<size_t>(limit, header[1]) : header[1];
  d.n = n;
  std::vector<uint8_t> raw(n * d.example_size());
  if (absl::Status st = ReadExactly(images->get(), raw.data(), raw.size(), image_path); !st.ok()) {
    return st;
  }
  std::vector<uint8_t> raw_labels(n);
  if (absl::Status st = ReadExactly(labels->get(), raw_labels.data(), n, label_path); !st.ok()) {
    return st;
  }
  for (uint8_t l : raw_labels) {
    if (l >= d.classes) return absl::DataLossError(StrCat(label_path, ": label ", l, " >= 10"));
  }
  d.labels.assign(raw_labels.begin(), raw_labels.end());
  d.x.resize(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) d.x[i] = raw[i] * (1.0f / 255.0f);
  return d;
}

Dataset SyntheticImages(size_t n, uint64_t seed, float noise) {
  Dataset d;
  d.source = StrCat("synthetic:", n);
  d.classes = 10;
  d.n = n;
  const size_t pixels = d.example_size();
  std::mt19937_64 pattern_rng(0xFED1C);  // class patterns are the same for every seed
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> patterns(d.classes * pixels);
  for (float& p : patterns) p = u(pattern_rng) < 0.3f ? 1.0f : 0.0f;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> gauss(0.0f, noise);
  d.labels.resize(n);
  d.x.resize(n * pixels);
  for (size_t i = 0; i < n; ++i) {
    const int32_t c = static_cast<int32_t>(rng() % d.classes);
    d.labels[i] = c;
    for (size_t j = 0; j < pixels; ++j) {
      d.x[i * pixels + j] = std::clamp(patterns[c * pixels + j] + gauss(rng), 0.0f, 1.0f);
    }
  }
  return d;
}


size_t Dataset::example_size() const {
  size_t s = 1;
  for (int64_t d : shape) s *= static_cast<size_t>(d);
  return s;
}

size_t Dataset::target_size() const {
  size_t s = 1;
  for (int64_t d : target_shape) s *= static_cast<size_t>(d);
  return s;
}

std::string Dataset::ShapeText(const std::vector<int64_t>& shape) {
  return StrCat("[", StrJoin(shape, ", "), "]");
}

absl::Status DataOptions::Validate() const {
  if (targets != "auto" && targets != "classes" && targets != "values") {
    return absl::InvalidArgumentError(
        StrCat("--targets '", targets, "': expected auto, classes or values"));
  }
  if (inputs != "auto" && inputs != "float" && inputs != "ids") {
    return absl::InvalidArgumentError(
        StrCat("--inputs '", inputs, "': expected auto, float or ids"));
  }
  if (inputs == "ids" && !StartsWith(spec, "npz:") && !StartsWith(spec, "csv:")) {
    return absl::InvalidArgumentError(
        StrCat("--inputs ids: integer inputs come from npz or csv files, not ", spec));
  }
  if (spec == "fashion-mnist") return absl::OkStatus();
  if (StartsWith(spec, "synthetic:")) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(spec.c_str() + 10, &end, 10);
    if (*end == '\0' && n > 0 && n <= 10000000) return absl::OkStatus();
  }
  for (const char* kind : {"npz:", "csv:", "images:"}) {
    if (StartsWith(spec, kind) && spec.size() > std::strlen(kind)) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(StrCat(
      "data \"", spec,
      "\": expected fashion-mnist, synthetic:N, npz:PATH, csv:PATH or images:DIR"));
}

bool DataOptions::IsFile() const {
  return StartsWith(spec, "npz:") || StartsWith(spec, "csv:") || StartsWith(spec, "images:");
}

absl::StatusOr<Dataset> DatasetFromArrays(const NpyArray& x, const NpyArray& y,
                                          const std::string& targets, const std::string& what,
                                          const std::string& inputs) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(StrCat(what, ": ", why));
  };
  if (x.shape.empty() || y.shape.empty()) return bad("x and y must have one row per example");
  const bool images = x.type == NpyType::kU8 && inputs == "auto";
  if (x.type == NpyType::kBool && inputs != "float") {
    return bad("x is bool: convert it with x.astype('float32') or x.astype('int64')");
  }
  const bool ids = inputs == "ids" || (inputs == "auto" && !x.is_float() && !images);
  if (x.shape[0] != y.shape[0]) {
    return bad(StrCat("x has ", x.shape[0], " rows ", x.shape_text(), ", y has ", y.shape[0], " ",
                      y.shape_text()));
  }
  Dataset d;
  d.source = what;
  d.n = static_cast<size_t>(x.shape[0]);
  d.shape.assign(x.shape.begin() + 1, x.shape.end());
  if (d.shape.empty()) d.shape = {1};
  if (ids) {
    // Token ids: whole numbers, kept as integers.
    d.integer_inputs = true;
    d.ids.resize(x.elements());
    for (size_t i = 0; i < d.ids.size(); ++i) {
      const double v = x.At(i);
      if (!IsWhole(v)) {
        return bad(StrCat("example ", i / d.example_size(), " holds ", v,
                          ": integer inputs (token ids) are whole numbers below 2^31"));
      }
      d.ids[i] = static_cast<int64_t>(v);
    }
  } else if (x.type == NpyType::kF32) {
    d.x.resize(x.elements());
    if (!d.x.empty()) std::memcpy(d.x.data(), x.data.data(), x.data.size());
  } else {
    d.x.resize(x.elements());
    const float scale = images ? 1.0f / 255.0f : 1.0f;
    for (size_t i = 0; i < d.x.size(); ++i) d.x[i] = static_cast<float>(x.At(i)) * scale;
  }
  const bool integer_y = !y.is_float();
  if (targets == "values" || (targets == "auto" && !integer_y)) {
    d.target_shape.assign(y.shape.begin() + 1, y.shape.end());
    d.targets.resize(y.elements());
    for (size_t i = 0; i < d.targets.size(); ++i) d.targets[i] = static_cast<float>(y.At(i));
  } else {
    if (y.shape.size() > 2 || (y.shape.size() == 2 && y.shape[1] != 1)) {
      return bad(StrCat("class labels y must have shape (n,) or (n, 1), not ", y.shape_text(),
                        " (one-hot labels: y.argmax(1); float targets: a float dtype)"));
    }
    std::vector<double> values(d.n);
    for (size_t i = 0; i < d.n; ++i) values[i] = y.At(i);
    if (absl::Status st = SetTargets(&d, values, "classes",
                                     [](size_t i) { return StrCat("y[", i, "]"); });
        !st.ok()) {
      return st;
    }
  }
  if (absl::Status st = CheckDataset(d); !st.ok()) return st;
  return d;
}

absl::Status CheckDataset(const Dataset& d) {
  if (d.n == 0) return absl::InvalidArgumentError(StrCat(d.source, ": no examples"));
  if (d.integer_inputs && (d.ids.size() != d.n * d.example_size() || !d.x.empty())) {
    return absl::InvalidArgumentError(StrCat(d.source, ": ", d.ids.size(), " integer inputs for ",
                                             d.n, " examples of shape ", Dataset::ShapeText(d.shape)));
  }
  if (!d.integer_inputs && d.x.size() != d.n * d.example_size()) {
    return absl::InvalidArgumentError(StrCat(d.source, ": ", d.x.size(), " feature values for ",
                                             d.n, " examples of shape ", Dataset::ShapeText(d.shape)));
  }
  const size_t es = d.example_size();
  for (size_t i = 0; i < d.x.size(); ++i) {
    if (!std::isfinite(d.x[i])) {
      return absl::InvalidArgumentError(StrCat(d.source, ": example ", i / es, " has ",
                                               d.x[i], " at feature ", i % es,
                                               ": features must be finite"));
    }
  }
  if (d.classification()) {
    if (d.labels.size() != d.n) {
      return absl::InvalidArgumentError(StrCat(d.source, ": ", d.labels.size(), " labels for ",
                                               d.n, " examples"));
    }
    for (size_t i = 0; i < d.n; ++i) {
      if (d.labels[i] < 0 || static_cast<uint32_t>(d.labels[i]) >= d.classes) {
        return absl::InvalidArgumentError(StrCat(d.source, ": label ", d.labels[i], " of example ",
                                                 i, " is outside [0, ", d.classes, ")"));
      }
    }
  } else {
    const size_t ts = d.target_size();
    if (d.targets.size() != d.n * ts) {
      return absl::InvalidArgumentError(StrCat(d.source, ": ", d.targets.size(),
                                               " target values for ", d.n, " examples"));
    }
    for (size_t i = 0; i < d.targets.size(); ++i) {
      if (!std::isfinite(d.targets[i])) {
        return absl::InvalidArgumentError(StrCat(d.source, ": the target of example ", i / ts,
                                                 " is ", d.targets[i], ": targets must be finite"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> LoadDataset(const DataOptions& o, bool train, size_t limit) {
  if (absl::Status st = o.Validate(); !st.ok()) return st;
  const std::string& s = o.spec;
  absl::StatusOr<Dataset> d;
  if (s == "fashion-mnist") {
    return LoadFashionMnist(o.fashion_dir, train, limit);
  } else if (StartsWith(s, "synthetic:")) {
    const size_t n = std::strtoull(s.c_str() + 10, nullptr, 10);
    return SyntheticImages(limit > 0 ? std::min(limit, n) : n, train ? 11 : 12);
  } else if (StartsWith(s, "npz:")) {
    d = LoadNpz(s.substr(4), o.targets, o.inputs, train);
  } else if (StartsWith(s, "csv:")) {
    d = LoadCsv(o, s.substr(4), limit);
  } else {
    d = LoadImages(s.substr(7), limit);
  }
  if (!d.ok()) return d.status();
  Truncate(&*d, limit);
  if (absl::Status st = CheckDataset(*d); !st.ok()) return st;
  return d;
}

Dataset Subset(const Dataset& d, std::span<const uint32_t> indices) {
  Dataset out;
  out.source = d.source;
  out.shape = d.shape;
  out.classes = d.classes;
  out.target_shape = d.target_shape;
  out.n = indices.size();
  out.integer_inputs = d.integer_inputs;
  const size_t es = d.example_size(), ts = d.target_size();
  for (uint32_t i : indices) {
    if (d.integer_inputs) {
      out.ids.insert(out.ids.end(), d.ids.begin() + i * es, d.ids.begin() + (i + 1) * es);
    } else {
      out.x.insert(out.x.end(), d.x.begin() + i * es, d.x.begin() + (i + 1) * es);
    }
    if (d.classification()) {
      out.labels.push_back(d.labels[i]);
    } else {
      out.targets.insert(out.targets.end(), d.targets.begin() + i * ts,
                         d.targets.begin() + (i + 1) * ts);
    }
  }
  return out;
}

}  // namespace fedlgc::core
