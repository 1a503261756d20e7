#include "demo/resource_holder.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace kvstash::demo {
namespace {

// The inodes of the sockets listening on `port` in one /proc/net/tcp* table. Columns:
// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout
// inode; local_address is HEXADDR:HEXPORT and st 0A is LISTEN.
void ListeningInodes(const char* table, uint16_t port, std::vector<std::string>* inodes) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    if (!(f >> sl >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode)) {
      continue;
    }
    const size_t colon = local.rfind(':');
    if (colon == std::string::npos || state != "0A") continue;
    if (std::strtoul(local.c_str() + colon + 1, nullptr, 16) == port && inode != "0") inodes->push_back(inode);
  }
}

std::string CommandLine(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  for (char& c : raw) {
    if (c == '\0') c = ' ';
  }
  return raw;
}

// The process with an open descriptor whose link reads `target` ("socket:[123]").
std::optional<pid_t> ProcessWithFd(const std::string& target) {
  std::error_code ec;
  for (const auto& proc : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = proc.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code fd_ec;
    for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", fd_ec)) {
      std::error_code link_ec;
      if (std::filesystem::read_symlink(fd.path(), link_ec).string() == target) {
        return static_cast<pid_t>(std::stol(name));
      }
    }
  }
  return std::nullopt;
}

ResourceHolder HolderOf(pid_t pid) {
  ResourceHolder h;
  h.pid = pid;
  if (pid > 0) h.command = CommandLine(pid);
  return h;
}

}  // namespace

std::optional<ResourceHolder> ListeningPortHolder(uint16_t port) {
  std::vector<std::string> inodes;
  ListeningInodes("/proc/net/tcp", port, &inodes);
  ListeningInodes("/proc/net/tcp6", port, &inodes);
  if (inodes.empty()) return std::nullopt;
  for (const std::string& inode : inodes) {
    if (auto pid = ProcessWithFd("socket:[" + inode + "]")) return HolderOf(*pid);
  }
  return ResourceHolder{};  // listening, but its owner's descriptors are not readable
}

std::optional<ResourceHolder> FileLockHolder(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  // /proc/locks: "1: POSIX  ADVISORY  WRITE 1234 08:01:5678 0 EOF", the device as hex
  // MAJOR:MINOR and the inode in decimal ("->" marks a waiter: skipped).
  std::ifstream in("/proc/locks");
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("->") != std::string::npos) continue;
    std::istringstream f(line);
    std::string id, kind, mode, access, pid, file;
    if (!(f >> id >> kind >> mode >> access >> pid >> file)) continue;
    unsigned dev_major = 0, dev_minor = 0;
    unsigned long long inode = 0;
    if (std::sscanf(file.c_str(), "%x:%x:%llu", &dev_major, &dev_minor, &inode) != 3) continue;
    if (inode != st.st_ino || dev_major != major(st.st_dev) || dev_minor != minor(st.st_dev)) continue;
    const long p = std::strtol(pid.c_str(), nullptr, 10);
    return HolderOf(p > 0 ? static_cast<pid_t>(p) : -1);
  }
  return std::nullopt;
}

std::string DescribeHolder(const ResourceHolder& holder) {
  if (holder.pid <= 0) return "a process of another user";
  return "pid " + std::to_string(holder.pid) + (holder.command.empty() ? "" : " (" + holder.command + ")");
}

}  // namespace kvstash::demo
