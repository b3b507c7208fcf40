// Many edge clients in one process (see client_host.h).
#include "edge_client/client_host.h"

#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <set>
#include <thread>
#include <utility>

#include "base/log.h"
#include "base/str.h"
#include "monitoring/metrics.h"

namespace fedlgc::edge_client {
namespace {

constexpr size_t kMaxHostedClients = 100000;

absl::StatusOr<uint32_t> ParseIndex(std::string_view text, std::string_view list) {
  uint32_t v = 0;
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos ||
      std::from_chars(text.data(), text.data() + text.size(), v).ec != std::errc()) {
    return absl::InvalidArgumentError(
        StrCat("--client-ids '", list, "': '", text, "' is not a client index"));
  }
  return v;
}

}  // namespace

absl::StatusOr<std::vector<uint32_t>> ParseClientList(std::string_view text) {
  std::vector<uint32_t> out;
  std::set<uint32_t> seen;
  for (size_t at = 0; at <= text.size();) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view part = text.substr(at, comma - at);
    at = comma + 1;
    const size_t dash = part.find('-');
    auto first = ParseIndex(part.substr(0, dash), text);
    if (!first.ok()) return first.status();
    auto last = dash == std::string_view::npos ? first : ParseIndex(part.substr(dash + 1), text);
    if (!last.ok()) return last.status();
    if (*last < *first) {
      return absl::InvalidArgumentError(
          StrCat("--client-ids '", text, "': the range ", part, " runs backwards"));
    }
    if (static_cast<uint64_t>(*last - *first) + out.size() >= kMaxHostedClients) {
      return absl::InvalidArgumentError(
          StrCat("--client-ids '", text, "': more than ", kMaxHostedClients, " clients"));
    }
    for (uint64_t i = *first; i <= *last; ++i) {
      if (!seen.insert(static_cast<uint32_t>(i)).second) {
        return absl::InvalidArgumentError(
            StrCat("--client-ids '", text, "': client ", i, " is listed twice"));
      }
      out.push_back(static_cast<uint32_t>(i));
    }
  }
  return out;
}

std::string WithIndex(std::string_view pattern, uint32_t index) {
  std::string out;
  const std::string i = std::to_string(index);
  for (size_t at = 0;;) {
    const size_t next = pattern.find("{i}", at);
    out.append(pattern.substr(at, next == std::string_view::npos ? next : next - at));
    if (next == std::string_view::npos) return out;
    out += i;
    at = next + 3;
  }
}

EdgeClientOptions HostedClientOptions(const EdgeClientOptions& base, uint32_t index) {
  EdgeClientOptions o = base;
  o.client_id = WithIndex(base.client_id, index);
  o.tls_cert = WithIndex(base.tls_cert, index);
  o.tls_key = WithIndex(base.tls_key, index);
  o.data = WithIndex(base.data, index);
  o.shard = index;
  if (base.data.find("{i}") != std::string::npos) {
    // A file of each client's own: read whole.
    o.shard = 0;
    o.num_shards = 1;
  }
  return o;
}

absl::StatusOr<std::unique_ptr<ClientHost>> ClientHost::Create(
    std::vector<EdgeClientOptions> clients, const ClientHostOptions& options,
    ClientModeFactory make_mode) {
  if (clients.empty()) return absl::InvalidArgumentError("a host needs at least one client");
  if (options.train_slots < 1 || options.train_slots > 256) {
    return absl::InvalidArgumentError("--train-slots must be 1 to 256");
  }
  std::set<std::string> ids;
  for (const EdgeClientOptions& o : clients) {
    if (!ids.insert(o.client_id).second) {
      return absl::InvalidArgumentError(
          StrCat("two hosted clients are both '", o.client_id,
                 "': give each its own id (--id with {i}, e.g. client-{i})"));
    }
  }
  std::unique_ptr<ClientHost> host(new ClientHost());
  host->shared_.metrics = std::make_shared<monitoring::Metrics>();
  host->shared_.models = std::make_shared<ModelPool>(options.train_slots);
  host->shared_.data = std::make_shared<DataCache>();
  if (!options.metrics_listen.empty()) {
    if (absl::Status st = host->shared_.metrics->Serve(options.metrics_listen); !st.ok()) {
      return st;
    }
  }
  for (EdgeClientOptions& o : clients) {
    o.metrics_listen.clear();  // the host's exposer serves every client's series
    const std::string id = o.client_id;
    auto c = EdgeClient::Create(std::move(o), make_mode, nullptr, nullptr, host->shared_);
    if (!c.ok()) return absl::Status(c.status().code(), StrCat(id, ": ", c.status().message()));
    host->clients_.push_back(*std::move(c));
  }
  log::Info("fedlgc-edge", "hosting %zu clients (%zu training set(s), %d training slot(s))",
            host->clients_.size(), host->shared_.data->size(), options.train_slots);
  return host;
}

ClientHost::~ClientHost() { Stop(); }

absl::Status ClientHost::Run() {
  std::vector<absl::Status> results(clients_.size());
  std::vector<std::thread> threads;
  threads.reserve(clients_.size());
  for (size_t i = 0; i < clients_.size(); ++i) {
    threads.emplace_back([this, i, &results] { results[i] = clients_[i]->Run(); });
  }
  for (std::thread& t : threads) t.join();
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  log::Info("fedlgc-edge", "%zu hosted clients ended; the process's peak memory: %.0f MiB",
            clients_.size(), static_cast<double>(usage.ru_maxrss) / 1024.0);
  size_t failed = 0;
  absl::Status first;
  for (size_t i = 0; i < clients_.size(); ++i) {
    if (results[i].ok()) continue;
    log::Error(clients_[i]->id(), "%s", results[i].ToString().c_str());
    if (failed++ == 0) first = results[i];
  }
  if (failed == 0) return absl::OkStatus();
  return absl::Status(first.code(), StrCat(failed, " of ", clients_.size(),
                                           " hosted clients failed; the first: ", first.message()));
}

void ClientHost::Stop() {
  for (auto& c : clients_) c->Stop();
}

int ClientHost::metrics_port() const { return shared_.metrics->port(); }

}  // namespace fedlgc::edge_client
