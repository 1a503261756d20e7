#include "server/server.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>
#include <unistd.h>

#include "common/logging.h"
#include "common/thread_annotations.h"
#include "common/worker_threads.h"
#include "server/connection.h"
#include "server/http_server.h"
#include "server/stats_history.h"
#include "server/metrics.h"
#include "server/request_handler.h"
#include "server/tenant_codecs.h"
#include "server/tenants.h"

namespace kvstash::server {

namespace asio = boost::asio;
using asio::ip::tcp;

class Server::Impl {
 public:
  Impl(ServerConfig config, std::unique_ptr<ChunkStore> store, TenantTable tenants,
       TenantCodecs codecs)
      : config_(std::move(config)),
        store_(std::move(store)),
        tenants_(std::move(tenants)),
        codecs_(std::move(codecs)),
        ioc_(static_cast<int>(config_.io_threads)),
        work_(asio::make_work_guard(ioc_)),
        workers_(static_cast<int>(config_.worker_threads)),
        workers_work_(asio::make_work_guard(workers_)),
        acceptor_(ioc_),
        signals_(ioc_),
        drain_timer_(ioc_),
        history_(config_.history_points, config_.history_interval_ms),
        history_timer_(ioc_),
        accept_strand_(asio::make_strand(ioc_)),
        http_(ioc_, HttpSources{[this] { return handler_->PrometheusText(); },
                                [this] { return DumpJson(handler_->StatsJson()); },
                                [this] { return DumpJson(history_.Render()); },
                                [this] { return draining_.load(); }, config_.chart_js,
                                [this] { return handler_->HealthDetail(); }}) {}

  // Tenant names come from flags as bytes: invalid UTF-8 is replaced, never thrown.
  static std::string DumpJson(const nlohmann::json& j) {
    return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

  Status WriteReadyFile() const {
    const std::string tmp = config_.ready_file + ".tmp";
    {
      std::ofstream f(tmp);
      f << "{\"port\":" << port_ << ",\"http_port\":" << http_.port() << ",\"pid\":" << ::getpid()
        << "}\n";
      f.close();
      if (!f) return Status::IOError("ready file " + tmp + ": cannot write");
    }
    if (std::rename(tmp.c_str(), config_.ready_file.c_str()) != 0) {
      const int err = errno;
      std::remove(tmp.c_str());
      return Status::IOError("ready file " + config_.ready_file + ": " + std::strerror(err));
    }
    return Status::Ok();
  }

  Status Init() {
    if (!config_.tls_cert_file.empty()) {
      tls_ = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
      boost::system::error_code ec;
      tls_->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                        asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                        asio::ssl::context::no_tlsv1_1);
      // asio's message is only "asio.ssl error": name the file that failed, and say
      // when it cannot be opened at all.
      const auto fail = [](const char* what, const std::string& file, const boost::system::error_code& e) {
        std::error_code fs_ec;
        const bool readable = std::filesystem::is_regular_file(file, fs_ec);
        return Status::InvalidArgument(
            std::string("TLS ") + what + " " + file + ": " +
            (readable ? "not a usable PEM " + std::string(what) + " (" + e.message() + ")"
                      : std::string("no such file")));
      };
      tls_->use_certificate_chain_file(config_.tls_cert_file, ec);
      if (ec) return fail("certificate", config_.tls_cert_file, ec);
      tls_->use_private_key_file(config_.tls_key_file, asio::ssl::context::pem, ec);
      if (ec) return fail("key", config_.tls_key_file, ec);
    }
    return Status::Ok();
  }

