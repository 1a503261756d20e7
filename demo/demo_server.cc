#include "demo/demo_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "demo/resource_holder.h"

extern char** environ;

namespace kvstash::demo {
namespace {

// The server a signal to the demo must stop first (-1: none), and whether the handlers
// below are in place (they are installed once, by the first server, and removed with
// the server that holds them: g_previous is never overwritten by our own handler).
std::atomic<pid_t> g_server_pid{-1};
bool g_installed = false;
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[3];

// The server a DemoServer started and has neither stopped nor detached (for
// StartedServerExitNote), and the file its output goes to.
pid_t g_started_pid = -1;
std::string g_started_log;

// Async-signal-safe: stop the server and wait for it, then hand the signal to the action
// that was in place before (the default one kills the demo with it; a handler of the
// caller's, such as the link bench's namespace clean-up, runs as if called first).
void StopServerThenDie(int sig) {
  const pid_t pid = g_server_pid.exchange(-1);
  if (pid > 0) {
    static const char msg[] = "\nkvstash-demo: interrupted; stopping the kvstash-server it started\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    kill(pid, SIGTERM);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
  }
  for (size_t i = 0; i < 3; ++i) {
    if (kStopSignals[i] != sig) continue;
    struct sigaction previous = g_previous[i];
    if (previous.sa_handler == StopServerThenDie) previous.sa_handler = SIG_DFL;  // never loop
    sigaction(sig, &previous, nullptr);
  }
  raise(sig);  // blocked until this handler returns, then taken by the previous action
}

// Makes `pid` the server a stop signal ends first. A signal ignored at start stays
// ignored (a demo started with nohup, or in the background of a non-interactive shell,
// which ignores SIGINT).
void InstallStopHandlers(pid_t pid) {
  g_server_pid = pid;
  if (g_installed) return;
  g_installed = true;
  struct sigaction sa {};
  sa.sa_handler = StopServerThenDie;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < 3; ++i) {
    sigaction(kStopSignals[i], nullptr, &g_previous[i]);
    if (g_previous[i].sa_handler != SIG_IGN) sigaction(kStopSignals[i], &sa, nullptr);
  }
}

// Restores the previous actions when `pid` is the server they protect.
void RemoveStopHandlers(pid_t pid) {
  pid_t expected = pid;
  if (pid <= 0 || !g_server_pid.compare_exchange_strong(expected, -1) || !g_installed) return;
  for (size_t i = 0; i < 3; ++i) sigaction(kStopSignals[i], &g_previous[i], nullptr);
  g_installed = false;
}

// `name` as execvp would find it: itself when it has a '/', else the first executable
// PATH entry (resolved here, before fork, so the child calls only execv).
std::string ResolveExecutable(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return name;
}

// Why a server that exited during start-up could not run: another process on one of its
// ports or on the data folder's RocksDB LOCK ("" when none is found).
std::string DiagnoseStartFailure(const DemoServerOptions& o) {
  std::string why;
  auto port = [&](uint16_t p, const char* flag) {
    if (p == 0) return;
    if (auto h = ListeningPortHolder(p)) {
      why += "; port " + std::to_string(p) + " is held by " + DescribeHolder(*h) + ": stop it" +
             (h->pid > 0 ? " (kill " + std::to_string(h->pid) + ")" : std::string()) + " or pass another " +
             flag + " (0 picks a free one)";
    }
  };
  port(o.port, "--port");
  port(o.http_port, "--http-port");
  if (!o.memory_only) {
    if (auto h = FileLockHolder(o.data_dir + "/LOCK")) {
      why += "; the data folder " + o.data_dir + " is in use by " + DescribeHolder(*h) + ": stop it" +
             (h->pid > 0 ? " (kill " + std::to_string(h->pid) + ")" : std::string()) +
             " or pass another --data-dir";
    }
  }
  return why;
}

// Writes {"tenants": [{"name": tenant, "credential": credential}]} (server/config.h) to
// `path`, readable and writable by this user only (mode 0600, also when it existed).
Status WritePrivateConfig(const std::string& path, const std::string& tenant, const std::string& credential) {
  const std::string text =
      nlohmann::json{{"tenants", {{{"name", tenant}, {"credential", credential}}}}}.dump(1) + "\n";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Unavailable("cannot write " + path + ": " + std::strerror(errno));
  const bool ok =
      fchmod(fd, 0600) == 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int e = errno;
  close(fd);
  if (!ok) return Status::Unavailable("cannot write " + path + ": " + std::strerror(e));
  return Status::Ok();
}

}  // namespace

