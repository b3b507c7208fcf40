// .npy and .npz reading and writing (see npz.h).
#include "core/npz.h"

#include <zip.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "base/str.h"

namespace fedlgc::core {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;
// A header is a short dict; numpy pads it to 64 bytes. Anything longer is not one.
constexpr size_t kMaxHeaderBytes = 1 << 16;
constexpr int kMaxDims = 16;

struct TypeInfo {
  NpyType type;
  char kind;  // numpy's: 'b' bool, 'u' unsigned, 'i' signed, 'f' float
  size_t bytes;
  const char* name;
};

constexpr TypeInfo kTypes[] = {
    {NpyType::kBool, 'b', 1, "bool"},       {NpyType::kU8, 'u', 1, "uint8"},
    {NpyType::kI8, 'i', 1, "int8"},         {NpyType::kU16, 'u', 2, "uint16"},
    {NpyType::kI16, 'i', 2, "int16"},       {NpyType::kU32, 'u', 4, "uint32"},
    {NpyType::kI32, 'i', 4, "int32"},       {NpyType::kU64, 'u', 8, "uint64"},
    {NpyType::kI64, 'i', 8, "int64"},       {NpyType::kF16, 'f', 2, "float16"},
    {NpyType::kF32, 'f', 4, "float32"},     {NpyType::kF64, 'f', 8, "float64"},
};

const TypeInfo& InfoOf(NpyType t) {
  for (const TypeInfo& i : kTypes) {
    if (i.type == t) return i;
  }
  return kTypes[0];  // every NpyType is in the table
}

// IEEE half to float.
float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
    }
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

// A reader of the header's dict literal: {'descr': '<f4', 'fortran_order': False,
// 'shape': (3, 4), }. Keys and values are the three numpy writes; anything else is an
// error.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : s_(text) {}

  absl::Status Parse(std::string* descr, bool* fortran, std::vector<int64_t>* shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    Skip();
    if (!Eat('{')) return Err("the header is not a dict");
    for (;;) {
      Skip();
      if (Eat('}')) break;
      std::string key;
      if (!Quoted(&key)) return Err("a key of the header is not a string");
      Skip();
      if (!Eat(':')) return Err("expected ':' in the header");
      Skip();
      if (key == "descr") {
        if (!Quoted(descr)) return Err("'descr' is not a string (structured dtypes are not read)");
        have_descr = true;
      } else if (key == "fortran_order") {
        if (Word("True")) {
          *fortran = true;
        } else if (Word("False")) {
          *fortran = false;
        } else {
          return Err("'fortran_order' is not True or False");
        }
        have_fortran = true;
      } else if (key == "shape") {
        if (absl::Status st = Tuple(shape); !st.ok()) return st;
        have_shape = true;
      } else {
        return Err(StrCat("unknown header key '", key, "'"));
      }
      Skip();
      if (Eat(',')) continue;
      Skip();
      if (Eat('}')) break;
      return Err("expected ',' or '}' in the header");
    }
    if (!have_descr || !have_fortran || !have_shape) {
      return Err("the header lacks 'descr', 'fortran_order' or 'shape'");
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Err(std::string_view what) const {
    return absl::InvalidArgumentError(std::string(what));
  }
  void Skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool Eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool Word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  bool Quoted(std::string* out) {
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) return false;
    const char q = s_[i_++];
    const size_t end = s_.find(q, i_);
    if (end == std::string_view::npos || end - i_ > 64) return false;
    *out = std::string(s_.substr(i_, end - i_));
    i_ = end + 1;
    return true;
  }
  absl::Status Tuple(std::vector<int64_t>* shape) {
    shape->clear();
    if (!Eat('(')) return Err("'shape' is not a tuple");
    for (;;) {
      Skip();
      if (Eat(')')) return absl::OkStatus();
      int64_t v = 0;
      size_t digits = 0;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
        if (++digits > 15) return Err("a dimension of 'shape' is too large");
        v = v * 10 + (s_[i_++] - '0');
      }
      // numpy writes `3L` on Python 2.
      if (digits > 0) Eat('L');
      if (digits == 0) return Err("'shape' holds something that is not a size");
      if (shape->size() == kMaxDims) return Err("'shape' has too many dimensions");
      shape->push_back(v);
      Skip();
      if (Eat(',')) continue;
      Skip();
      if (Eat(')')) return absl::OkStatus();
      return Err("expected ',' or ')' in 'shape'");
    }
  }

  std::string_view s_;
  size_t i_ = 0;
};

