#include "demo/demo_server.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

extern char** environ;

namespace kvstash::demo {

DemoServer::~DemoServer() { Stop(); }

Status DemoServer::Start(const DemoServerOptions& o) {
  if (pid_ > 0) return Status::InvalidArgument("demo server already started");
  std::error_code ec;
  std::filesystem::create_directories(o.data_dir, ec);
  if (ec) return Status::Unavailable("cannot create " + o.data_dir + ": " + ec.message());
  const std::string ready = o.data_dir + "/.demo-ready.json";
  std::filesystem::remove(ready, ec);
  std::vector<std::string> argv = o.launcher;
  argv.insert(argv.end(), {o.binary,
                           "--port", std::to_string(o.port),
                           "--http-port", std::to_string(o.http_port),
                           "--listen", o.listen,
                           "--tenant", o.tenant + "=" + o.credential,
                           "--ready-file", ready,
                           "--log-level", "warn"});
  if (!o.memory_only) argv.insert(argv.end(), {"--data-dir", o.data_dir});
  argv.insert(argv.end(), o.extra_args.begin(), o.extra_args.end());
  std::vector<char*> cargs;
  for (auto& a : argv) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!o.log_file.empty()) {
    posix_spawn_file_actions_addopen(&fa, 1, o.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  }
  const int rc = posix_spawnp(&pid_, cargs[0], &fa, nullptr, cargs.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    pid_ = -1;
    return Status::Unavailable(std::string("cannot start ") + cargs[0] + ": " + std::strerror(rc));
  }
  const auto deadline = std::chrono::steady_clock::now() + o.ready_timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(ready);
    if (in) {
      auto j = nlohmann::json::parse(in, nullptr, false);
      if (!j.is_discarded() && j.contains("port") && j.contains("http_port")) {
        port_ = j["port"].get<uint16_t>();
        http_port_ = j["http_port"].get<uint16_t>();
        return Status::Ok();
      }
    }
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::Unavailable("kvstash-server exited during start-up (exit status " +
                                 std::to_string(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st)) +
                                 "; is the port in use?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Stop();
  return Status::Unavailable("kvstash-server not ready in time");
}

int DemoServer::Stop() {
  if (pid_ <= 0) return -1;
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
                                                      uint16_t port, uint16_t http_port, ClientOptions* client,
                                                      DemoServer* server) {
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
