#include "benchmarks/drivers/netns_link.h"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace kvstash::bench {
namespace {

constexpr const char* kNsPrefix = "kvstash-link-";

// Stops the processes left in the namespaces named by its arguments and deletes them,
// once its stdin reaches end of file (see the header).
constexpr const char* kGuardianScript =
    "read _; p=$(for ns in \"$@\"; do ip netns pids \"$ns\" 2>/dev/null; done); "
    "if [ -n \"$p\" ]; then kill -TERM $p 2>/dev/null; sleep 0.5; kill -KILL $p 2>/dev/null; fi; "
    "for ns in \"$@\"; do ip netns del \"$ns\" 2>/dev/null; done; exit 0";

// The guardian of this process's link, for the signal handler (async-signal-safe use
// only: close, waitpid, _exit).
std::atomic<int> g_guardian_pipe{-1};
std::atomic<pid_t> g_guardian{-1};
struct sigaction g_old_int, g_old_term;

void OnSignal(int sig) {
  const int fd = g_guardian_pipe.exchange(-1);
  if (fd >= 0) close(fd);
  const pid_t g = g_guardian.exchange(-1);
  if (g > 0) {
    int st = 0;
    waitpid(g, &st, 0);
  }
  _exit(128 + sig);
}

// Spawns argv (PATH lookup) with stdin from `stdin_fd` (-1: /dev/null) and stdout+stderr
// into `out_fd` (-1: inherited); `own_group`: a process group of its own.
Result<pid_t> Spawn(const std::vector<std::string>& argv, int stdin_fd, int out_fd, bool own_group) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (stdin_fd >= 0) {
    posix_spawn_file_actions_adddup2(&fa, stdin_fd, 0);
  } else {
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  }
  if (out_fd >= 0) {
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (own_group) {
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
  }
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Status::Unavailable("cannot run " + argv[0] + ": " + std::strerror(rc));
  return pid;
}

std::string Join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

// Runs argv and returns its stdout+stderr (IOError with them on a non-zero exit).
Result<std::string> Capture(const std::vector<std::string>& argv) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return Status::IOError(std::string("pipe: ") + std::strerror(errno));
  auto pid = Spawn(argv, -1, p[1], false);
  close(p[1]);
  if (!pid.ok()) {
    close(p[0]);
    return pid.status();
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(p[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (out.size() < 4096) out.append(buf, static_cast<size_t>(n));
  }
  close(p[0]);
  int st = 0;
  while (waitpid(*pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    return Status::IOError("`" + Join(argv) + "` failed: " + out);
  }
  return out;
}

// Runs fn on a thread that entered network namespace `ns` (ip netns's bind mount).
Status InNetns(const std::string& ns, const std::function<Status()>& fn) {
  Status result;
  std::thread t([&] {
    const std::string path = "/var/run/netns/" + ns;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      result = Status::IOError("open " + path + ": " + std::strerror(errno));
      return;
    }
    const int rc = setns(fd, CLONE_NEWNET);
    const int err = errno;
    close(fd);
    if (rc != 0) {
      result = Status::IOError("setns " + ns + ": " + std::strerror(err));
      return;
    }
    result = fn();
  });
  t.join();
  return result;
}

}  // namespace

Status RunCommand(const std::vector<std::string>& argv) { return Capture(argv).status(); }

Status CheckLinkPrerequisites() {
  std::ifstream in("/proc/self/status");
  std::string line;
  unsigned long long cap = 0;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) == 0) cap = std::stoull(line.substr(7), nullptr, 16);
  }
  constexpr int kCapNetAdmin = 12;
  if (!(cap & (1ull << kCapNetAdmin))) {
    return Status::Unavailable("needs CAP_NET_ADMIN (run as root) to make network namespaces");
  }
  for (const char* tool : {"ip", "tc"}) {
    if (!Capture({tool, "-V"}).ok()) {
      return Status::Unavailable(std::string("needs `") + tool + "` (Debian package iproute2)");
    }
  }
  if (access("/dev/net/tun", R_OK | W_OK) != 0) {
    return Status::Unavailable("needs /dev/net/tun (the kernel's TUN driver)");
  }
  return Status::Ok();
}

