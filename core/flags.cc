// Flag parsing (see flags.h).
#include "core/flags.h"

#include <charconv>
#include <cstdlib>
#include <sstream>

#include "codecs/str.h"

namespace fedlgc::core {
namespace {

template <typename T>
bool ParseNumber(const std::string& s, T* v) {
  if constexpr (std::is_floating_point_v<T>) {
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0') return false;
    *v = static_cast<T>(d);
    return true;
  } else {
    auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
    return r.ec == std::errc() && r.ptr == s.data() + s.size();
  }
}

template <typename T>
std::string Show(const T& v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

}  // namespace

void Flags::Add(const std::string& name, std::string* v, const std::string& help) {
  AddFlag({name, help, *v, false, [v](const std::string& s) {
             *v = s;
             return true;
           }});
}
void Flags::Add(const std::string& name, bool* v, const std::string& help) {
  AddFlag({name, help, *v ? "true" : "false", true, [v](const std::string& s) {
             if (s == "true" || s == "1" || s.empty()) return *v = true, true;
             if (s == "false" || s == "0") return *v = false, true;
             return false;
           }});
}
void Flags::Add(const std::string& name, double* v, const std::string& help) {
  AddFlag({name, help, Show(*v), false, [v](const std::string& s) { return ParseNumber(s, v); }});
}
void Flags::Add(const std::string& name, float* v, const std::string& help) {
  AddFlag({name, help, Show(*v), false, [v](const std::string& s) { return ParseNumber(s, v); }});
}
void Flags::Add(const std::string& name, uint32_t* v, const std::string& help) {
  AddFlag({name, help, Show(*v), false, [v](const std::string& s) { return ParseNumber(s, v); }});
}
void Flags::Add(const std::string& name, uint64_t* v, const std::string& help) {
  AddFlag({name, help, Show(*v), false, [v](const std::string& s) { return ParseNumber(s, v); }});
}
void Flags::Add(const std::string& name, int* v, const std::string& help) {
  AddFlag({name, help, Show(*v), false, [v](const std::string& s) { return ParseNumber(s, v); }});
}

absl::Status Flags::Parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      return absl::OkStatus();
    }
    if (a.rfind("--", 0) != 0)
      return absl::InvalidArgumentError(StrCat("unexpected argument '", a, "'"));
    a = a.substr(2);
    std::string value;
    bool has_value = false;
    if (const size_t eq = a.find('='); eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    Flag* flag = nullptr;
    for (Flag& f : flags_) {
      if (f.name == a) flag = &f;
    }
    if (flag == nullptr)
      return absl::InvalidArgumentError(StrCat("unknown flag --", a, " (see --help)"));
    if (!has_value && !flag->is_bool) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(StrCat("--", a, " needs a value"));
      value = argv[++i];
    }
    if (!flag->set(value)) {
      return absl::InvalidArgumentError(StrCat("--", a, ": cannot use '", value, "'"));
    }
  }
  return absl::OkStatus();
}

std::string Flags::Usage() const {
  std::string out = StrCat("usage: ", program_, " [flags]\n", summary_, "\n\nflags:\n");
  for (const Flag& f : flags_) {
    StrAppend(&out, "  --", f.name, f.is_bool ? "" : "=VALUE", "\n      ", f.help,
              " (default: ", f.def.empty() ? "\"\"" : f.def, ")\n");
  }
  return out;
}

}  // namespace fedlgc::core