// '<f4', '|u1', '>i8', 'float32' is not written by numpy (it writes the str form).
absl::StatusOr<std::pair<NpyType, bool>> ParseDescr(const std::string& descr) {
  if (descr.size() < 3) return absl::InvalidArgumentError(StrCat("dtype '", descr, "'"));
  const char order = descr[0];
  const char kind = descr[1];
  size_t bytes = 0;
  for (size_t i = 2; i < descr.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(descr[i])) || bytes > 64) {
      return absl::InvalidArgumentError(StrCat("dtype '", descr, "' is not read"));
    }
    bytes = bytes * 10 + static_cast<size_t>(descr[i] - '0');
  }
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    return absl::InvalidArgumentError(StrCat("dtype '", descr, "': unknown byte order"));
  }
  for (const TypeInfo& t : kTypes) {
    if (t.kind == kind && t.bytes == bytes) {
      return std::make_pair(t.type, order == '>' && bytes > 1);
    }
  }
  return absl::InvalidArgumentError(
      StrCat("dtype '", descr, "' is not read (numbers only: bool, int8-64, uint8-64, float16-64)"));
}

struct ZipCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
};
struct ZipFileCloser {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};
using ZipPtr = std::unique_ptr<zip_t, ZipCloser>;

std::string ZipErrorText(zip_error_t* err) {
  std::string text = zip_error_strerror(err);
  zip_error_fini(err);
  return text;
}

// Reads every member of an open archive. `archive_bytes` bounds what a member may expand
// to (deflate cannot expand more than 1032 times).
absl::StatusOr<NpzArrays> ReadMembers(zip_t* z, uint64_t archive_bytes, std::string_view what) {
  const zip_int64_t n = zip_get_num_entries(z, 0);
  if (n < 0) return absl::DataLossError(StrCat(what, ": cannot list the archive"));
  NpzArrays arrays;
  for (zip_int64_t i = 0; i < n; ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(z, static_cast<zip_uint64_t>(i), 0, &st) != 0 ||
        (st.valid & ZIP_STAT_NAME) == 0 || (st.valid & ZIP_STAT_SIZE) == 0 ||
        (st.valid & ZIP_STAT_COMP_SIZE) == 0) {
      return absl::DataLossError(StrCat(what, ": member ", i, " cannot be read"));
    }
    std::string name = st.name;
    const std::string member = StrCat(what, ": ", name);
    if (name.size() < 4 || name.compare(name.size() - 4, 4, ".npy") != 0) continue;
    name.resize(name.size() - 4);
    if (st.comp_size > archive_bytes || st.size > 1032 * st.comp_size + 1024) {
      return absl::DataLossError(StrCat(member, ": its sizes do not fit the archive (truncated?)"));
    }
    std::unique_ptr<zip_file_t, ZipFileCloser> f(zip_fopen_index(z, static_cast<zip_uint64_t>(i), 0));
    if (f == nullptr) {
      return absl::DataLossError(StrCat(member, ": cannot open (", zip_strerror(z), ")"));
    }
    std::string bytes(st.size, '\0');
    uint64_t got = 0;
    while (got < st.size) {
      const zip_int64_t r = zip_fread(f.get(), bytes.data() + got, st.size - got);
      if (r < 0) {
        return absl::DataLossError(
            StrCat(member, ": ", zip_file_strerror(f.get()), " (truncated or corrupt)"));
      }
      if (r == 0) break;
      got += static_cast<uint64_t>(r);
    }
    if (got != st.size) {
      return absl::DataLossError(StrCat(member, ": ", got, " of ", st.size, " bytes (truncated)"));
    }
    // libzip checks the CRC when the member has been read to its end.
    char extra;
    if (zip_fread(f.get(), &extra, 1) < 0) {
      return absl::DataLossError(StrCat(member, ": ", zip_file_strerror(f.get())));
    }
    auto array = ParseNpy(bytes, member);
    if (!array.ok()) return array.status();
    if (!arrays.emplace(name, std::move(array).value()).second) {
      return absl::InvalidArgumentError(StrCat(member, ": two members have this name"));
    }
  }
  return arrays;
}

