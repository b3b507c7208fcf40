// Fault proxy (see fault_proxy.h). Each direction of a connection is a pipeline of two
// threads: a reader stamps every chunk with its release time (arrival + delay + jitter)
// and a writer releases chunks no earlier than that and no faster than the rate cap, so
// latency does not throttle throughput the way sleeping in a single loop would.
#include "sim/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <random>

#include "base/str.h"
#include "sim/link_profile.h"

namespace fedlgc::sim {
namespace {

using Clock = std::chrono::steady_clock;

// How far behind a rate-capped link may fall before it stops catching up (Release).
constexpr std::chrono::milliseconds kCatchUp{20};

struct Chunk {
  std::string data;
  Clock::time_point release;
};

}  // namespace

// One direction of a proxied connection: chunks read, waiting for their release time.
struct FaultProxy::Pipe {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Chunk> queue;
  bool eof = false;
};

absl::StatusOr<LinkSpec> LinkSpec::Parse(const std::string& text) {
  LinkSpec s;
  if (text.empty() || text == "none") return s;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    const std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() + 1 : comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      return absl::InvalidArgumentError(
          StrCat("link \"", text, "\": expected key=value, got \"", item, "\""));
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    bool ok = false;
    if (k == "delay")
      ok = ParseDuration(v, &s.delay_s);
    else if (k == "jitter")
      ok = ParseDuration(v, &s.jitter_s);
    else if (k == "rate")
      ok = ParseRate(v, &s.rate_bytes_per_s);
    else if (k == "cut") {
      char* end = nullptr;
      s.cut_per_mib = std::strtod(v.c_str(), &end);
      ok = *end == '\0' && s.cut_per_mib >= 0 && s.cut_per_mib <= 1;
    } else if (k == "cut_after") {
      ok = ParseBytes(v, &s.cut_after_bytes);
    } else if (k == "join") {
      ok = ParseDuration(v, &s.join_s);
    } else if (k == "offline_mean") {
      ok = ParseDuration(v, &s.offline_mean_s) && s.offline_mean_s > 0;
    } else if (k == "offline") {
      char* end = nullptr;
      s.offline_share = std::strtod(v.c_str(), &end);
      ok = *end == '\0' && s.offline_share >= 0 && s.offline_share <= 0.95;
    } else {
      return absl::InvalidArgumentError(
          StrCat("link \"", text, "\": unknown key '", k,
                 "' (known: delay, jitter, rate, cut, cut_after, join, offline, offline_mean)"));
    }
    if (!ok)
      return absl::InvalidArgumentError(
          StrCat("link \"", text, "\": bad value for ", k, ": '", v, "'"));
  }
  return s;
}

bool LinkSpec::trivial() const {
  return delay_s == 0 && jitter_s == 0 && rate_bytes_per_s == 0 && cut_per_mib == 0 &&
         cut_after_bytes == 0 && join_s == 0 && offline_share == 0 && down.empty();
}

FaultProxy::FaultProxy(std::string host, int target_port, LinkSpec spec, uint64_t seed)
    : host_(std::move(host)),
      target_port_(target_port),
      spec_(spec),
      seed_(seed),
      up_rate_(spec.rate_bytes_per_s),
      down_rate_(spec.rate_bytes_per_s) {}

absl::StatusOr<std::unique_ptr<FaultProxy>> FaultProxy::Start(const std::string& target_host,
                                                              int target_port, LinkSpec spec,
                                                              uint64_t seed) {
  std::unique_ptr<FaultProxy> p(new FaultProxy(target_host, target_port, spec, seed));
  p->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (p->listen_fd_ < 0) return absl::InternalError("fault proxy: socket failed");
  const int one = 1;
  ::setsockopt(p->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(p->listen_fd_, 64) != 0) {
    return absl::InternalError("fault proxy: bind/listen failed");
  }
  socklen_t len = sizeof(addr);
  ::getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  p->port_ = ntohs(addr.sin_port);
  p->acceptor_ = std::thread([raw = p.get()] { raw->AcceptLoop(); });
  return p;
}

FaultProxy::~FaultProxy() {
  stop_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  ::close(listen_fd_);
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    workers.swap(workers_);
  }
  for (auto& t : workers) t.join();
  for (int fd : fds_) ::close(fd);
}

// One proxied connection: the client's socket, the target's, and the cut that ends both.
struct FaultProxy::Connection {
  int cfd = -1, tfd = -1;
  uint64_t number = 0;
  std::atomic<bool> dead{false};
  std::atomic<uint64_t> carried{0};  // bytes read in both directions

  void Cut() {
    if (!dead.exchange(true)) {
      ::shutdown(cfd, SHUT_RDWR);
      ::shutdown(tfd, SHUT_RDWR);
    }
  }
};

