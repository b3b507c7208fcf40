// The links of a population (see link_profile.h).
#include "sim/link_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/str.h"

namespace fedlgc::sim {
namespace {

// splitmix64: a small counter-based generator, so that each client's draw depends only on
// (seed, client, key).
uint64_t Next(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in (0, 1).
double Unit(uint64_t* state) {
  return (static_cast<double>(Next(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double StandardNormal(uint64_t* state) {
  const double u = Unit(state), v = Unit(state);
  return std::sqrt(-2 * std::log(u)) * std::cos(2 * M_PI * v);
}

uint64_t KeyHash(const std::string& key) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : key) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

// Splits at the commas outside parentheses.
std::vector<std::string> TopLevelItems(const std::string& text) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

bool ParseShare(const std::string& text, double max, double* v) {
  char* end = nullptr;
  *v = std::strtod(text.c_str(), &end);
  return end != text.c_str() && *end == '\0' && *v >= 0 && *v <= max;
}

constexpr double kMaxOffline = 0.95;

// The parser of one key's values; false for an unknown key.
bool ParseKeyValue(const std::string& key, const std::string& text, double* v) {
  if (key == "rate") return ParseRate(text, v);
  if (key == "delay" || key == "jitter" || key == "join" || key == "offline_mean") {
    return ParseDuration(text, v);
  }
  if (key == "cut") return ParseShare(text, 1, v);
  if (key == "offline") return ParseShare(text, kMaxOffline, v);
  return false;
}

bool KnownKey(const std::string& key) {
  for (const char* k : {"rate", "delay", "jitter", "join", "offline_mean", "cut", "offline"}) {
    if (key == k) return true;
  }
  return false;
}

void Set(LinkSpec* s, const std::string& key, double v) {
  if (key == "rate") s->rate_bytes_per_s = v;
  if (key == "delay") s->delay_s = v;
  if (key == "jitter") s->jitter_s = v;
  if (key == "join") s->join_s = v;
  if (key == "offline_mean") s->offline_mean_s = v;
  if (key == "cut") s->cut_per_mib = std::min(v, 1.0);
  if (key == "offline") s->offline_share = std::min(v, kMaxOffline);
}

absl::Status BadValue(const std::string& spec, const std::string& key, const std::string& v) {
  return absl::InvalidArgumentError(StrCat("link \"", spec, "\": bad value for ", key, ": '", v,
                                           "' (a value, uniform(A,B) or "
                                           "lognormal(median=M,sigma=S))"));
}

}  // namespace

bool ParseDuration(const std::string& v, double* s) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  const std::string unit(end);
  if (end == v.c_str() || !(x >= 0) || !std::isfinite(x)) return false;
  if (unit == "ms") return *s = x / 1000, true;
  if (unit == "s" || unit.empty()) return *s = x, true;
  if (unit == "us") return *s = x / 1e6, true;
  return false;
}

bool ParseRate(const std::string& v, double* bytes_per_s) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  const std::string unit(end);
  if (end == v.c_str() || !(x > 0) || !std::isfinite(x)) return false;
  double bits;
  if (unit == "bit") {
    bits = x;
  } else if (unit == "kbit") {
    bits = x * 1e3;
  } else if (unit == "mbit") {
    bits = x * 1e6;
  } else if (unit == "gbit") {
    bits = x * 1e9;
  } else {
    return false;
  }
  *bytes_per_s = bits / 8;
  return true;
}

bool ParseBytes(const std::string& v, uint64_t* n) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  const std::string unit(end);
  if (end == v.c_str() || !(x >= 0) || !std::isfinite(x)) return false;
  double mult = 1;
  if (unit == "k" || unit == "kb" || unit == "KB" || unit == "K") {
    mult = 1024;
  } else if (unit == "m" || unit == "mb" || unit == "MB" || unit == "M") {
    mult = 1024 * 1024;
  } else if (!unit.empty() && unit != "b" && unit != "B") {
    return false;
  }
  *n = static_cast<uint64_t>(x * mult);
  return true;
}

LinkSchedule::LinkSchedule(const LinkSpec& spec, uint64_t seed)
    : spec_(spec),
      ever_down_(spec.join_s > 0 || spec.offline_share > 0 || !spec.down.empty()),
      state_(seed ^ 0x5DEECE66Dull),
      drawn_to_(spec.join_s) {}

void LinkSchedule::ExtendTo(double t) {
  const double share = spec_.offline_share;
  const double mean_down = std::max(spec_.offline_mean_s, 1e-3);
  const double mean_up = mean_down * (1 - share) / share;
  if (!started_) {
    // The first stretch is down with the share's probability (the chain's stationary
    // start), so that a population is `share` offline from its first second.
    next_down_ = Unit(&state_) < share;
    started_ = true;
  }
  while (drawn_to_ <= t) {
    if (next_down_) {
      const double len = -mean_down * std::log(Unit(&state_));
      stretches_.push_back({drawn_to_, drawn_to_ + len});
      drawn_to_ += len;
    } else {
      drawn_to_ += -mean_up * std::log(Unit(&state_));
    }
    next_down_ = !next_down_;
  }
}

bool LinkSchedule::Up(double t) {
  if (!ever_down_) return true;
  if (t < spec_.join_s) return false;
  for (const auto& [from, to] : spec_.down) {
    if (t >= from && t < to) return false;
  }
  if (spec_.offline_share <= 0) return true;
  ExtendTo(t);
  // The last stretch that starts at or before t.
  auto it = std::upper_bound(stretches_.begin(), stretches_.end(), std::make_pair(t, 1e300));
  return it == stretches_.begin() || t >= std::prev(it)->second;
}

double LinkProfile::Value::Draw(uint64_t* state) const {
  switch (kind) {
    case kConstant:
      return a;
    case kUniform:
      return a + (b - a) * Unit(state);
    case kLogNormal:
      return a * std::exp(b * StandardNormal(state));
  }
  return a;
}

absl::StatusOr<LinkProfile> LinkProfile::Parse(const std::string& text) {
  if (text.rfind("trace:", 0) == 0) return ParseTrace(text.substr(6));
  return ParseSpec(text);
}

absl::StatusOr<LinkProfile> LinkProfile::ParseSpec(const std::string& text) {
  LinkProfile p;
  p.text_ = text;
  if (text.empty() || text == "none") return p;
  std::string fixed;  // the keys LinkSpec::Parse reads as they are
  for (const std::string& item : TopLevelItems(text)) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(
          StrCat("link \"", text, "\": expected key=value, got \"", item, "\""));
    }
    const std::string key = item.substr(0, eq), v = item.substr(eq + 1);
    if (!KnownKey(key)) {
      fixed += (fixed.empty() ? "" : ",") + item;
      continue;
    }
    Value value;
    double x = 0, y = 0;
    const size_t open = v.find('(');
    if (open == std::string::npos) {
      if (!ParseKeyValue(key, v, &x)) return BadValue(text, key, v);
      value.a = x;
    } else {
      if (v.back() != ')') return BadValue(text, key, v);
      const std::string fn = v.substr(0, open);
      const std::string args = v.substr(open + 1, v.size() - open - 2);
      const size_t comma = args.find(',');
      if (comma == std::string::npos) return BadValue(text, key, v);
      std::string first = args.substr(0, comma), second = args.substr(comma + 1);
      if (fn == "uniform") {
        if (!ParseKeyValue(key, first, &x) || !ParseKeyValue(key, second, &y) || y < x) {
          return BadValue(text, key, v);
        }
        value = {Value::kUniform, x, y};
      } else if (fn == "lognormal") {
        if (first.rfind("median=", 0) != 0 || second.rfind("sigma=", 0) != 0 ||
            !ParseKeyValue(key, first.substr(7), &x) || !ParseShare(second.substr(6), 10, &y)) {
          return BadValue(text, key, v);
        }
        value = {Value::kLogNormal, x, y};
      } else {
        return BadValue(text, key, v);
      }
    }
    p.values_[key] = value;
  }
  auto rest = LinkSpec::Parse(fixed);
  if (!rest.ok()) return rest.status();
  p.fixed_ = *rest;
  return p;
}

