// The TCP fault proxy: delay, rate cap, cuts and a link that goes down, measured on a
// loopback echo server.
#include "sim/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace fedlgc::sim {
namespace {

using Clock = std::chrono::steady_clock;

// Echoes every byte back until the peer closes. One connection at a time.
class EchoServer {
 public:
  EchoServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(fd_, 8);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        char buf[65536];
        ssize_t n;
        while ((n = ::recv(c, buf, sizeof(buf), 0)) > 0) {
          if (::send(c, buf, static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
        }
        ::close(c);
      }
    });
  }
  ~EchoServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  int fd_, port_;
  std::thread thread_;
};

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Sends `n` bytes and reads them back; returns the bytes read before EOF or n.
size_t RoundTrip(int fd, size_t n) {
  std::thread writer([fd, n] {
    std::string data(n, 'x');
    size_t off = 0;
    while (off < n) {
      const ssize_t w =
          ::send(fd, data.data() + off, std::min<size_t>(n - off, 16384), MSG_NOSIGNAL);
      if (w <= 0) return;
      off += static_cast<size_t>(w);
    }
  });
  size_t got = 0;
  char buf[65536];
  while (got < n) {
    const ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  writer.join();
  return got;
}

TEST(FaultProxy, DelayAppliesEachWay) {
  EchoServer echo;
  auto proxy = FaultProxy::Start("127.0.0.1", echo.port(), *LinkSpec::Parse("delay=40ms"), 1);
  ASSERT_TRUE(proxy.ok());
  const int fd = Connect((*proxy)->port());
  const auto t0 = Clock::now();
  EXPECT_EQ(RoundTrip(fd, 100), 100u);
  const double rtt = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(rtt, 0.080);  // 40 ms out, 40 ms back
  EXPECT_LT(rtt, 0.5);
  ::close(fd);
}

TEST(FaultProxy, RateCapBoundsThroughput) {
  EchoServer echo;
  auto proxy = FaultProxy::Start("127.0.0.1", echo.port(), *LinkSpec::Parse("rate=8mbit"), 1);
  ASSERT_TRUE(proxy.ok());
  const int fd = Connect((*proxy)->port());
  const auto t0 = Clock::now();
  EXPECT_EQ(RoundTrip(fd, 500000), 500000u);  // 0.5 MB at 1 MB/s: ~0.5 s (both ways pipelined)
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(s, 0.45);
  EXPECT_LT(s, 2.0);
  ::close(fd);
}

TEST(FaultProxy, CutsAfterTheGivenBytes) {
  EchoServer echo;
  auto proxy = FaultProxy::Start("127.0.0.1", echo.port(), *LinkSpec::Parse("cut_after=64k"), 1);
  ASSERT_TRUE(proxy.ok());
  const int fd = Connect((*proxy)->port());
  const size_t got = RoundTrip(fd, 1 << 20);
  EXPECT_LT(got, 1u << 20);
  EXPECT_EQ((*proxy)->cuts(), 1u);
  ::close(fd);
  // Only the first connection is cut.
  const int fd2 = Connect((*proxy)->port());
  EXPECT_EQ(RoundTrip(fd2, 200000), 200000u);
  ::close(fd2);
}

TEST(FaultProxy, CutProbabilityPerMib) {
  EchoServer echo;
  auto proxy = FaultProxy::Start("127.0.0.1", echo.port(), *LinkSpec::Parse("cut=1"), 1);
  ASSERT_TRUE(proxy.ok());
  const int fd = Connect((*proxy)->port());
  // With p = 1 per MiB, 4 MiB each way almost surely gets cut.
  EXPECT_LT(RoundTrip(fd, 4 << 20), 4u << 20);
  EXPECT_GE((*proxy)->cuts(), 1u);
  ::close(fd);
}

// A link that goes down 0.4 s after the start for a second: the connection open then is
// cut (an idle one too), a new one is refused at once, and once the link is back up a
// connection carries bytes again.
TEST(FaultProxy, ALinkDownCutsWhatIsOpenAndRefusesNewConnections) {
  EchoServer echo;
  LinkSpec spec;
  spec.down = {{0.4, 1.4}};
  const auto start = Clock::now();
  auto proxy = FaultProxy::Start("127.0.0.1", echo.port(), spec, 1);
  ASSERT_TRUE(proxy.ok());
  const int open = Connect((*proxy)->port());
  EXPECT_EQ(RoundTrip(open, 100), 100u);
  // Idle: nothing to read until the link goes down and the proxy cuts it.
  char buf[16];
  EXPECT_LE(::recv(open, buf, sizeof(buf), 0), 0);
  const double cut_at = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(cut_at, 0.35);
  EXPECT_LT(cut_at, 1.4);
  ::close(open);
  EXPECT_EQ((*proxy)->offline_cuts(), 1u);
  if (std::chrono::duration<double>(Clock::now() - start).count() < 1.3) {
    const int refused = Connect((*proxy)->port());
    EXPECT_LE(::recv(refused, buf, sizeof(buf), 0), 0);  // closed unanswered
    ::close(refused);
    EXPECT_GE((*proxy)->offline_refused(), 1u);
  }
  // Up again after 1.4 s: each try is a fresh connection, until one carries its bytes.
  size_t carried = 0;
  while (carried != 100 && Clock::now() - start < std::chrono::seconds(5)) {
    const int fd = Connect((*proxy)->port());
    carried = RoundTrip(fd, 100);
    ::close(fd);
  }
  EXPECT_EQ(carried, 100u);
  EXPECT_GE(std::chrono::duration<double>(Clock::now() - start).count(), 1.4);
}

TEST(LinkSpec, ParsesAndRejects) {
  auto s = LinkSpec::Parse("delay=50ms,jitter=10ms,rate=10mbit,cut=0.05,cut_after=1m");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->delay_s, 0.05);
  EXPECT_DOUBLE_EQ(s->jitter_s, 0.01);
  EXPECT_DOUBLE_EQ(s->rate_bytes_per_s, 1.25e6);
  EXPECT_DOUBLE_EQ(s->cut_per_mib, 0.05);
  EXPECT_EQ(s->cut_after_bytes, 1u << 20);
  EXPECT_TRUE(LinkSpec::Parse("")->trivial());
  EXPECT_FALSE(LinkSpec::Parse("delay=5parsecs").ok());
  EXPECT_FALSE(LinkSpec::Parse("loss=5").ok());
  EXPECT_FALSE(LinkSpec::Parse("cut=2").ok());
  EXPECT_FALSE(LinkSpec::Parse("rate").ok());
  auto a = LinkSpec::Parse("join=30s,offline=0.2,offline_mean=90s");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_DOUBLE_EQ(a->join_s, 30);
  EXPECT_DOUBLE_EQ(a->offline_share, 0.2);
  EXPECT_DOUBLE_EQ(a->offline_mean_s, 90);
  EXPECT_FALSE(a->trivial());
  EXPECT_FALSE(LinkSpec::Parse("offline=0.99").ok());
  EXPECT_FALSE(LinkSpec::Parse("offline_mean=0").ok());
}

}  // namespace
}  // namespace fedlgc::sim