void FaultProxy::AcceptLoop() {
  LinkSchedule schedule(spec_, seed_);
  const Clock::time_point start = Clock::now();
  bool was_up = true;
  while (!stop_) {
    // While the link may go down, wake every 50 ms to cut what is open when it does.
    pollfd pfd{listen_fd_, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, schedule.ever_down() ? 50 : 200);
    const bool up = schedule.Up(std::chrono::duration<double>(Clock::now() - start).count());
    if (!up && was_up) {
      std::lock_guard<std::mutex> lock(mu_);
      for (Connection* c : live_) {
        if (!c->dead) ++offline_cuts_;
        c->Cut();
      }
    }
    was_up = up;
    if (ready <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stop_) return;
      continue;
    }
    if (!up) {
      ++offline_refused_;
      ::close(fd);
      continue;
    }
    ++connections_;
    std::lock_guard<std::mutex> lock(mu_);
    fds_.push_back(fd);
    workers_.emplace_back([this, fd] { Serve(fd); });
  }
}

void FaultProxy::Serve(int cfd) {
  const int tfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(target_port_));
  ::inet_pton(AF_INET, host_ == "localhost" ? "127.0.0.1" : host_.c_str(), &addr.sin_addr);
  if (tfd < 0 || ::connect(tfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (tfd >= 0) ::close(tfd);
    ::shutdown(cfd, SHUT_RDWR);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fds_.push_back(tfd);
  }
  const int one = 1;
  ::setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(tfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  Connection c;
  c.cfd = cfd;
  c.tfd = tfd;
  c.number = connections_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_.push_back(&c);
  }
  std::thread down([&] { Pump(&c, tfd, cfd, seed_ ^ (c.number * 2 + 1), &down_rate_); });
  Pump(&c, cfd, tfd, seed_ ^ (c.number * 2), &up_rate_);
  down.join();
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(std::find(live_.begin(), live_.end(), &c));
}

void FaultProxy::Pump(Connection* c, int src, int dst, uint64_t stream_seed,
                      const std::atomic<double>* rate_cap) {
  Pipe pipe;
  std::mt19937_64 rng(stream_seed);
  std::normal_distribution<double> jitter(0.0, spec_.jitter_s);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::thread writer([&] { Release(c, dst, &pipe, rate_cap); });
  char buf[16384];
  for (;;) {
    // With a rate cap, read at most what the link carries in ~10 ms so cuts and delays
    // apply at a fine grain.
    size_t want = sizeof(buf);
    if (const double rate = rate_cap->load(); rate > 0) {
      want = std::clamp<size_t>(static_cast<size_t>(rate / 100), 512, sizeof(buf));
    }
    const ssize_t n = ::recv(src, buf, want, 0);
    if (n <= 0) break;
    const uint64_t total = c->carried += static_cast<uint64_t>(n);
    bool do_cut = false;
    if (spec_.cut_after_bytes > 0 && total >= spec_.cut_after_bytes &&
        !cut_after_used_.exchange(true)) {
      do_cut = true;
    }
    if (spec_.cut_per_mib > 0) {
      const double p = 1 - std::pow(1 - spec_.cut_per_mib, static_cast<double>(n) / (1 << 20));
      do_cut |= unit(rng) < p;
    }
    if (do_cut) {
      ++cuts_;
      c->Cut();
      break;
    }
    const double d = std::max(0.0, spec_.delay_s + (spec_.jitter_s > 0 ? jitter(rng) : 0.0));
    {
      std::lock_guard<std::mutex> lock(pipe.mu);
      pipe.queue.push_back(
          {std::string(buf, static_cast<size_t>(n)),
           Clock::now() + std::chrono::nanoseconds(static_cast<int64_t>(d * 1e9))});
    }
    pipe.cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(pipe.mu);
    pipe.eof = true;
  }
  pipe.cv.notify_one();
  writer.join();
  c->Cut();  // one side ended: end the connection
}

void FaultProxy::Release(Connection* c, int dst, Pipe* pipe, const std::atomic<double>* rate_cap) {
  Clock::time_point next_free = Clock::now();
  for (;;) {
    Chunk chunk;
    {
      std::unique_lock<std::mutex> lock(pipe->mu);
      pipe->cv.wait(lock, [&] { return !pipe->queue.empty() || pipe->eof; });
      if (pipe->queue.empty()) return;
      chunk = std::move(pipe->queue.front());
      pipe->queue.pop_front();
    }
    std::this_thread::sleep_until(std::max(chunk.release, next_free));
    if (const double rate = rate_cap->load(); rate > 0) {
      // A wake-up that came late (a loaded machine) is made up by the chunks after it, up
      // to kCatchUp: the link keeps its rate on average, and an idle one gains no burst.
      next_free = std::max(Clock::now() - kCatchUp, next_free) +
                  std::chrono::nanoseconds(static_cast<int64_t>(chunk.data.size() * 1e9 / rate));
    }
    size_t off = 0;
    while (off < chunk.data.size()) {
      const ssize_t n = ::send(dst, chunk.data.data() + off, chunk.data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) {
        c->Cut();
        return;
      }
      off += static_cast<size_t>(n);
      if (dst == c->cfd) bytes_to_clients_ += static_cast<uint64_t>(n);
    }
  }
}

}  // namespace fedlgc::sim
