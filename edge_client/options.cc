// Edge client options (see options.h).
#include "edge_client/options.h"

#include "base/str.h"
#include "core/optimizer.h"
#include "core/partition.h"
#include "edge_client/attack.h"

namespace fedlgc::edge_client {

absl::Status EdgeClientOptions::Validate() const {
  if (client_id.empty() || client_id.size() > 64)
    return absl::InvalidArgumentError("--id must be 1-64 characters");
  if (num_shards == 0 || shard >= num_shards)
    return absl::InvalidArgumentError("--shard must be < --num-shards");
  if (!insecure && (tls_ca.empty() || tls_cert.empty() || tls_key.empty())) {
    return absl::InvalidArgumentError(
        "mTLS needs --tls-ca, --tls-cert and --tls-key (or --insecure)");
  }
  if (auto p = core::PartitionSpec::Parse(partition); !p.ok()) return p.status();
  if (auto opt = core::OptimizerSpec::Parse(optimizer); !opt.ok()) return opt.status();
  if (!(linger_s >= 0 && linger_s <= 86400)) {
    return absl::InvalidArgumentError("--linger must be 0 to 86400 seconds");
  }
  if (!(backoff_initial_s > 0) || !(backoff_max_s >= backoff_initial_s)) {
    return absl::InvalidArgumentError("--backoff-max must be >= the initial backoff (> 0)");
  }
  if (!(call_timeout_s > 0)) return absl::InvalidArgumentError("--call-timeout must be > 0");
  if (torch_threads < 1) return absl::InvalidArgumentError("--torch-threads must be >= 1");
  if (auto a = Attack::Parse(attack); !a.ok()) {
    return absl::InvalidArgumentError(StrCat("--attack: ", std::string(a.status().message())));
  }
  return absl::OkStatus();
}

core::DataOptions EdgeClientOptions::data_options() const {
  core::DataOptions d;
  d.spec = data;
  d.fashion_dir = data_dir;
  d.label_column = label_column;
  d.targets = targets;
  d.inputs = inputs;
  return d;
}

TransportOptions EdgeClientOptions::transport() const {
  TransportOptions t;
  t.server = server;
  t.client_id = client_id;
  t.tls_ca = tls_ca;
  t.tls_cert = tls_cert;
  t.tls_key = tls_key;
  t.tls_server_name = tls_server_name;
  t.insecure = insecure;
  t.max_message_bytes = max_message_bytes;
  t.backoff_initial_s = backoff_initial_s;
  t.backoff_max_s = backoff_max_s;
  t.call_timeout_s = call_timeout_s;
  t.clock = clock;
  return t;
}

}  // namespace fedlgc::edge_client