absl::StatusOr<NpzArrays> OpenAndRead(zip_source_t* src, zip_error_t* err, uint64_t bytes,
                                      std::string_view what) {
  zip_t* raw = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, err);
  if (raw == nullptr) {
    zip_source_free(src);
    return absl::InvalidArgumentError(
        StrCat(what, ": not an .npz (zip) archive: ", ZipErrorText(err)));
  }
  zip_error_fini(err);
  ZipPtr z(raw);
  return ReadMembers(z.get(), bytes, what);
}

}  // namespace

size_t NpyArray::elements() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

size_t NpyArray::item_bytes() const { return InfoOf(type).bytes; }

bool NpyArray::is_float() const { return InfoOf(type).kind == 'f'; }

std::string NpyArray::type_name() const { return InfoOf(type).name; }

std::string NpyArray::shape_text() const {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) StrAppend(&s, i ? ", " : "", shape[i]);
  if (shape.size() == 1) s += ",";
  return s + ")";
}

double NpyArray::At(size_t i) const {
  const char* p = data.data() + i * item_bytes();
  auto load = [p]<typename T>(T) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return static_cast<double>(v);
  };
  switch (type) {
    case NpyType::kBool: return load(uint8_t{}) != 0 ? 1.0 : 0.0;
    case NpyType::kU8: return load(uint8_t{});
    case NpyType::kI8: return load(int8_t{});
    case NpyType::kU16: return load(uint16_t{});
    case NpyType::kI16: return load(int16_t{});
    case NpyType::kU32: return load(uint32_t{});
    case NpyType::kI32: return load(int32_t{});
    case NpyType::kU64: return load(uint64_t{});
    case NpyType::kI64: return load(int64_t{});
    case NpyType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return HalfToFloat(h);
    }
    case NpyType::kF32: return load(float{});
    case NpyType::kF64: return load(double{});
  }
  return 0;
}

absl::StatusOr<NpyArray> ParseNpy(std::string_view bytes, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(StrCat(what, ": ", why));
  };
  if (bytes.size() < kMagicBytes + 4 || bytes.substr(0, kMagicBytes) != kMagic) {
    return bad("not a .npy array (no \\x93NUMPY magic)");
  }
  const uint8_t major = static_cast<uint8_t>(bytes[6]);
  size_t header_bytes = 0, offset = 0;
  if (major == 1) {
    header_bytes = static_cast<uint8_t>(bytes[8]) | (static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return absl::DataLossError(StrCat(what, ": truncated header"));
    for (int i = 3; i >= 0; --i) header_bytes = (header_bytes << 8) | static_cast<uint8_t>(bytes[8 + i]);
    offset = 12;
  } else {
    return bad(StrCat(".npy format version ", major, " is not read"));
  }
  if (header_bytes > kMaxHeaderBytes) return bad("the header is too long");
  if (bytes.size() < offset + header_bytes) {
    return absl::DataLossError(StrCat(what, ": truncated header"));
  }
  std::string descr;
  bool fortran = false;
  NpyArray a;
  HeaderParser parser(bytes.substr(offset, header_bytes));
  if (absl::Status st = parser.Parse(&descr, &fortran, &a.shape); !st.ok()) {
    return bad(std::string(st.message()));
  }
  auto type = ParseDescr(descr);
  if (!type.ok()) return bad(std::string(type.status().message()));
  a.type = type->first;
  const bool swap = type->second;
  if (fortran && a.shape.size() > 1) {
    return bad("a Fortran-order array is not read: save numpy.ascontiguousarray(a)");
  }
  // The element count, checked against what is present before anything is allocated.
  const size_t present = bytes.size() - offset - header_bytes;
  size_t count = 1;
  for (int64_t d : a.shape) {
    if (d != 0 && count > present / static_cast<size_t>(d)) {
      return absl::DataLossError(
          StrCat(what, ": shape ", a.shape_text(), " needs more bytes than the file holds (",
                 present, "): truncated"));
    }
    count *= static_cast<size_t>(d);
  }
  const size_t item = a.item_bytes();
  if (count > present / item || count * item != present) {
    return absl::DataLossError(StrCat(what, ": shape ", a.shape_text(), " of ", a.type_name(),
                                      " needs ", StrCat(count, " x ", item), " bytes, the file holds ",
                                      present, count * item > present ? " (truncated)" : ""));
  }
  a.data.assign(bytes.substr(offset + header_bytes));
  if (swap) {
    for (size_t i = 0; i < count; ++i) {
      std::reverse(a.data.begin() + static_cast<ptrdiff_t>(i * item),
                   a.data.begin() + static_cast<ptrdiff_t>((i + 1) * item));
    }
  }
  return a;
}

