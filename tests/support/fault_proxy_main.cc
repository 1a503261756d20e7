// kvstash_fault_proxy: the FaultProxy (tests/support/fault_proxy.h) as a process, for
// tests that are not C++ (python/tests/test_fault_proxy.py).
//
//   kvstash_fault_proxy --target HOST:PORT --port-file FILE
//
// Listens on 127.0.0.1 at a free port and writes that port (decimal, a newline) to
// FILE once it accepts connections (written to FILE.tmp, then renamed: a reader never
// sees a partial file). Reads rules from stdin, one per line:
//   substitute A D | flip A | clear | stats      (A, D: 32 hex digits, stored keys)
// and answers each line on stdout, flushed: "ok" (stats: "ok substituted=N flipped=M
// connections=K") or "error: <why>". Exits 0 on stdin EOF or SIGTERM/SIGINT; 2 for bad
// arguments, 1 when it cannot start.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "tests/support/fault_proxy.h"

namespace {

int g_signal_pipe[2] = {-1, -1};

void OnSignal(int) {
  const int saved = errno;
  const char b = 1;
  (void)!write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

int Usage(const char* why) {
  std::fprintf(stderr, "kvstash_fault_proxy: %s\nusage: kvstash_fault_proxy --target HOST:PORT --port-file FILE\n",
               why);
  return 2;
}

void Answer(const std::string& line) {
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void Handle(kvstash::testing::FaultProxy& proxy, std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.find_first_not_of(" \t") == std::string::npos) return;  // blank: no answer
  if (line == "stats") {
    Answer("ok substituted=" + std::to_string(proxy.substituted()) +
           " flipped=" + std::to_string(proxy.flipped()) +
           " connections=" + std::to_string(proxy.connections()));
    return;
  }
  const kvstash::Status s = proxy.AddRule(line);
  Answer(s.ok() ? std::string("ok") : "error: " + s.message());
}

}  // namespace

int main(int argc, char** argv) {
  std::string target, port_file;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--target" || a == "--port-file") && i + 1 < argc) {
      (a == "--target" ? target : port_file) = argv[++i];
    } else if (a == "--help" || a == "-h") {
      Usage("a kvstash protocol fault-injection proxy (tests/support/fault_proxy.h)");
      return 0;
    } else {
      return Usage(("unknown or incomplete argument '" + a + "'").c_str());
    }
  }
  if (target.empty() || port_file.empty()) return Usage("--target and --port-file are required");

  if (pipe(g_signal_pipe) != 0) {
    std::perror("pipe");
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto proxy = kvstash::testing::FaultProxy::Start(target);
  if (!proxy.ok()) {
    std::fprintf(stderr, "kvstash_fault_proxy: %s\n", proxy.status().ToString().c_str());
    return 1;
  }
  {
    const std::string tmp = port_file + ".tmp";
    std::ofstream out(tmp, std::ios::trunc);
    out << (*proxy)->port() << "\n";
    out.close();
    if (!out || std::rename(tmp.c_str(), port_file.c_str()) != 0) {
      std::fprintf(stderr, "kvstash_fault_proxy: cannot write %s\n", port_file.c_str());
      return 1;
    }
  }

  std::string pending;
  char buf[4096];
  for (;;) {
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {g_signal_pipe[0], POLLIN, 0}};
    const int r = poll(fds, 2, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || (fds[1].revents & POLLIN) != 0) break;  // SIGTERM / SIGINT
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    const ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {  // EOF: a last line without a newline still counts
      if (!pending.empty()) Handle(**proxy, pending);
      break;
    }
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      Handle(**proxy, pending.substr(0, nl));
      pending.erase(0, nl + 1);
    }
  }
  (*proxy)->Stop();
  return 0;
}
