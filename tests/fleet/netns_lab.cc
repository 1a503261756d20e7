#include "tests/fleet/netns_lab.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "tests/store/store_test_util.h"

namespace kvstash::testing {
namespace {

using store::testing::RunProgram;

// Runs `ip args...`; Unavailable with its output when it fails.
Status Ip(std::vector<std::string> args) {
  args.insert(args.begin(), "ip");
  std::string out;
  if (RunProgram(args, &out) == 0) return Status::Ok();
  std::string cmd;
  for (const std::string& a : args) cmd += a + " ";
  return Status::Unavailable(cmd + "failed: " + out);
}

std::string IpOutput(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  RunProgram(argv, &out);
  return out;
}

// The pid in a lab name "kvf<pid>..." when that process no longer exists; 0 otherwise.
pid_t DeadOwner(const std::string& name) {
  if (name.rfind("kvf", 0) != 0) return 0;
  size_t i = 3;
  pid_t pid = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') pid = pid * 10 + (name[i++] - '0');
  if (i == 3 || pid <= 0) return 0;
  return kill(pid, 0) != 0 && errno == ESRCH ? pid : 0;
}

}  // namespace

std::string NetnsLab::Unsupported() {
  if (geteuid() != 0) return "needs root (network namespaces, veths, a bridge)";
  std::string out;
  if (RunProgram({"ip", "-V"}, &out) != 0) return "iproute2's `ip` is not installed";
  return "";
}

int NetnsLab::SweepStale() {
  int removed = 0;
  std::istringstream ns(IpOutput({"netns", "list"}));
  for (std::string line; std::getline(ns, line);) {
    const std::string name = line.substr(0, line.find(' '));
    if (DeadOwner(name) == 0) continue;
    // Processes the dead test left running in it (servers) go first.
    std::istringstream pids(IpOutput({"netns", "pids", name}));
    for (pid_t pid = 0; pids >> pid;) kill(pid, SIGKILL);
    if (Ip({"netns", "del", name}).ok()) ++removed;
  }
  // Bridges (and host-side veths whose namespace went some other way).
  std::istringstream links(IpOutput({"-o", "link", "show"}));
  for (std::string line; std::getline(links, line);) {
    const size_t a = line.find(": ");
    if (a == std::string::npos) continue;
    std::string name = line.substr(a + 2);
    name = name.substr(0, name.find_first_of(":@"));
    if (DeadOwner(name) != 0) (void)Ip({"link", "del", name});
  }
  return removed;
}

Result<std::unique_ptr<NetnsLab>> NetnsLab::Create() {
  static std::atomic<int> labs{0};
  std::unique_ptr<NetnsLab> lab(new NetnsLab());
  lab->prefix_ = "kvf" + std::to_string(getpid()) + static_cast<char>('a' + labs++ % 26);
  KVSTASH_RETURN_IF_ERROR(Ip({"link", "add", lab->prefix_ + "b", "type", "bridge"}));
  KVSTASH_RETURN_IF_ERROR(Ip({"link", "set", lab->prefix_ + "b", "up"}));
  return lab;
}

NetnsLab::~NetnsLab() {
  // Deleting a namespace deletes its veth pair.
  for (const std::string& n : names_) (void)Ip({"netns", "del", n});
  (void)Ip({"link", "del", prefix_ + "b"});
}

std::string NetnsLab::address(size_t host) const { return "10.77.0." + std::to_string(host + 1); }

Result<size_t> NetnsLab::AddHost() {
  const size_t i = names_.size();
  if (i >= 250) return Status::Unavailable("a lab has at most 250 hosts");
  const std::string ns = prefix_ + "-" + std::to_string(i);
  const std::string outer = prefix_ + "h" + std::to_string(i);
  KVSTASH_RETURN_IF_ERROR(Ip({"netns", "add", ns}));
  names_.push_back(ns);  // removed by the destructor from here on
  KVSTASH_RETURN_IF_ERROR(Ip({"link", "add", outer, "type", "veth", "peer", "name", "eth0",
                              "netns", ns}));
  KVSTASH_RETURN_IF_ERROR(Ip({"link", "set", outer, "master", prefix_ + "b", "up"}));
  KVSTASH_RETURN_IF_ERROR(Ip({"-n", ns, "addr", "add", address(i) + "/24", "dev", "eth0"}));
  KVSTASH_RETURN_IF_ERROR(Ip({"-n", ns, "link", "set", "eth0", "up"}));
  KVSTASH_RETURN_IF_ERROR(Ip({"-n", ns, "link", "set", "lo", "up"}));
  return i;
}

std::vector<std::string> NetnsLab::Launcher(size_t host) const {
  return {"ip", "netns", "exec", names_[host]};
}

Result<std::unique_ptr<NetnsLab::Entered>> NetnsLab::Enter(size_t host) const {
  const int saved = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (saved < 0) return Status::Unavailable(std::string("open own netns: ") + strerror(errno));
  const std::string path = "/var/run/netns/" + names_[host];
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    const std::string why = strerror(errno);
    if (fd >= 0) close(fd);
    close(saved);
    return Status::Unavailable("enter " + path + ": " + why);
  }
  close(fd);
  return std::unique_ptr<Entered>(new Entered(saved));
}

NetnsLab::Entered::~Entered() {
  (void)setns(saved_, CLONE_NEWNET);
  close(saved_);
}

}  // namespace kvstash::testing
