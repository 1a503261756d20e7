// Two emulated hosts joined by one shaped link, for `kvstash-bench link`: network
// namespaces kvstash-link-<pid>-srv and kvstash-link-<pid>-cli, each with a TUN device
// (kvl<pid>s / kvl<pid>c, point-to-point 10.213.0.1 <-> 10.213.0.2, MTU 65000), a kernel
// tbf qdisc on each device's egress for the rate, and a userspace DelayLine between the
// two devices for the propagation delay (RTT / 2 each way).
//
// READ ME FIRST
// - Why TUN and not veth + netem: the kernel this was built on has no sch_netem (only
//   tbf and htb); a delay line needs the packets in userspace, which TUN gives.
// - Clean-up on every exit path: Create spawns a guardian (`sh`, its own process group,
//   so a terminal's Ctrl-C does not reach it) reading a pipe whose write end only this
//   process holds (O_CLOEXEC). When this process exits for any reason (return, error,
//   signal, even SIGKILL) the pipe closes and the guardian stops every process left in
//   the two namespaces (TERM, then KILL) and deletes them; the TUN devices vanish with
//   their file descriptors. SIGINT/SIGTERM are caught while a link exists: the handler
//   closes the pipe, waits for the guardian and exits 128 + signal, so the namespaces
//   are gone when the exit status is seen. Destroy() (and the destructor) does the same
//   synchronously on the normal path.
// - SweepStaleLinks() deletes kvstash-link-<pid>-* namespaces whose pid is not alive
//   (a crashed run whose guardian was killed too).
// - Needs CAP_NET_ADMIN (root), `ip` and `tc` (iproute2) and /dev/net/tun:
//   CheckLinkPrerequisites says which is missing.
//
// Thread-safety: one NetnsLink per process; not thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/drivers/delay_line.h"
#include "kvstash/result.h"

namespace kvstash::bench {

// Ok, or Unavailable naming what is missing (CAP_NET_ADMIN, ip, tc, /dev/net/tun).
Status CheckLinkPrerequisites();

// Stops the processes of and deletes every kvstash-link-<pid>-* namespace whose <pid>
// is not a live process; returns the names deleted. Errors: IOError when `ip netns list`
// fails.
Result<std::vector<std::string>> SweepStaleLinks();

// Runs `argv` (found on PATH), waits; Ok on exit status 0, else IOError with the
// command and its output (stdout and stderr, up to 4 KiB).
Status RunCommand(const std::vector<std::string>& argv);

struct NetnsLinkOptions {
  uint32_t mtu = 65000;  // TUN MTU (bytes). Default: 65000 (fewer packets to relay).
  // TCP buffer ceilings (net.ipv4.tcp_rmem/tcp_wmem max, bytes) set in both namespaces,
  // so that one connection can fill rate x RTT. Default: 64 MiB.
  uint64_t tcp_buffer_max = 64ull << 20;
};

class NetnsLink {
 public:
  static constexpr const char* kServerAddress = "10.213.0.1";
  static constexpr const char* kClientAddress = "10.213.0.2";

  // Makes the namespaces, devices, addresses and the delay line (0 delay, no qdisc).
  // Errors: Unavailable from CheckLinkPrerequisites; IOError naming the failed command.
  // Anything made before a failure is removed.
  static Result<std::unique_ptr<NetnsLink>> Create(const NetnsLinkOptions& options = {});
  ~NetnsLink();  // Destroy()
  NetnsLink(const NetnsLink&) = delete;
  NetnsLink& operator=(const NetnsLink&) = delete;

  // Shapes both directions: tbf at `rate_bits_per_s` on each device, `rtt_ms` / 2 of
  // delay each way. Errors: InvalidArgument for a rate below 8,000 bit/s or a negative
  // RTT; IOError from tc.
  Status Shape(double rate_bits_per_s, double rtt_ms);
  // No qdisc and no delay (the TUN path at whatever speed it goes). Errors: IOError.
  Status Unshape();

  // Runs `fn` on a new thread that has entered the client namespace (setns), and joins
  // it: sockets made there (and threads that thread starts) live in that namespace.
  // Errors: IOError when the namespace cannot be entered; otherwise fn's Status.
  Status RunInClient(const std::function<Status()>& fn);

  // `ip netns exec <server namespace>`: the launcher words to start a program there.
  std::vector<std::string> ServerLauncher() const;
  const std::string& server_ns() const { return ns_[0]; }
  const std::string& client_ns() const { return ns_[1]; }
  // The tc commands of the last Shape (for the results), "" when unshaped.
  const std::string& shaping() const { return shaping_; }
  // The tbf bucket of the last Shape (bytes): after an idle period that many bytes
  // leave at once, so a transfer of B bytes takes at least (B - burst) x 8 / rate.
  uint64_t burst_bytes() const { return burst_; }
  uint64_t relayed_packets() const { return delay_ ? delay_->packets() : 0; }

  // Stops the delay line, the processes in the namespaces, deletes them and the
  // guardian. Idempotent.
  void Destroy();

 private:
  NetnsLink() = default;
  Status Setup(const NetnsLinkOptions& options);

  std::string ns_[2];   // server, client
  std::string dev_[2];  // TUN device names
  int tun_[2] = {-1, -1};
  pid_t guardian_ = -1;
  int guardian_pipe_ = -1;  // write end
  std::unique_ptr<DelayLine> delay_;
  std::string shaping_;
  uint64_t burst_ = 0;
};

}  // namespace kvstash::bench
