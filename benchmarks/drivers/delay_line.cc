#include "benchmarks/drivers/delay_line.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <vector>

namespace kvstash::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Packet {
  Clock::time_point due;
  std::vector<uint8_t> bytes;
};

constexpr size_t kMaxPacket = 65536;  // TUN MTU is at most 65535

}  // namespace

Result<std::unique_ptr<DelayLine>> DelayLine::Start(int fd_a, int fd_b,
                                                    std::chrono::microseconds one_way) {
  if (fd_a < 0 || fd_b < 0) return Status::InvalidArgument("delay line: bad file descriptor");
  for (int fd : {fd_a, fd_b}) {
    const int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
      return Status::IOError(std::string("delay line: O_NONBLOCK: ") + std::strerror(errno));
    }
  }
  std::unique_ptr<DelayLine> d(new DelayLine());
  d->SetDelay(one_way);
  d->a_to_b_ = std::thread([p = d.get(), fd_a, fd_b] { p->Relay(fd_a, fd_b); });
  d->b_to_a_ = std::thread([p = d.get(), fd_a, fd_b] { p->Relay(fd_b, fd_a); });
  return d;
}

DelayLine::~DelayLine() { Stop(); }

void DelayLine::Stop() {
  stop_.store(true);
  if (a_to_b_.joinable()) a_to_b_.join();
  if (b_to_a_.joinable()) b_to_a_.join();
}

void DelayLine::Relay(int in, int out) {
  std::deque<Packet> queue;
  std::vector<std::vector<uint8_t>> spare;  // buffers of packets already written
  while (!stop_.load(std::memory_order_relaxed)) {
    int timeout_ms = 50;  // wake up now and then to see stop_
    if (!queue.empty()) {
      const auto wait = std::chrono::duration_cast<std::chrono::microseconds>(
          queue.front().due - Clock::now());
      timeout_ms = wait.count() <= 0 ? 0 : static_cast<int>((wait.count() + 999) / 1000);
      if (timeout_ms > 50) timeout_ms = 50;
    }
    pollfd p{in, POLLIN, 0};
    const int n = poll(&p, 1, timeout_ms);
    if (n > 0 && (p.revents & POLLIN)) {
      const auto due = Clock::now() + std::chrono::microseconds(delay_us_.load());
      for (;;) {  // drain what is ready; each read is one IP packet
        std::vector<uint8_t> buf;
        if (!spare.empty()) {
          buf = std::move(spare.back());
          spare.pop_back();
        }
        buf.resize(kMaxPacket);
        const ssize_t r = read(in, buf.data(), buf.size());
        if (r <= 0) break;
        buf.resize(static_cast<size_t>(r));
        queue.push_back({due, std::move(buf)});
      }
    }
    // Sub-millisecond remainders: poll's timeout is in ms, so spin-wait the last part
    // only when the head is due within 1 ms (keeps the delay exact to ~0.1 ms).
    const auto now = Clock::now();
    if (!queue.empty() && queue.front().due > now &&
        queue.front().due - now < std::chrono::milliseconds(1)) {
      std::this_thread::sleep_until(queue.front().due);
    }
    while (!queue.empty() && queue.front().due <= Clock::now()) {
      Packet& pk = queue.front();
      if (write(out, pk.bytes.data(), pk.bytes.size()) < 0) write_errors_.fetch_add(1);
      packets_.fetch_add(1, std::memory_order_relaxed);
      if (spare.size() < 256) spare.push_back(std::move(pk.bytes));
      queue.pop_front();
    }
  }
}

}  // namespace kvstash::bench
