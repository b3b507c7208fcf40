// Fuzz target for the .npz reader (core/npz.h) and the arrays-to-dataset step
// (core/dataset.h): any bytes must parse as an archive of arrays or fail with a status;
// parsed x and y become a dataset whose sizes agree and whose values are finite, or fail
// with a status. Nothing may allocate more than the input can expand to. Seeds are
// archives written by WriteNpz (uint8 images with int labels, float targets).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/dataset.h"
#include "core/npz.h"

namespace {

using fedlgc::core::NpyArray;
using fedlgc::core::NpyType;

template <typename T>
NpyArray Array(NpyType type, std::vector<int64_t> shape, const std::vector<T>& v) {
  NpyArray a;
  a.type = type;
  a.shape = std::move(shape);
  a.data.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  return a;
}

std::string Archive(const fedlgc::core::NpzArrays& arrays) {
  const std::string path = "/tmp/fedlgc_npz_fuzz_seed.npz";
  if (!fedlgc::core::WriteNpz(path, arrays).ok()) std::abort();
  FILE* f = std::fopen(path.c_str(), "rb");
  std::string bytes;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) bytes.append(buf, n);
  std::fclose(f);
  return bytes;
}

}  // namespace

extern "C" const char* FedlgcFuzzSpec() { return "npz"; }

std::vector<std::string> FedlgcFuzzSeeds() {
  std::vector<uint8_t> px(4 * 3 * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i);
  return {Archive({{"x", Array(NpyType::kU8, {4, 3, 3}, px)},
                   {"y", Array(NpyType::kI64, {4}, std::vector<int64_t>{0, 1, 2, 1})}}),
          Archive({{"x_train", Array(NpyType::kF32, {2, 2}, std::vector<float>{1, 2, 3, 4})},
                   {"y_train", Array(NpyType::kF64, {2, 1}, std::vector<double>{0.5, 2})}}),
          fedlgc::core::NpyBytes(Array(NpyType::kF16, {3}, std::vector<uint16_t>{0x3C00, 0, 1}))};
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)fedlgc::core::ParseNpy(bytes, "fuzz.npy");
  auto arrays = fedlgc::core::ParseNpz(bytes, "fuzz.npz");
  if (!arrays.ok()) return 0;
  for (const auto& [name, a] : *arrays) {
    if (a.data.size() != a.elements() * a.item_bytes()) std::abort();
    for (size_t i = 0; i < a.elements() && i < 64; ++i) (void)a.At(i);
  }
  for (const char* targets : {"auto", "classes", "values"}) {
    if (!arrays->count("x") || !arrays->count("y")) break;
    auto d = fedlgc::core::DatasetFromArrays(arrays->at("x"), arrays->at("y"), targets, "fuzz");
    if (!d.ok()) continue;
    if (!fedlgc::core::CheckDataset(*d).ok()) std::abort();
    for (float v : d->x) {
      if (!std::isfinite(v)) std::abort();
    }
  }
  return 0;
}
