// Who holds a listening TCP port or a locked file on this machine: the diagnosis behind
// `kvstash-demo`'s start-up errors ("port 7470 is held by pid 1234 (kvstash-server
// --port 7470 ...)"), so that a user whose earlier server still runs is told which
// process to stop instead of "is the port in use?".
//
// Linux only; reads /proc: /proc/net/tcp and /proc/net/tcp6 (sockets in state LISTEN),
// /proc/locks (POSIX and flock locks, as RocksDB's LOCK file takes), /proc/<pid>/fd
// (which process owns a socket inode) and /proc/<pid>/cmdline.
//
// Errors: none; nullopt when nothing holds the resource or /proc cannot tell. A holder
// owned by another user is found with pid -1 when its /proc/<pid>/fd is unreadable.
// Thread-safety: thread-safe (reads files only).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace kvstash::demo {

struct ResourceHolder {
  pid_t pid = -1;       // -1: held, but by a process this user cannot inspect
  std::string command;  // its command line, words joined by spaces ("" when pid is -1)
};

// The process with a TCP socket listening on `port` (any address, IPv4 or IPv6).
std::optional<ResourceHolder> ListeningPortHolder(uint16_t port);

// The process holding a lock on the file at `path` (nullopt: no lock, or no such file).
std::optional<ResourceHolder> FileLockHolder(const std::string& path);

// "pid 1234 (kvstash-server --port 7470)", or "a process of another user".
std::string DescribeHolder(const ResourceHolder& holder);

}  // namespace kvstash::demo