DemoServer::~DemoServer() { Stop(); }

void DemoServer::Detach() {
  RemoveStopHandlers(pid_);
  if (g_started_pid == pid_) g_started_pid = -1;
  pid_ = -1;
}

Status DemoServer::Start(const DemoServerOptions& o) {
  if (pid_ > 0) return Status::InvalidArgument("demo server already started");
  std::error_code ec;
  std::filesystem::create_directories(o.data_dir, ec);
  if (ec) return Status::Unavailable("cannot create " + o.data_dir + ": " + ec.message());
  const std::string ready = o.data_dir + "/.demo-ready.json";
  std::filesystem::remove(ready, ec);
  // The tenant's credential goes in a config file only this user can read, not on the
  // command line, which every local user can read in ps or /proc/PID/cmdline.
  const std::string config = o.data_dir + "/.demo-server.json";
  KVSTASH_RETURN_IF_ERROR(WritePrivateConfig(config, o.tenant, o.credential));
  std::vector<std::string> argv = o.launcher;
  argv.insert(argv.end(), {o.binary, "--config", config, "--port", std::to_string(o.port), "--http-port",
                           std::to_string(o.http_port), "--listen", o.listen, "--ready-file", ready,
                           "--log-level", "warn"});
  if (!o.memory_only) argv.insert(argv.end(), {"--data-dir", o.data_dir});
  argv.insert(argv.end(), o.extra_args.begin(), o.extra_args.end());
  std::vector<char*> cargs;
  for (auto& a : argv) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const std::string exe = ResolveExecutable(argv[0]);
  // fork + execv rather than posix_spawn: the child sets PR_SET_PDEATHSIG first. An exec
  // failure comes back as errno over a close-on-exec pipe (EOF: the exec happened).
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return Status::Unavailable(std::string("pipe: ") + std::strerror(errno));
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) {
    // Async-signal-safe calls only from here on.
    if (o.exit_with_parent && (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)) _exit(127);
    if (!o.log_file.empty()) {
      const int fd = open(o.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) {
        const int e = errno;
        (void)!write(report[1], &e, sizeof e);
        _exit(127);
      }
    }
    execve(exe.c_str(), cargs.data(), environ);
    const int e = errno;
    (void)!write(report[1], &e, sizeof e);
    _exit(127);
  }
  close(report[1]);
  if (pid_ < 0) {
    const int e = errno;
    close(report[0]);
    pid_ = -1;
    return Status::Unavailable(std::string("cannot start ") + argv[0] + ": fork: " + std::strerror(e));
  }
  int exec_errno = 0;
  ssize_t got;
  while ((got = read(report[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  close(report[0]);
  if (got > 0) {
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return Status::Unavailable("cannot start " + argv[0] + ": " + std::strerror(exec_errno));
  }
  if (o.exit_with_parent) InstallStopHandlers(pid_);
  const auto deadline = std::chrono::steady_clock::now() + o.ready_timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(ready);
    if (in) {
      auto j = nlohmann::json::parse(in, nullptr, false);
      if (!j.is_discarded() && j.contains("port") && j.contains("http_port")) {
        port_ = j["port"].get<uint16_t>();
        http_port_ = j["http_port"].get<uint16_t>();
        g_started_pid = pid_;
        g_started_log = o.log_file;
        return Status::Ok();
      }
    }
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      RemoveStopHandlers(pid_);
      pid_ = -1;
      const std::string holder = DiagnoseStartFailure(o);
      return Status::Unavailable(
          "kvstash-server exited during start-up (exit status " +
          std::to_string(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st)) + ")" +
          (holder.empty() ? "; its log" + (o.log_file.empty() ? std::string() : " (" + o.log_file + ")") + " says why"
                          : holder));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Stop();
  return Status::Unavailable("kvstash-server not ready in time");
}

int DemoServer::Stop() {
  if (pid_ <= 0) return -1;
  RemoveStopHandlers(pid_);
  if (g_started_pid == pid_) g_started_pid = -1;
  kill(pid_, SIGTERM);
  int st = 0;
  waitpid(pid_, &st, 0);
  pid_ = -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::string RandomHex(size_t bytes) {
  std::random_device rd;
  std::string s;
  char b[3];
  for (size_t i = 0; i < bytes; ++i) {
    std::snprintf(b, sizeof b, "%02x", rd() & 0xff);
    s += b;
  }
  return s;
}

Result<std::unique_ptr<Client>> StartServerAndConnect(const std::string& start_server, const std::string& data_dir,
                                                      uint16_t port, uint16_t http_port, bool keep_server,
                                                      ClientOptions* client, DemoServer* server) {
  if (!start_server.empty()) {
    DemoServerOptions so;
    so.binary = start_server;
    so.data_dir = data_dir;
    so.port = port;
    so.http_port = http_port;
    so.tenant = client->tenant;
    if (client->credential.empty()) client->credential = RandomHex(16);
    so.credential = client->credential;
    so.log_file = data_dir + "/kvstash-server.log";
    so.exit_with_parent = !keep_server;
    if (Status s = server->Start(so); !s.ok()) return s.WithContext("starting kvstash-server");
    client->servers = {"127.0.0.1:" + std::to_string(server->port())};
    std::printf("kvstash-server pid %d: protocol 127.0.0.1:%u, RocksDB in %s/, log %s\n", server->pid(),
                server->port(), data_dir.c_str(), so.log_file.c_str());
    std::printf("dashboard: http://127.0.0.1:%u/dashboard\n", server->http_port());
    std::fflush(stdout);
  }
  auto c = Client::Create(*client);
  if (!c.ok()) return c.status().WithContext("client");
  if (Status s = (*c)->Ping(0); !s.ok()) return s.WithContext("ping " + client->servers[0]);
  return c;
}

std::string StartedServerExitNote() {
  if (g_started_pid <= 0) return "";
  // /proc/PID/stat: "pid (comm) state ...", field 52 the exit status as waitpid reports
  // it; a child that has exited stays a zombie (state Z) until Stop() reaps it.
  std::ifstream in("/proc/" + std::to_string(g_started_pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream fields(stat.substr(close + 1));
  std::vector<std::string> f{std::istream_iterator<std::string>(fields), std::istream_iterator<std::string>()};
  if (f.empty() || f[0] != "Z") return "";
  std::string how = "has exited";
  if (f.size() >= 50) {
    const int st = std::atoi(f[49].c_str());  // field 52
    how = WIFSIGNALED(st) ? "was killed by signal " + std::to_string(WTERMSIG(st))
                          : "exited with status " + std::to_string(WEXITSTATUS(st));
  }
  return "the kvstash-server it started (pid " + std::to_string(g_started_pid) + ") " + how +
         (g_started_log.empty() ? std::string() : "; its log: " + g_started_log);
}

double ServerGetUs(Client* client) {
  auto s = client->Stats(0);
  if (!s.ok()) return -1;
  auto j = nlohmann::json::parse(*s, nullptr, false);
  if (j.is_discarded() || !j.contains("requests") || !j["requests"].contains("GET")) return -1;
  const auto& g = j["requests"]["GET"];
  return g.value("mean_us", 0.0) * g.value("count", 0.0);
}

void FinishServer(const std::string& start_server, bool keep, bool show_dashboard, DemoServer* server) {
  if (start_server.empty()) return;
  if (!keep) {
    server->Stop();
    return;
  }
  if (show_dashboard) {
    std::printf("kvstash-server keeps running (pid %d, dashboard http://127.0.0.1:%u/dashboard); stop it with: kill %d\n",
                server->pid(), server->http_port(), server->pid());
  } else {
    std::printf("kvstash-server keeps running (pid %d); stop it with: kill %d\n", server->pid(), server->pid());
  }
  server->Detach();
}

}  // namespace kvstash::demo