Result<std::vector<std::string>> SweepStaleLinks() {
  KVSTASH_ASSIGN_OR_RETURN(std::string list, Capture({"ip", "netns", "list"}));
  std::istringstream in(list);
  std::vector<std::string> stale;
  for (std::string name; in >> name;) {
    if (name.rfind(kNsPrefix, 0) != 0) continue;
    const std::string rest = name.substr(std::strlen(kNsPrefix));
    const long pid = std::strtol(rest.c_str(), nullptr, 10);
    if (pid <= 0 || (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) stale.push_back(name);
  }
  if (stale.empty()) return stale;
  std::vector<std::string> argv = {"sh", "-c", kGuardianScript, "kvstash-link-sweep"};
  argv.insert(argv.end(), stale.begin(), stale.end());
  KVSTASH_RETURN_IF_ERROR(RunCommand(argv));  // stdin /dev/null: cleans at once
  return stale;
}

Result<std::unique_ptr<NetnsLink>> NetnsLink::Create(const NetnsLinkOptions& options) {
  KVSTASH_RETURN_IF_ERROR(CheckLinkPrerequisites());
  if (g_guardian.load() > 0) return Status::InvalidArgument("one NetnsLink per process");
  std::unique_ptr<NetnsLink> link(new NetnsLink());
  const std::string pid = std::to_string(getpid());
  link->ns_[0] = kNsPrefix + pid + "-srv";
  link->ns_[1] = kNsPrefix + pid + "-cli";
  link->dev_[0] = "kvl" + pid + "s";
  link->dev_[1] = "kvl" + pid + "c";
  Status s = link->Setup(options);
  if (!s.ok()) return s;  // the destructor removes what was made
  return link;
}

Status NetnsLink::Setup(const NetnsLinkOptions& o) {
  // The guardian first, so that everything after it is removed on any exit.
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return Status::IOError(std::string("pipe: ") + std::strerror(errno));
  auto g = Spawn({"sh", "-c", kGuardianScript, "kvstash-link-guardian", ns_[0], ns_[1]}, p[0], -1, true);
  close(p[0]);
  if (!g.ok()) {
    close(p[1]);
    return g.status();
  }
  guardian_ = *g;
  guardian_pipe_ = p[1];
  g_guardian.store(guardian_);
  g_guardian_pipe.store(guardian_pipe_);
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);

  const char* addr[2] = {kServerAddress, kClientAddress};
  for (int i = 0; i < 2; ++i) {
    KVSTASH_RETURN_IF_ERROR(RunCommand({"ip", "netns", "add", ns_[i]}));
    KVSTASH_RETURN_IF_ERROR(RunCommand({"ip", "-n", ns_[i], "link", "set", "lo", "up"}));
    KVSTASH_RETURN_IF_ERROR(InNetns(ns_[i], [&] {
      const int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
      if (fd < 0) return Status::IOError(std::string("open /dev/net/tun: ") + std::strerror(errno));
      ifreq ifr{};
      ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
      std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", dev_[i].c_str());
      if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
        const int err = errno;
        close(fd);
        return Status::IOError("TUNSETIFF " + dev_[i] + ": " + std::strerror(err));
      }
      tun_[i] = fd;
      return Status::Ok();
    }));
    KVSTASH_RETURN_IF_ERROR(RunCommand({"ip", "-n", ns_[i], "addr", "add", addr[i], "peer",
                                        addr[1 - i], "dev", dev_[i]}));
    KVSTASH_RETURN_IF_ERROR(RunCommand({"ip", "-n", ns_[i], "link", "set", "dev", dev_[i], "mtu",
                                        std::to_string(o.mtu), "up"}));
    const std::string max = std::to_string(o.tcp_buffer_max);
    KVSTASH_RETURN_IF_ERROR(RunCommand({"ip", "netns", "exec", ns_[i], "sysctl", "-q", "-w",
                                        "net.ipv4.tcp_rmem=4096 4194304 " + max,
                                        "net.ipv4.tcp_wmem=4096 4194304 " + max,
                                        "net.ipv4.tcp_slow_start_after_idle=0"}));
  }
  KVSTASH_ASSIGN_OR_RETURN(delay_, DelayLine::Start(tun_[0], tun_[1], std::chrono::microseconds(0)));
  return Unshape();
}