  Status Start() {
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(config_.listen, ec);
    if (ec) return Status::InvalidArgument("bad listen address " + config_.listen);
    tcp::endpoint ep(addr, config_.port);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Status::IOError("protocol port " + std::to_string(config_.port) + ": " + ec.message());
    port_ = acceptor_.local_endpoint().port();
    KVSTASH_RETURN_IF_ERROR(http_.Listen(config_.http_listen, config_.http_port));
    if (config_.server_id.empty()) config_.server_id = config_.listen + ":" + std::to_string(port_);
    handler_ = std::make_unique<RequestHandler>(
        store_.get(), &tenants_, &metrics_,
        HandlerLimits{config_.server_id, config_.limits.max_frame_bytes,
                      config_.limits.max_in_flight},
        &codecs_);
    conn_ctx_ = ConnectionContext{&config_.limits, handler_.get(), &metrics_, &workers_,
                                  tls_.get(), [this](uint64_t id) { OnClose(id); }};
    asio::co_spawn(accept_strand_, AcceptLoop(), [](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        KVSTASH_LOG_ERROR("protocol acceptor ended with an exception: {}", ex.what());
      }
    });
    KVSTASH_RETURN_IF_ERROR(StartThreads());
    // The ready file is written once both ports listen and every thread runs, so a
    // client that reads it is served at once. A file that cannot be written fails the
    // start: a script waiting for it would otherwise wait forever.
    if (!config_.ready_file.empty()) {
      KVSTASH_RETURN_IF_ERROR(WriteReadyFile());
      started_ = true;
    }
    if (config_.history_interval_ms > 0) {
      SampleHistory();  // the first sample at start: a dashboard opened now has a baseline
    }
    if (std::error_code fs_ec; !std::filesystem::is_regular_file(config_.chart_js, fs_ec)) {
      KVSTASH_LOG_WARN("chart_js \"{}\" is not a readable file: /dashboard will show no charts "
                       "(install Debian's libjs-chart.js or set chart_js / --chart-js)",
                       config_.chart_js);
    }
    KVSTASH_LOG_INFO("kvstash-server {} listening on {}:{} (protocol{}) and {}:{} (HTTP), {} tenants",
                     config_.server_id, config_.listen, port_, tls_ ? ", TLS" : "",
                     config_.http_listen, http_.port(),
                     tenants_.size());
    return Status::Ok();
  }

