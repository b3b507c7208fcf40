// JSON lines of rounds (see round_report.h), through nlohmann::json.
#include "core/round_report.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "base/file.h"
#include "base/str.h"
#include "nlohmann/json.hpp"

namespace fedlgc {
namespace {

using nlohmann::json;

// NaN and infinities have no JSON form: null.
json Number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

double NumberOf(const json& v) {
  return v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN();
}

template <typename T>
absl::StatusOr<T> Parse(std::string_view line, T (*from)(const json&)) {
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(StrCat("not a JSON object: ", line.substr(0, 80)));
  }
  try {
    return from(j);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(StrCat("bad field: ", e.what()));
  }
}

RoundReport ReportFrom(const json& j) {
  RoundReport r;
  for (const auto& [key, v] : j.items()) {
    if (key == "round") {
      r.round = v.get<uint64_t>();
    } else if (key == "mode") {
      r.mode = v.get<std::string>();
    } else if (key == "accuracy") {
      r.accuracy = NumberOf(v);
    } else if (key == "loss") {
      r.loss = NumberOf(v);
    } else if (key == "uplink_bytes") {
      r.uplink_bytes = v.get<uint64_t>();
    } else if (key == "raw_uplink_bytes") {
      r.raw_uplink_bytes = v.get<uint64_t>();
    } else if (key == "downlink_bytes") {
      r.downlink_bytes = v.get<uint64_t>();
    } else if (key == "raw_downlink_bytes") {
      r.raw_downlink_bytes = v.get<uint64_t>();
    } else if (key == "seconds") {
      r.seconds = NumberOf(v);
    } else if (key == "participants") {
      r.participants = v.get<int>();
    } else if (key == "stragglers") {
      r.stragglers = v.get<int>();
    } else if (key == "hit_deadline") {
      r.hit_deadline = v.get<bool>();
    } else if (key == "federated_eval" && v.is_object()) {
      FederatedEval e;
      e.asked = v.value("asked", 0);
      e.clients = v.value("clients", 0);
      e.declined = v.value("declined", 0);
      e.missing = v.value("missing", 0);
      e.examples = v.value("examples", uint64_t{0});
      e.loss = v.contains("loss") ? NumberOf(v["loss"]) : -1;
      e.accuracy = v.contains("accuracy") ? NumberOf(v["accuracy"]) : -1;
      r.federated_eval = e;
    } else if (v.is_string()) {
      r.labels[key] = v.get<std::string>();
    } else if (v.is_number() || v.is_null()) {
      r.figures[key] = NumberOf(v);
    } else if (v.is_object()) {
      auto& per = r.per_client[key];
      for (const auto& [client, x] : v.items()) per[client] = NumberOf(x);
    }
  }
  return r;
}

ClientRoundRecord RecordFrom(const json& j) {
  ClientRoundRecord r;
  for (const auto& [key, v] : j.items()) {
    if (key == "round") {
      r.round = v.get<uint64_t>();
    } else if (v.is_number() || v.is_null()) {
      r.figures[key] = NumberOf(v);
    }
  }
  return r;
}

template <typename T>
absl::StatusOr<std::vector<T>> ReadLines(const std::string& path,
                                         absl::StatusOr<T> (*parse)(std::string_view)) {
  auto bytes = fedlgc::ReadFileIfExists(path);
  if (!bytes.ok()) return bytes.status();
  std::vector<T> out;
  if (!bytes->has_value()) return out;
  std::istringstream in(**bytes);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    auto r = parse(line);
    if (!r.ok()) {
      return absl::DataLossError(StrCat(path, ":", n, ": ", std::string(r.status().message())));
    }
    out.push_back(*std::move(r));
  }
  return out;
}

}  // namespace

double RoundReport::Figure(const std::string& name, double missing) const {
  auto it = figures.find(name);
  return it == figures.end() ? missing : it->second;
}

std::string RoundReport::Label(const std::string& name) const {
  auto it = labels.find(name);
  return it == labels.end() ? std::string() : it->second;
}

std::string ToJson(const RoundReport& r) {
  json j = json::object();
  j["round"] = r.round;
  j["mode"] = r.mode;
  j["accuracy"] = Number(r.accuracy);
  j["loss"] = Number(r.loss);
  j["uplink_bytes"] = r.uplink_bytes;
  j["raw_uplink_bytes"] = r.raw_uplink_bytes;
  j["downlink_bytes"] = r.downlink_bytes;
  j["raw_downlink_bytes"] = r.raw_downlink_bytes;
  j["seconds"] = Number(r.seconds);
  j["participants"] = r.participants;
  j["stragglers"] = r.stragglers;
  j["hit_deadline"] = r.hit_deadline;
  for (const auto& [k, v] : r.figures) j[k] = Number(v);
  for (const auto& [k, v] : r.labels) j[k] = v;
  for (const auto& [k, per] : r.per_client) {
    json o = json::object();
    for (const auto& [client, v] : per) o[client] = Number(v);
    j[k] = std::move(o);
  }
  if (const auto& e = r.federated_eval) {
    j["federated_eval"] = {{"asked", e->asked},         {"clients", e->clients},
                           {"declined", e->declined},   {"missing", e->missing},
                           {"examples", e->examples},   {"loss", Number(e->loss)},
                           {"accuracy", Number(e->accuracy)}};
  }
  return j.dump();
}

absl::StatusOr<RoundReport> RoundReportFromJson(std::string_view line) {
  return Parse<RoundReport>(line, &ReportFrom);
}

std::string ToJson(const ClientRoundRecord& r) {
  json j = json::object();
  j["round"] = r.round;
  for (const auto& [k, v] : r.figures) j[k] = Number(v);
  return j.dump();
}

absl::StatusOr<ClientRoundRecord> ClientRoundRecordFromJson(std::string_view line) {
  return Parse<ClientRoundRecord>(line, &RecordFrom);
}

absl::Status AppendLine(const std::string& path, std::string_view line) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream out(path, std::ios::app);
  out << line << "\n";
  out.flush();
  if (!out) return absl::InternalError(StrCat("cannot append to ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RoundReport>> ReadRoundLog(const std::string& path) {
  return ReadLines<RoundReport>(path, &RoundReportFromJson);
}

absl::StatusOr<std::vector<ClientRoundRecord>> ReadClientRoundLog(const std::string& path) {
  return ReadLines<ClientRoundRecord>(path, &ClientRoundRecordFromJson);
}

}  // namespace fedlgc
