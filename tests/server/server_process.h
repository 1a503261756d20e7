// A real `kvstash-server` process for end-to-end tests: started on free loopback ports
// (port 0 + --ready-file) or, with a ServerLaunch, on a given address and port and
// through a launcher such as `ip netns exec NAME`; stopped with SIGTERM (drain) or
// SIGKILL. Not thread-safe.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "kvstash/result.h"

extern char** environ;

namespace kvstash::server::testing {

// Where and how a ServerProcess runs. Default: loopback, ports chosen by the OS.
struct ServerLaunch {
  // Words run before the server binary (the first found on PATH), e.g.
  // {"ip", "netns", "exec", "ns1"}; it must exec the server (same pid). Default: none.
  std::vector<std::string> launcher;
  // Address both ports listen on (--listen, --http-listen unless 127.0.0.1, the
  // server's default), and address()'s host. Default: 127.0.0.1.
  std::string host = "127.0.0.1";
  // Protocol and HTTP ports; 0: any free port. Default: 0, 0.
  int port = 0;
  int http_port = 0;
};

class ServerProcess {
 public:
  ~ServerProcess() { Kill(SIGKILL); }

  // Starts the server with `args` appended to the port/ready-file flags and waits until
  // it listens. Errors: Unavailable.
  Status Start(const std::string& bin, const std::string& work_dir, std::vector<std::string> args,
               const ServerLaunch& launch = {}) {
    ready_ = work_dir + "/ready.json";
    host_ = launch.host;
    std::filesystem::remove(ready_);
    std::vector<std::string> argv = launch.launcher;
    argv.insert(argv.end(), {bin, "--port", std::to_string(launch.port), "--http-port",
                             std::to_string(launch.http_port), "--ready-file", ready_,
                             "--log-level", "warn"});
    // Loopback is the server's default (and a --config may name its own address).
    if (launch.host != "127.0.0.1") {
      argv.insert(argv.end(), {"--listen", launch.host, "--http-listen", launch.host});
    }
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargs;
    for (auto& a : argv) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    if (posix_spawnp(&pid_, cargs[0], nullptr, nullptr, cargs.data(), environ) != 0) {
      return Status::Unavailable("cannot spawn " + argv[0]);
    }
    for (int i = 0; i < 300; ++i) {
      std::ifstream in(ready_);
      if (in) {
        auto j = nlohmann::json::parse(in, nullptr, false);
        if (!j.is_discarded()) {
          port_ = j["port"];
          http_port_ = j["http_port"];
          return Status::Ok();
        }
      }
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return Status::Unavailable("kvstash-server exited during start-up");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return Status::Unavailable("kvstash-server not ready after 6 s");
  }

  // Sends `sig` and waits for the exit; returns the exit status (or 128 + signal).
  int Kill(int sig) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }

  // Sends `sig` without waiting.
  void Signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }
  // Waits for the exit; its status (or 128 + signal; -1 when not running).
  int WaitExit() {
    if (pid_ <= 0) return -1;
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  const std::string& ready_file() const { return ready_; }

  std::string address() const { return host_ + ":" + std::to_string(port_); }
  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  int http_port() const { return http_port_; }

 private:
  pid_t pid_ = -1;
  std::string ready_;
  std::string host_ = "127.0.0.1";
  int port_ = 0, http_port_ = 0;
};

// A fresh directory under the build tree's temp area, removed at destruction.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("kvstash-e2e-" + std::to_string(getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

}  // namespace kvstash::server::testing
