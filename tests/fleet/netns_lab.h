// NetnsLab: "hosts" for multi-node tests on one machine. Each host is a Linux network
// namespace with its own IPv4 address on a private /24, joined to the others by one
// bridge (a veth pair per host), built with iproute2 (`ip`). The bridge has no address
// in the caller's namespace, so labs never collide with each other or with the
// machine's own routes; reach a host from another host (Enter, Launcher).
//
// Needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN): Unsupported() says why not. Names carry
// the creating process id and a letter per lab of that process (namespaces
// kvf<pid><l>-<i>, bridge kvf<pid><l>b, host-side veths kvf<pid><l>h<i>); the
// destructor removes everything the lab made, and SweepStale() removes what labs of
// processes that no longer exist left behind (a test killed -9).
//
// Thread-safety: none; build and destroy a lab on one thread. Enter() moves only the
// calling thread (threads it creates afterwards start in that namespace too).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kvstash/result.h"

namespace kvstash::testing {

class NetnsLab {
 public:
  // Why labs cannot be built here ("" when they can): not root, or `ip` missing.
  static std::string Unsupported();
  // Removes the namespaces and links of earlier labs whose process is gone (SIGKILLing
  // the processes still running in those namespaces); returns how many namespaces it
  // removed.
  static int SweepStale();
  // Creates the bridge. Errors: Unavailable (with ip's output).
  static Result<std::unique_ptr<NetnsLab>> Create();
  ~NetnsLab();
  NetnsLab(const NetnsLab&) = delete;
  NetnsLab& operator=(const NetnsLab&) = delete;

  // Adds a host: a namespace with lo up and a veth on the bridge addressed
  // 10.77.0.<index + 1>/24. Returns its index. Errors: Unavailable.
  Result<size_t> AddHost();
  size_t hosts() const { return names_.size(); }
  // REQUIRES: host < hosts().
  const std::string& name(size_t host) const { return names_[host]; }
  std::string address(size_t host) const;
  // Words that run a program inside `host` ({"ip", "netns", "exec", name}); `ip`
  // execs the program, so its pid is the program's.
  std::vector<std::string> Launcher(size_t host) const;

  // While alive, the calling thread is in a host's namespace; back where it was after.
  class Entered {
   public:
    ~Entered();
    Entered(const Entered&) = delete;
    Entered& operator=(const Entered&) = delete;

   private:
    friend class NetnsLab;
    explicit Entered(int saved) : saved_(saved) {}
    int saved_;  // fd of the thread's previous network namespace
  };
  // Errors: Unavailable when setns fails.
  Result<std::unique_ptr<Entered>> Enter(size_t host) const;

 private:
  NetnsLab() = default;
  std::string prefix_;              // kvf<pid><letter>
  std::vector<std::string> names_;  // namespace per host
};

}  // namespace kvstash::testing