absl::StatusOr<NpzArrays> ReadNpz(const std::string& path) {
  zip_error_t err;
  zip_error_init(&err);
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(StrCat(path, ": cannot open: ", ec.message()));
  zip_source_t* src = zip_source_file_create(path.c_str(), 0, -1, &err);
  if (src == nullptr) {
    return absl::NotFoundError(StrCat(path, ": cannot open: ", ZipErrorText(&err)));
  }
  return OpenAndRead(src, &err, size, path);
}

absl::StatusOr<NpzArrays> ParseNpz(std::string_view bytes, std::string_view what) {
  zip_error_t err;
  zip_error_init(&err);
  zip_source_t* src = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &err);
  if (src == nullptr) {
    return absl::InternalError(StrCat(what, ": ", ZipErrorText(&err)));
  }
  return OpenAndRead(src, &err, bytes.size(), what);
}

std::string NpyBytes(const NpyArray& a) {
  const TypeInfo& t = InfoOf(a.type);
  std::string header = StrCat("{'descr': '", t.bytes == 1 ? '|' : '<', t.kind, t.bytes,
                              "', 'fortran_order': False, 'shape': ", a.shape_text(), ", }");
  // Magic, version, length, header and padding to a multiple of 64, ending in '\n'.
  const size_t unpadded = kMagicBytes + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out(kMagic, kMagicBytes);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xFF);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out += a.data;
  return out;
}

absl::Status WriteNpz(const std::string& path, const NpzArrays& arrays) {
  const std::string tmp = path + ".tmp-npz";
  int errorp = 0;
  zip_t* raw = zip_open(tmp.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &errorp);
  if (raw == nullptr) return absl::InternalError(StrCat(path, ": cannot create (libzip ", errorp, ")"));
  ZipPtr z(raw);
  std::vector<std::string> members;  // alive until zip_close has read them
  members.reserve(arrays.size());
  for (const auto& [name, array] : arrays) {
    members.push_back(NpyBytes(array));
    zip_source_t* src = zip_source_buffer(z.get(), members.back().data(), members.back().size(), 0);
    if (src == nullptr) return absl::InternalError(StrCat(path, ": ", zip_strerror(z.get())));
    const zip_int64_t idx = zip_file_add(z.get(), (name + ".npy").c_str(), src, ZIP_FL_ENC_UTF_8);
    if (idx < 0) {
      zip_source_free(src);
      return absl::InternalError(StrCat(path, ": ", zip_strerror(z.get())));
    }
    zip_set_file_compression(z.get(), static_cast<zip_uint64_t>(idx), ZIP_CM_STORE, 0);
  }
  if (zip_close(z.get()) != 0) return absl::InternalError(StrCat(path, ": ", zip_strerror(z.get())));
  (void)z.release();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::core