NetnsLink::~NetnsLink() { Destroy(); }

void NetnsLink::Destroy() {
  if (delay_) delay_->Stop();
  delay_.reset();
  for (int& fd : tun_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  if (guardian_ > 0) {
    // Hand the guardian its cue (end of file) and wait for it to finish clean-up.
    g_guardian_pipe.store(-1);
    g_guardian.store(-1);
    close(guardian_pipe_);
    int st = 0;
    while (waitpid(guardian_, &st, 0) < 0 && errno == EINTR) {
    }
    guardian_ = -1;
    guardian_pipe_ = -1;
    sigaction(SIGINT, &g_old_int, nullptr);
    sigaction(SIGTERM, &g_old_term, nullptr);
  }
}

Status NetnsLink::Shape(double rate, double rtt_ms) {
  if (!(rate >= 8000)) return Status::InvalidArgument("link rate must be >= 8000 bit/s");
  if (!(rtt_ms >= 0)) return Status::InvalidArgument("RTT must be >= 0 ms");
  // burst: at least two full-size packets and 4 ms at the rate (tbf drops a packet
  // larger than its bucket); queue: 4 packets or 2 RTTs at the rate beyond the burst.
  const double bytes_per_s = rate / 8;
  const uint64_t mtu = 65536;
  const uint64_t burst = std::max<uint64_t>(2 * mtu, static_cast<uint64_t>(bytes_per_s * 0.004));
  const uint64_t limit =
      burst + std::max<uint64_t>(4 * mtu, static_cast<uint64_t>(bytes_per_s * 2 * rtt_ms / 1000));
  char r[32];
  std::snprintf(r, sizeof r, "%.0fbit", rate);
  shaping_.clear();
  for (int i = 0; i < 2; ++i) {
    const std::vector<std::string> argv = {"tc", "-n", ns_[i], "qdisc", "replace", "dev", dev_[i],
                                           "root", "tbf", "rate", r,
                                           "burst", std::to_string(burst),
                                           "limit", std::to_string(limit)};
    KVSTASH_RETURN_IF_ERROR(RunCommand(argv));
    shaping_ += (i ? "; " : "") + Join(argv);
  }
  char d[96];
  std::snprintf(d, sizeof d, "; userspace delay line %.3f ms each way", rtt_ms / 2);
  shaping_ += d;
  burst_ = burst;
  delay_->SetDelay(std::chrono::microseconds(static_cast<int64_t>(rtt_ms * 500)));
  return Status::Ok();
}

Status NetnsLink::Unshape() {
  for (int i = 0; i < 2; ++i) {
    KVSTASH_RETURN_IF_ERROR(RunCommand({"tc", "-n", ns_[i], "qdisc", "replace", "dev", dev_[i],
                                        "root", "pfifo", "limit", "10000"}));
  }
  if (delay_) delay_->SetDelay(std::chrono::microseconds(0));
  shaping_.clear();
  burst_ = 0;
  return Status::Ok();
}

Status NetnsLink::RunInClient(const std::function<Status()>& fn) { return InNetns(ns_[1], fn); }

std::vector<std::string> NetnsLink::ServerLauncher() const {
  return {"ip", "netns", "exec", ns_[0]};
}

}  // namespace kvstash::bench
