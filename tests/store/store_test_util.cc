#include "tests/store/store_test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

namespace kvstash::store::testing {
namespace {

uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A loopback port that is free now (and whose cluster bus port, +10000, is too).
int FreePort(bool need_bus) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof(a);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      close(fd);
      continue;
    }
    const int port = ntohs(a.sin_port);
    close(fd);
    if (!need_bus) return port;
    if (port + 10000 > 65535) continue;
    int bus = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_port = htons(static_cast<uint16_t>(port + 10000));
    const bool ok = bind(bus, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(bus);
    if (ok) return port;
  }
  return 0;
}

bool OnPath(const char* prog) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::string p(path);
  size_t b = 0;
  while (b <= p.size()) {
    size_t e = p.find(':', b);
    if (e == std::string::npos) e = p.size();
    if (access((p.substr(b, e - b) + "/" + prog).c_str(), X_OK) == 0) return true;
    b = e + 1;
  }
  return false;
}

}  // namespace

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "kvstash_store_XXXXXX").string();
  char* made = mkdtemp(tmpl.data());
  path_ = made ? made : "";
}
TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

std::vector<uint8_t> Bytes(uint64_t seed, size_t n) {
  std::vector<uint8_t> out(n);
  uint64_t s = seed;
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = SplitMix(s);
    for (size_t j = 0; j < 8 && i + j < n; ++j) out[i + j] = static_cast<uint8_t>(v >> (8 * j));
  }
  return out;
}

Digest256 TestNamespace(const std::string& fingerprint, const std::string& adapter_name,
                        const std::string& adapter_id, const std::string& cache_salt) {
  Namespace spec;
  spec.model_fingerprint = fingerprint;
  spec.layout = {30, 3, 64, DType::kBF16};
  spec.chunk_tokens = 256;
  spec.adapter_name = adapter_name;
  spec.adapter_id = adapter_id;
  spec.cache_salt = cache_salt;
  spec.codec_id = "raw";
  return NamespaceDigest(spec).value();
}

std::vector<StoredKey> Chain::stored() const {
  std::vector<StoredKey> out;
  for (const ChunkKey& k : keys) out.push_back(k.stored());
  return out;
}

std::vector<PutChunk> Chain::Puts(size_t begin, size_t end) const {
  std::vector<PutChunk> out;
  for (size_t i = begin; i < end; ++i) {
    PutChunk p;
    p.key = keys[i].stored();
    p.has_parent = i > 0;
    if (i > 0) p.parent = keys[i - 1].stored();
    p.tokens = keys[i].tokens;
    p.partial = keys[i].partial;
    p.codec = 0;
    p.payload = payloads[i];
    p.state = states[i];
    out.push_back(p);
  }
  return out;
}

Chain MakeChain(const Digest256& ns, uint64_t seed, size_t n_chunks, size_t payload_bytes,
                uint32_t chunk_tokens, bool with_state, size_t extra_tokens) {
  Chain c;
  uint64_t s = seed * 0x100000001B3ull + 1;
  const size_t n_tokens = n_chunks * chunk_tokens + extra_tokens;
  c.tokens.resize(n_tokens);
  for (uint32_t& t : c.tokens) t = static_cast<uint32_t>(SplitMix(s) % 49152);
  c.keys = ComputeChunkKeys(ns, c.tokens, chunk_tokens, extra_tokens > 0).value();
  for (size_t i = 0; i < c.keys.size(); ++i) {
    c.payloads.push_back(Bytes(seed * 1000003 + i, payload_bytes + i % 7));
    c.states.push_back(with_state ? Bytes(seed * 7919 + i, 64 + i) : std::vector<uint8_t>{});
  }
  return c;
}

bool RedisInstalled() { return OnPath("redis-server") && OnPath("redis-cli"); }

std::string RedisReplyText(const std::string& host, int port, const char* cmd) {
  timeval tv{1, 0};
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, tv);
  if (c == nullptr || c->err) {
    if (c) redisFree(c);
    return "";
  }
  redisSetTimeout(c, tv);
  auto* r = static_cast<redisReply*>(redisCommand(c, cmd));
  std::string out;
  if (r != nullptr) {
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) out.assign(r->str, r->len);
    freeReplyObject(r);
  }
  redisFree(c);
  return out;
}