  // Records one /v1/history sample and re-arms the timer (ended by ioc_.stop()).
  void SampleHistory() {
    const int64_t unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
    history_.Record(unix_ms, handler_->StatsJson());
    history_timer_.expires_after(std::chrono::milliseconds(config_.history_interval_ms));
    history_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) SampleHistory();
    });
  }

  void HandleSignals() {
    handles_signals_ = true;
    signals_.add(SIGINT);
    signals_.add(SIGTERM);
    signals_.add(SIGHUP);  // a closed terminal or session: drain, not die (no config reload)
    signals_.async_wait([this](boost::system::error_code ec, int sig) {
      if (ec) return;
      KVSTASH_LOG_INFO("signal {}: draining", sig);
      Shutdown();
    });
  }

  void Shutdown() {
    // /healthz answers 503 from here on (HttpSources::draining) until the process ends.
    if (draining_.exchange(true)) return;
    asio::post(accept_strand_, [this] {
      boost::system::error_code ec;
      signals_.cancel(ec);
      if (config_.drain_grace_ms == 0) {
        BeginDrain();
        return;
      }
      KVSTASH_LOG_INFO("draining: /healthz answers 503, serving {} ms more before closing",
                       config_.drain_grace_ms);
      drain_timer_.expires_after(std::chrono::milliseconds(config_.drain_grace_ms));
      drain_timer_.async_wait(asio::bind_executor(accept_strand_, [this](boost::system::error_code e) {
        if (!e) BeginDrain();
      }));
    });
  }

  void Wait() {
    for (auto& t : threads_) t.join();
    threads_.clear();
    JoinWorkers();  // after the I/O threads: the store calls queued by then still run
    if (handles_signals_) {
      // Draining is done but the store still closes (RocksDB flushes) when the Server is
      // destroyed; asio would restore the default action (termination) then, so another
      // SIGTERM/SIGHUP (systemd sends both) would kill the process mid-close. Ignore them.
      boost::system::error_code ec;
      signals_.clear(ec);
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, SIG_IGN);
      handles_signals_ = false;
    }
    http_.CloseNow();  // /healthz answered 503 until here; now nothing listens
    if (!config_.ready_file.empty() && started_) {
      std::remove(config_.ready_file.c_str());  // no stale port numbers for scripts
      started_ = false;
    }
  }

  uint16_t port() const { return port_; }
  uint16_t http_port() const { return http_.port(); }

 private:
  asio::awaitable<void> AcceptLoop() {
    while (true) {
      boost::system::error_code ec;
      tcp::socket socket =
          co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (!acceptor_.is_open() || drain_started_) co_return;
        KVSTASH_LOG_WARN("accept failed: {}", ec.message());
        if (ec == asio::error::no_descriptors) {
          asio::steady_timer t(ioc_, std::chrono::milliseconds(50));
          co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        }
        continue;
      }
      if (metrics_.open_connections() >= config_.limits.max_connections) {
        metrics_.ConnectionRejected();
        std::vector<uint8_t> out;
        protocol::AppendErrorReply(static_cast<uint8_t>(protocol::Opcode::kHello), 0,
                                   Status::ResourceExhausted("server at its connection limit"),
                                   &out);
        asio::write(socket, asio::buffer(out), ec);  // a few bytes into an empty buffer
        socket.close(ec);
        continue;
      }
      metrics_.ConnectionOpened();
      const uint64_t id = next_id_++;
      auto handle = StartConnection(ioc_, std::move(socket), id, conn_ctx_);
      MutexLock lock(mu_);
      // It may have closed already (on another I/O thread).
      if (closed_early_.erase(id) == 0) conns_[id] = handle;
    }
  }

  // After the grace period: stop accepting, let every connection finish what it has in
  // flight, stop when the last one closed or drain_timeout_ms passed.
  void BeginDrain() {
    drain_started_ = true;
    boost::system::error_code ec;
    acceptor_.close(ec);
    std::vector<std::shared_ptr<ConnectionHandle>> open;
    {
      MutexLock lock(mu_);
      for (auto& [id, c] : conns_) {
        if (auto s = c.lock()) open.push_back(std::move(s));
      }
    }
    for (auto& c : open) c->BeginDrain();
    drain_timer_.expires_after(std::chrono::milliseconds(config_.drain_timeout_ms));
    drain_timer_.async_wait([this](boost::system::error_code e) {
      if (e) return;
      KVSTASH_LOG_WARN("drain timeout: {} connections cut off", metrics_.open_connections());
      Stop();
    });
    MaybeFinishDrain();
  }

  void OnClose(uint64_t id) {
    metrics_.ConnectionClosed();
    {
      MutexLock lock(mu_);
      if (conns_.erase(id) == 0) closed_early_.insert(id);
    }
    if (drain_started_) asio::post(ioc_, [this] { MaybeFinishDrain(); });
  }

  // Starts the worker threads, then the I/O threads. When the OS refuses a thread
  // (std::system_error, e.g. EAGAIN: out of threads or memory for stacks), stops and
  // joins those started and returns ResourceExhausted: the server does not run, the
  // process is not aborted.
  Status StartThreads() {
    worker_threads_.reserve(config_.worker_threads);  // push_back never throws with a thread started
    threads_.reserve(config_.io_threads);
    try {
      for (uint32_t i = 0; i < config_.worker_threads; ++i) {
        worker_threads_.push_back(StartThread([this] { workers_.run(); }));
      }
      for (uint32_t i = 0; i < config_.io_threads; ++i) threads_.push_back(StartThread([this] { ioc_.run(); }));
    } catch (const std::system_error& e) {
      const std::string started = std::to_string(worker_threads_.size()) + " of " +
                                  std::to_string(config_.worker_threads) + " worker and " +
                                  std::to_string(threads_.size()) + " of " +
                                  std::to_string(config_.io_threads) + " I/O threads";
      Stop();
      for (auto& t : threads_) t.join();
      threads_.clear();
      JoinWorkers();
      return Status::ResourceExhausted("could not start a thread after " + started + ": " + e.what() +
                                       " (lower io_threads / worker_threads, or raise the process's thread limit)");
    }
    return Status::Ok();
  }

  // Lets the worker threads finish the store calls queued, then joins them.
  void JoinWorkers() {
    workers_work_.reset();
    for (auto& t : worker_threads_) t.join();
    worker_threads_.clear();
  }

  void MaybeFinishDrain() KVSTASH_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (conns_.empty()) {
      drain_timer_.cancel();
      StopLocked();
    }
  }

  void Stop() KVSTASH_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    StopLocked();
  }
  void StopLocked() KVSTASH_REQUIRES(mu_) {
    work_.reset();
    ioc_.stop();
  }

  ServerConfig config_;
  std::unique_ptr<ChunkStore> store_;
  TenantTable tenants_;
  TenantCodecs codecs_;
  Metrics metrics_;
  asio::io_context ioc_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  // Store calls (requests not run inline) run on worker_threads_; Start starts them.
  asio::io_context workers_;
  asio::executor_work_guard<asio::io_context::executor_type> workers_work_;
  std::vector<std::thread> worker_threads_;
  tcp::acceptor acceptor_;
  asio::signal_set signals_;
  asio::steady_timer drain_timer_;
  StatsHistory history_;
  asio::steady_timer history_timer_;  // runs SampleHistory on the I/O threads
  // The accept loop, the shutdown steps and the drain timer run on this strand: the
  // acceptor is closed there, never concurrently with an async_accept on another I/O
  // thread (a data race ThreadSanitizer found).
  asio::strand<asio::io_context::executor_type> accept_strand_;
  HttpServer http_;
  std::unique_ptr<asio::ssl::context> tls_;
  std::unique_ptr<RequestHandler> handler_;
  ConnectionContext conn_ctx_{};
  std::vector<std::thread> threads_;
  std::atomic<bool> draining_{false};       // Shutdown() was called: /healthz 503
  std::atomic<bool> drain_started_{false};  // grace over: connections are closing
  bool started_ = false;                    // Start() wrote the ready file
  bool handles_signals_ = false;            // HandleSignals() was called
  uint16_t port_ = 0;
  Mutex mu_;
  std::map<uint64_t, std::weak_ptr<ConnectionHandle>> conns_ KVSTASH_GUARDED_BY(mu_);
  // Closed before AcceptLoop registered them.
  std::set<uint64_t> closed_early_ KVSTASH_GUARDED_BY(mu_);
  std::atomic<uint64_t> next_id_{1};
};

Result<std::unique_ptr<Server>> Server::Create(ServerConfig config,
                                               std::unique_ptr<ChunkStore> store) {
  KVSTASH_RETURN_IF_ERROR(config.Validate());
  if (!store) return Status::InvalidArgument("server needs a store");
  KVSTASH_ASSIGN_OR_RETURN(TenantTable tenants, TenantTable::Create(config.tenants));
  KVSTASH_ASSIGN_OR_RETURN(TenantCodecs codecs, TenantCodecs::Load(config.tenants));
  auto impl = std::make_unique<Impl>(std::move(config), std::move(store), std::move(tenants),
                                     std::move(codecs));
  KVSTASH_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() {
  if (impl_) {
    impl_->Shutdown();
    impl_->Wait();
  }
}
void Server::HandleSignals() { impl_->HandleSignals(); }
Status Server::Start() { return impl_->Start(); }
uint16_t Server::port() const { return impl_->port(); }
uint16_t Server::http_port() const { return impl_->http_port(); }
void Server::Shutdown() { impl_->Shutdown(); }
void Server::Wait() { impl_->Wait(); }

}  // namespace kvstash::server
