#include "server/connection.h"

#include <utility>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <deque>

#include "common/logging.h"
#include "server/protocol/frame_parser.h"

namespace kvstash::server {
namespace {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using asio::ip::tcp;
using Strand = asio::strand<asio::io_context::executor_type>;
using TlsStream = asio::ssl::stream<tcp::socket>;
using Clock = std::chrono::steady_clock;

tcp::socket& Lowest(tcp::socket& s) { return s; }
tcp::socket& Lowest(TlsStream& s) { return s.next_layer(); }

// Logs a coroutine that ended with an exception (never co_spawn detached silently).
void LogFailure(const char* what, std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    KVSTASH_LOG_ERROR("{} ended with an exception: {}", what, ex.what());
  }
}

template <class Stream>
class Connection : public ConnectionHandle,
                   public std::enable_shared_from_this<Connection<Stream>> {
 public:
  Connection(Stream stream, Strand strand, uint64_t id, const ConnectionContext& ctx)
      : stream_(std::move(stream)),
        strand_(strand),
        id_(id),
        ctx_(ctx),
        parser_(ctx.limits->max_frame_bytes, protocol::FrameParser::Direction::kRequests),
        read_timer_(strand),
        write_timer_(strand),
        hello_timer_(strand),
        reader_wake_(strand),
        writer_wake_(strand),
        done_wake_(strand) {}

  void Start() {
    auto self = this->shared_from_this();
    asio::co_spawn(strand_, Run(), [self](std::exception_ptr e) {
      LogFailure("protocol connection", e);
      self->CloseSocket();
      self->ctx_.on_close(self->id_);
    });
  }

  void BeginDrain() override {
    auto self = this->shared_from_this();
    asio::post(strand_, [self] {
      self->draining_ = true;
      boost::system::error_code ec;
      // Wakes a pending read with end-of-file; requests in flight still get replies.
      Lowest(self->stream_).shutdown(tcp::socket::shutdown_receive, ec);
      self->reader_wake_.cancel();
    });
  }

 private:
  awaitable<void> Run() {
    ArmHello();
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      boost::system::error_code ec;
      co_await stream_.async_handshake(asio::ssl::stream_base::server,
                                       asio::redirect_error(use_awaitable, ec));
      if (ec) {
        KVSTASH_LOG_DEBUG("connection {}: TLS handshake failed: {}", id_, ec.message());
        co_return;
      }
    }
    auto self = this->shared_from_this();
    asio::co_spawn(strand_, Writer(), [self](std::exception_ptr e) {
      LogFailure("protocol connection writer", e);
      self->writer_done_ = true;
      self->done_wake_.cancel();
    });
    co_await Reader();
    reading_done_ = true;
    writer_wake_.cancel();
    while (!writer_done_ || in_flight_ > 0) co_await Wait(done_wake_);
    hello_timer_.cancel();
    CloseSocket();
  }

  awaitable<void> Reader() {
    std::vector<uint8_t> buf(256 * 1024);
    while (!draining_ && !closing_) {
      while (in_flight_ >= ctx_.limits->max_in_flight && !draining_ && !closing_) {
        co_await Wait(reader_wake_);
      }
      if (draining_ || closing_) break;
      const bool mid_frame = parser_.bytes_wanted() != protocol::kFrameHeaderBytes;
      ArmDeadline(read_timer_, mid_frame ? ctx_.limits->io_timeout_ms
                                         : ctx_.limits->idle_timeout_ms);
      boost::system::error_code ec;
      // Large bodies (PUT payloads) are read straight into the frame's buffer.
      if (std::span<uint8_t> tail = parser_.BodyTail(); tail.size() >= 64 * 1024) {
        const size_t n = co_await stream_.async_read_some(
            asio::buffer(tail.data(), tail.size()), asio::redirect_error(use_awaitable, ec));
        read_timer_.cancel();
        if (ec || n == 0) break;
        ctx_.metrics->AddBytesIn(n);
        const auto outcome = parser_.CommitBody(n);
        if (outcome == protocol::FrameParser::Outcome::kBad) {
          OnBadFrame();
          co_return;
        }
        if (outcome == protocol::FrameParser::Outcome::kComplete) {
          OnFrame(parser_.TakeFrame());
          if (closing_) co_return;
        }
        continue;
      }
      const size_t n = co_await stream_.async_read_some(asio::buffer(buf),
                                                        asio::redirect_error(use_awaitable, ec));
      read_timer_.cancel();
      if (ec || n == 0) break;  // EOF, reset, deadline (the socket was closed)
      ctx_.metrics->AddBytesIn(n);
      std::span<const uint8_t> in(buf.data(), n);
      while (!in.empty()) {
        size_t used = 0;
        const auto outcome = parser_.Feed(in, &used);
        in = in.subspan(used);
        if (outcome == protocol::FrameParser::Outcome::kNeedMore) break;
        if (outcome == protocol::FrameParser::Outcome::kBad) {
          OnBadFrame();
          co_return;
        }
        OnFrame(parser_.TakeFrame());
        if (closing_) co_return;
      }
    }
  }

  void OnBadFrame() {
    ctx_.metrics->RecordBadFrame();
    KVSTASH_LOG_DEBUG("connection {}: bad frame: {}", id_, parser_.error().ToString());
    if (const auto& h = parser_.bad_header()) {
      Reply out;
      protocol::AppendErrorReply(h->opcode, h->request_id, parser_.error(), &out.head);
      Enqueue(std::move(out));
    }
    closing_ = true;
  }