std::unique_ptr<RedisServer> RedisServer::Start(const std::string& dir, bool cluster,
                                                std::string* error, int fixed_port) {
  RedisLaunch launch;
  launch.port = fixed_port;
  return Start(dir, cluster, error, launch);
}

std::unique_ptr<RedisServer> RedisServer::Start(const std::string& dir, bool cluster,
                                                std::string* error, const RedisLaunch& launch) {
  const int fixed_port = launch.port;
  for (int attempt = 0; attempt < (fixed_port != 0 ? 1 : 3); ++attempt) {
    const int port = fixed_port != 0 ? fixed_port : FreePort(cluster);
    if (port == 0) {
      *error = "no free loopback port";
      return nullptr;
    }
    const std::string ps = std::to_string(port);
    std::vector<std::string> args = launch.launcher;
    args.insert(args.end(), {"redis-server", "--port", ps, "--bind", launch.host,
                             "--save", "", "--appendonly", "no", "--daemonize", "no",
                             "--dir", dir, "--logfile", dir + "/redis-" + ps + ".log"});
    // Off loopback (a test's own network namespace), protected mode refuses clients.
    if (launch.host != "127.0.0.1") args.insert(args.end(), {"--protected-mode", "no"});
    if (cluster) {
      args.insert(args.end(), {"--cluster-enabled", "yes", "--cluster-config-file",
                               dir + "/nodes-" + ps + ".conf", "--cluster-node-timeout",
                               std::to_string(launch.cluster_node_timeout_ms),
                               // a replica whose link broke long ago still takes over
                               "--cluster-replica-validity-factor", "0"});
    }
    const pid_t pid = fork();
    if (pid == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      int devnull = open("/dev/null", O_RDWR);
      dup2(devnull, 1);
      dup2(devnull, 2);
      execvp(argv[0], argv.data());
      _exit(127);
    }
    std::unique_ptr<RedisServer> s(new RedisServer());
    s->pid_ = pid;
    s->host_ = launch.host;
    s->port_ = port;
    for (int i = 0; i < 100; ++i) {
      if (RedisReplyText(launch.host, port, "PING") == "PONG") return s;
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        s->pid_ = -1;
        break;  // exited (port taken meanwhile?): try another port
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  *error = "redis-server did not answer PING";
  return nullptr;
}

void RedisServer::Kill() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

RedisServer::~RedisServer() { Kill(); }

int RunProgram(const std::vector<std::string>& args, std::string* out) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  ssize_t r;
  while ((r = read(fds[0], buf, sizeof(buf))) > 0) out->append(buf, static_cast<size_t>(r));
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

bool StartCluster(const std::string& dir, std::vector<std::unique_ptr<RedisServer>>* nodes,
                  std::string* error, const ClusterLaunch& launch) {
  std::vector<std::string> args = {"redis-cli", "--cluster", "create"};
  const int n = launch.masters * (1 + launch.replicas_per_master);
  for (int i = 0; i < n; ++i) {
    RedisLaunch node = launch.node;
    if (node.port != 0) node.port += i;
    auto s = RedisServer::Start(dir, /*cluster=*/true, error, node);
    if (!s) return false;
    args.push_back(s->endpoint());
    nodes->push_back(std::move(s));
  }
  args.insert(args.end(), {"--cluster-replicas", std::to_string(launch.replicas_per_master),
                           "--cluster-yes"});
  std::string out;
  if (RunProgram(args, &out) != 0) {
    *error = "redis-cli --cluster create failed: " + out;
    return false;
  }
  for (int i = 0; i < 400; ++i) {
    bool all_ok = true;
    for (const auto& node : *nodes) {
      all_ok = all_ok && RedisReplyText(node->host(), node->port(), "CLUSTER INFO")
                                 .find("cluster_state:ok") != std::string::npos;
      if (launch.replicas_per_master > 0) {
        // A replica is ready to take over once its link is up; a master is ready when
        // it has its replicas.
        const std::string repl = RedisReplyText(node->host(), node->port(), "INFO replication");
        all_ok = all_ok && (repl.find("master_link_status:up") != std::string::npos ||
                            repl.find("connected_slaves:" +
                                      std::to_string(launch.replicas_per_master)) !=
                                std::string::npos);
      }
    }
    if (all_ok) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  *error = "cluster_state did not become ok (or replicas did not link)";
  return false;
}

}  // namespace kvstash::store::testing
