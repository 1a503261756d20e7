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
#include "protocol/frame_parser.h"

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
        parser_(std::min(ctx.limits->max_frame_bytes, protocol::kMaxUnauthenticatedBodyBytes),
                protocol::FrameParser::Direction::kRequests),
        watchdog_(strand),
        reader_wake_(strand),
        done_wake_(strand) {}

  void Start() {
    auto self = this->shared_from_this();
    hello_deadline_ = Clock::now() + Ms(ctx_.limits->hello_timeout_ms);
    asio::co_spawn(strand_, Watchdog(), [self](std::exception_ptr e) {
      LogFailure("protocol connection watchdog", e);
    });
    asio::co_spawn(strand_, Run(), [self](std::exception_ptr e) {
      LogFailure("protocol connection", e);
      self->finished_ = true;
      self->watchdog_.cancel();
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
  static Clock::duration Ms(uint64_t ms) { return std::chrono::milliseconds(ms); }
  // Time a transfer of `bytes` may take beyond io_timeout_ms at the minimum rate.
  Clock::duration RateAllowance(uint64_t bytes) const {
    return std::chrono::microseconds(bytes * 1000000 / ctx_.limits->min_transfer_bytes_per_s);
  }

  awaitable<void> Run() {
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      boost::system::error_code ec;
      co_await stream_.async_handshake(asio::ssl::stream_base::server,
                                       asio::redirect_error(use_awaitable, ec));
      if (ec) {
        KVSTASH_LOG_DEBUG("connection {}: TLS handshake failed: {}", id_, ec.message());
        co_return;
      }
    }
    co_await Reader();
    reading_done_ = true;
    read_deadline_ = frame_deadline_ = kNever;
    Pump();
    while (writing_ || in_flight_ > 0) co_await Wait(done_wake_);
  }

  awaitable<void> Reader() {
    // A small read buffer until HELLO succeeds (a silent or unauthenticated connection
    // costs 4 KiB, not 256), the large one after.
    std::vector<uint8_t> buf(4 * 1024);
    while (!draining_ && !closing_) {
      if (!tenant_.empty() && buf.size() < 256 * 1024) buf.resize(256 * 1024);
      while (in_flight_ >= ctx_.limits->max_in_flight && !draining_ && !closing_) {
        read_deadline_ = kNever;  // waiting on ourselves, not on the client
        reader_waiting_ = true;
        co_await Wait(reader_wake_);
        reader_waiting_ = false;
      }
      if (draining_ || closing_) break;
      const auto now = Clock::now();
      if (parser_.in_frame()) {
        SetDeadline(&read_deadline_, now + Ms(ctx_.limits->io_timeout_ms));
        if (!frame_body_allowed_ && parser_.pending_body_bytes() > 0 && frame_deadline_ != kNever) {
          frame_body_allowed_ = true;
          SetDeadline(&frame_deadline_,
                      frame_deadline_ + RateAllowance(parser_.pending_body_bytes()));
        }
      } else {
        SetDeadline(&read_deadline_,
                    now + Ms(tenant_.empty() ? ctx_.limits->hello_timeout_ms
                                             : ctx_.limits->idle_timeout_ms));
      }
      boost::system::error_code ec;
      // Large bodies (PUT payloads) are read straight into the frame's buffer.
      if (std::span<uint8_t> tail = parser_.BodyTail(); tail.size() >= 64 * 1024) {
        const size_t n = co_await stream_.async_read_some(
            asio::buffer(tail.data(), tail.size()), asio::redirect_error(use_awaitable, ec));
        if (ec || n == 0 || closing_) break;
        ctx_.metrics->AddBytesIn(n);
        const auto outcome = parser_.CommitBody(n);
        if (outcome == protocol::FrameParser::Outcome::kBad) {
          OnBadFrame();
          break;
        }
        if (outcome == protocol::FrameParser::Outcome::kComplete) {
          OnFrame(parser_.TakeFrame());
          Pump();
        }
        continue;
      }
      const size_t n = co_await stream_.async_read_some(asio::buffer(buf),
                                                        asio::redirect_error(use_awaitable, ec));
      if (ec || n == 0 || closing_) break;  // EOF, reset, deadline (the socket was closed)
      ctx_.metrics->AddBytesIn(n);
      std::span<const uint8_t> in(buf.data(), n);
      // A frame's whole-frame clock starts with its first byte.
      if (!parser_.in_frame()) SetDeadline(&frame_deadline_, Clock::now() + Ms(ctx_.limits->io_timeout_ms));
      while (!in.empty() && !closing_) {
        size_t used = 0;
        const auto outcome = parser_.Feed(in, &used);
        in = in.subspan(used);
        if (outcome == protocol::FrameParser::Outcome::kNeedMore) break;
        if (outcome == protocol::FrameParser::Outcome::kBad) {
          OnBadFrame();
          break;
        }
        OnFrame(parser_.TakeFrame());
        // The next frame's clock starts with its first byte (in this buffer or later).
        if (!in.empty()) SetDeadline(&frame_deadline_, Clock::now() + Ms(ctx_.limits->io_timeout_ms));
      }
      // Replies of every frame of this read go out in one write.
      Pump();
    }
    Pump();
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
    frame_body_allowed_ = false;
    frame_deadline_ = kNever;
    const auto op = static_cast<protocol::Opcode>(frame.header.opcode);
    if (op == protocol::Opcode::kHello && tenant_.empty()) {
      Reply out;
      const bool ok = ctx_.handler->HandleHello(frame, &tenant_, &out.head);
      Enqueue(std::move(out));
      if (ok) {
        hello_deadline_ = kNever;
        parser_.set_max_body_bytes(ctx_.limits->max_frame_bytes);
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
        self->Pump();
        if (self->reader_waiting_) self->reader_wake_.cancel();
        if (self->reading_done_) self->done_wake_.cancel();
      });
    });
  }

  void Enqueue(Reply frame) {
    if (broken_) return;
    queue_.push_back(std::move(frame));
  }

  // Starts one write of everything queued (up to 64 replies) unless one is running;
  // its completion starts the next. Pipelined replies thus share writes.
  void Pump() {
    if (writing_ || queue_.empty() || broken_) return;
    writing_ = true;
    batch_.clear();
    bufs_.clear();
    while (!queue_.empty() && batch_.size() < 64) {
      batch_.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    size_t total = 0;
    for (const Reply& r : batch_) {
      bufs_.emplace_back(r.head.data(), r.head.size());
      if (r.shared) bufs_.emplace_back(r.shared->data(), r.shared->size());
      if (!r.tail.empty()) bufs_.emplace_back(r.tail.data(), r.tail.size());
      total += r.size();
    }
    SetDeadline(&write_deadline_,
                Clock::now() + Ms(ctx_.limits->io_timeout_ms) + RateAllowance(total));
    auto self = this->shared_from_this();
    asio::async_write(stream_, bufs_,
                      asio::bind_executor(strand_, [self, total](boost::system::error_code ec,
                                                                 size_t) {
                        self->OnWritten(ec, total);
                      }));
  }

  void OnWritten(boost::system::error_code ec, size_t total) {
    writing_ = false;
    write_deadline_ = kNever;
    batch_.clear();
    if (ec) {
      broken_ = true;
      queue_.clear();
      closing_ = true;
      CloseSocket();
    } else {
      ctx_.metrics->AddBytesOut(total);
      Pump();
    }
    if (reading_done_) done_wake_.cancel();
  }

  // Deadlines are time points checked by one watchdog timer per connection (the
  // "check_deadline" pattern of asio's timeout examples): moving a deadline later
  // costs nothing, only one earlier than the watchdog's wake-up re-arms the timer.
  void SetDeadline(Clock::time_point* slot, Clock::time_point t) {
    *slot = t;
    if (t < watchdog_at_) {
      watchdog_at_ = t;
      watchdog_.expires_at(t);  // wakes the watchdog, which re-arms itself
    }
  }

  awaitable<void> Watchdog() {
    while (!finished_) {
      watchdog_at_ = std::min({hello_deadline_, read_deadline_, frame_deadline_, write_deadline_});
      if (watchdog_at_ <= Clock::now()) {
        ctx_.metrics->RecordTimeout();
        KVSTASH_LOG_DEBUG("connection {}: deadline passed, closing", id_);
        closing_ = true;
        CloseSocket();
        co_return;
      }
      watchdog_.expires_at(watchdog_at_);
      boost::system::error_code ec;
      co_await watchdog_.async_wait(asio::redirect_error(use_awaitable, ec));
    }
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
    done_wake_.cancel();
  }

  static constexpr Clock::time_point kNever = Clock::time_point::max();

  Stream stream_;
  Strand strand_;
  const uint64_t id_;
  const ConnectionContext ctx_;
  protocol::FrameParser parser_;
  asio::steady_timer watchdog_;
  asio::steady_timer reader_wake_, done_wake_;  // condition signals
  Clock::time_point watchdog_at_ = kNever;
  Clock::time_point hello_deadline_ = kNever, read_deadline_ = kNever,
                    frame_deadline_ = kNever, write_deadline_ = kNever;
  std::deque<Reply> queue_;
  std::vector<Reply> batch_;  // the replies of the write in progress
  std::vector<asio::const_buffer> bufs_;
  std::string tenant_;  // empty until HELLO succeeds
  uint32_t in_flight_ = 0;
  bool draining_ = false, closing_ = false, reading_done_ = false, writing_ = false,
       broken_ = false, reader_waiting_ = false, frame_body_allowed_ = false, finished_ = false;
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