  void OnFrame(protocol::Frame frame) {
    const auto op = static_cast<protocol::Opcode>(frame.header.opcode);
    if (op == protocol::Opcode::kHello && tenant_.empty()) {
      Reply out;
      const bool ok = ctx_.handler->HandleHello(frame, &tenant_, &out.head);
      Enqueue(std::move(out));
      if (ok) {
        hello_timer_.cancel();
      } else {
        closing_ = true;
      }
      return;
    }
    if (tenant_.empty() && op != protocol::Opcode::kPing) {
      Enqueue(ctx_.handler->Handle(tenant_, frame));  // PermissionDenied reply
      closing_ = true;
      return;
    }
    if (ctx_.handler->RunsInline(frame.header)) {
      Enqueue(ctx_.handler->Handle(tenant_, frame));
      return;
    }
    ++in_flight_;
    auto self = this->shared_from_this();
    asio::post(*ctx_.workers, [self, frame = std::move(frame), tenant = tenant_]() mutable {
      Reply out = self->ctx_.handler->Handle(tenant, frame);
      asio::post(self->strand_, [self, out = std::move(out)]() mutable {
        --self->in_flight_;
        self->Enqueue(std::move(out));
        self->reader_wake_.cancel();
        self->done_wake_.cancel();
      });
    });
  }

  void Enqueue(Reply frame) {
    if (broken_) return;
    queue_.push_back(std::move(frame));
    writer_wake_.cancel();
  }

  awaitable<void> Writer() {
    std::vector<Reply> batch;
    std::vector<asio::const_buffer> bufs;
    while (true) {
      while (queue_.empty() && !(reading_done_ && in_flight_ == 0)) co_await Wait(writer_wake_);
      if (queue_.empty()) break;
      batch.clear();
      bufs.clear();
      while (!queue_.empty() && batch.size() < 64) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      size_t total = 0;
      for (const Reply& r : batch) {
        bufs.emplace_back(r.head.data(), r.head.size());
        if (r.shared) bufs.emplace_back(r.shared->data(), r.shared->size());
        if (!r.tail.empty()) bufs.emplace_back(r.tail.data(), r.tail.size());
        total += r.size();
      }
      ArmDeadline(write_timer_, ctx_.limits->io_timeout_ms);
      boost::system::error_code ec;
      co_await asio::async_write(stream_, bufs, asio::redirect_error(use_awaitable, ec));
      write_timer_.cancel();
      if (ec) {
        broken_ = true;
        queue_.clear();
        break;
      }
      ctx_.metrics->AddBytesOut(total);
    }
    writer_done_ = true;
    done_wake_.cancel();
  }

  // A deadline that closes the socket when it fires before being cancelled.
  void ArmDeadline(asio::steady_timer& t, uint32_t ms) {
    t.expires_after(std::chrono::milliseconds(ms));
    auto self = this->shared_from_this();
    t.async_wait([self](boost::system::error_code ec) {
      if (ec) return;  // cancelled: the operation finished in time
      self->ctx_.metrics->RecordTimeout();
      KVSTASH_LOG_DEBUG("connection {}: deadline passed, closing", self->id_);
      self->closing_ = true;
      self->CloseSocket();
    });
  }

  void ArmHello() {
    hello_timer_.expires_after(std::chrono::milliseconds(ctx_.limits->hello_timeout_ms));
    auto self = this->shared_from_this();
    hello_timer_.async_wait([self](boost::system::error_code ec) {
      if (ec || !self->tenant_.empty()) return;
      self->ctx_.metrics->RecordTimeout();
      self->closing_ = true;
      self->CloseSocket();
    });
  }

  awaitable<void> Wait(asio::steady_timer& t) {
    t.expires_at(Clock::time_point::max());
    boost::system::error_code ec;
    co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
  }

  void CloseSocket() {
    boost::system::error_code ec;
    Lowest(stream_).shutdown(tcp::socket::shutdown_both, ec);
    Lowest(stream_).close(ec);
    reader_wake_.cancel();
    writer_wake_.cancel();
  }

  Stream stream_;
  Strand strand_;
  const uint64_t id_;
  const ConnectionContext ctx_;
  protocol::FrameParser parser_;
  asio::steady_timer read_timer_, write_timer_, hello_timer_;
  asio::steady_timer reader_wake_, writer_wake_, done_wake_;  // condition signals
  std::deque<Reply> queue_;
  std::string tenant_;  // empty until HELLO succeeds
  uint32_t in_flight_ = 0;
  bool draining_ = false, closing_ = false, reading_done_ = false, writer_done_ = false,
       broken_ = false;
};

}  // namespace

std::shared_ptr<ConnectionHandle> StartConnection(asio::io_context& ioc, tcp::socket socket,
                                                  uint64_t id, const ConnectionContext& ctx) {
  Strand strand = asio::make_strand(ioc);
  boost::system::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  if (ctx.tls != nullptr) {
    auto c = std::make_shared<Connection<TlsStream>>(TlsStream(std::move(socket), *ctx.tls),
                                                     strand, id, ctx);
    c->Start();
    return c;
  }
  auto c = std::make_shared<Connection<tcp::socket>>(std::move(socket), strand, id, ctx);
  c->Start();
  return c;
}

}  // namespace kvstash::server
