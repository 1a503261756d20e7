// A userspace delay line between two TUN devices: every IP packet read from one device
// is written to the other `one_way` later (in arrival order), in both directions. It is
// the propagation delay of `kvstash-bench link`'s emulated link, because this kernel
// lacks sch_netem (the link's rate is a kernel tbf qdisc on each TUN device's egress;
// netns_link.h).
//
// READ ME FIRST
// - One thread per direction: poll the input with the time to the head packet's due
//   time as timeout, read every packet that is ready (non-blocking), write every packet
//   that is due. Writes to a TUN device inject into the peer stack and do not block.
// - Packets queue in memory without a cap: at 10 Gbit/s and 10 ms that is 12.5 MB.
// - The relay costs CPU: on a small machine it, not the qdisc, may bound the fastest
//   rate; the bench reports the goodput it reached beside the nominal rate.
//
// Thread-safety: SetDelay may be called from any thread; the rest from one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>

#include "kvstash/result.h"

namespace kvstash::bench {

class DelayLine {
 public:
  // Starts relaying between the TUN file descriptors `fd_a` and `fd_b` (opened with
  // IFF_TUN | IFF_NO_PI; the caller keeps owning them and closes them after Stop).
  // Errors: InvalidArgument for a negative fd; IOError when a fd cannot be made
  // non-blocking.
  static Result<std::unique_ptr<DelayLine>> Start(int fd_a, int fd_b,
                                                  std::chrono::microseconds one_way);
  ~DelayLine();  // Stop()
  DelayLine(const DelayLine&) = delete;
  DelayLine& operator=(const DelayLine&) = delete;

  // One-way delay of packets read from now on (microseconds, >= 0).
  void SetDelay(std::chrono::microseconds one_way) { delay_us_.store(one_way.count()); }
  // Joins both threads (queued packets are dropped). Idempotent.
  void Stop();

  uint64_t packets() const { return packets_.load(); }  // relayed so far, both ways
  uint64_t write_errors() const { return write_errors_.load(); }

 private:
  DelayLine() = default;
  void Relay(int in, int out);

  std::atomic<int64_t> delay_us_{0};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> packets_{0}, write_errors_{0};
  std::thread a_to_b_, b_to_a_;
};

}  // namespace kvstash::bench