absl::StatusOr<LinkProfile> LinkProfile::ParseTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("link trace ", path, ": cannot be read"));
  LinkProfile p;
  p.text_ = "trace:" + path;
  std::string line;
  std::vector<std::string> header;
  size_t number = 0;
  auto fields = [](const std::string& l) {
    std::vector<std::string> out;
    std::stringstream ss(l);
    for (std::string f; std::getline(ss, f, ',');) out.push_back(f);
    if (!l.empty() && l.back() == ',') out.push_back("");
    return out;
  };
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> f = fields(line);
    const std::string where = StrCat("link trace ", path, " line ", number);
    if (header.empty()) {
      header = f;
      if (std::find(header.begin(), header.end(), "client") == header.end()) {
        return absl::InvalidArgumentError(StrCat(where, ": the header names no 'client' column"));
      }
      for (const std::string& h : header) {
        if (h != "client" && h != "down" && !KnownKey(h)) {
          return absl::InvalidArgumentError(StrCat(
              where, ": unknown column '", h,
              "' (known: client, rate, delay, jitter, cut, join, offline, offline_mean, down)"));
        }
      }
      continue;
    }
    if (f.size() != header.size()) {
      return absl::InvalidArgumentError(
          StrCat(where, ": ", f.size(), " fields, the header has ", header.size()));
    }
    LinkSpec s;
    std::string client;
    for (size_t i = 0; i < f.size(); ++i) {
      const std::string& h = header[i];
      if (h == "client") {
        client = f[i];
      } else if (f[i].empty()) {
        continue;
      } else if (h == "down") {
        std::stringstream ss(f[i]);
        for (std::string w; std::getline(ss, w, ';');) {
          const size_t dash = w.find('-');
          double from = 0, to = 0;
          if (dash == std::string::npos || !ParseDuration(w.substr(0, dash), &from) ||
              !ParseDuration(w.substr(dash + 1), &to) || to <= from) {
            return absl::InvalidArgumentError(
                StrCat(where, ": a down window is from-to seconds, e.g. 30-90; got '", w, "'"));
          }
          s.down.push_back({from, to});
        }
      } else {
        double v = 0;
        if (!ParseKeyValue(h, f[i], &v)) {
          return absl::InvalidArgumentError(StrCat(where, ": bad value for ", h, ": '", f[i], "'"));
        }
        Set(&s, h, v);
      }
    }
    if (client.empty()) return absl::InvalidArgumentError(StrCat(where, ": no client"));
    if (!p.trace_.emplace(client, s).second) {
      return absl::InvalidArgumentError(StrCat(where, ": client ", client, " has two rows"));
    }
  }
  if (p.trace_.empty()) return absl::InvalidArgumentError(StrCat("link trace ", path, ": no rows"));
  return p;
}

LinkSpec LinkProfile::Draw(uint32_t index, const std::string& id, uint64_t seed) const {
  if (!trace_.empty()) {
    auto it = trace_.find(id);
    if (it == trace_.end()) it = trace_.find("*");
    return it == trace_.end() ? LinkSpec{} : it->second;
  }
  LinkSpec s = fixed_;
  for (const auto& [key, value] : values_) {
    uint64_t state = seed ^ (uint64_t{index} * 0xD1B54A32D192ED03ull) ^ KeyHash(key);
    Set(&s, key, value.Draw(&state));
  }
  return s;
}

bool LinkProfile::trivial() const {
  if (!trace_.empty()) {
    for (const auto& [id, s] : trace_) {
      if (!s.trivial()) return false;
    }
    return true;
  }
  for (const auto& [key, value] : values_) {
    if (value.kind != Value::kConstant || value.a != 0) return false;
  }
  return fixed_.trivial();
}

}  // namespace fedlgc::sim
