// One logical call of kvstash::Client across its attempts (private to client/): what
// Client::Impl (client_impl.h) retries and fails over, and what a ClientConnection
// (client_connection.h) holds while a request is queued or in flight on it.
// Thread-safety: a Call is touched only on the client's I/O thread.
#pragma once

#include <utility>  // before Boost.Asio (g++ 12 bug, docs/platform-notes.md)

#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kvstash/result.h"
#include "protocol/frame.h"

namespace kvstash::client_detail {

using Clock = std::chrono::steady_clock;
// Completion of a call: its reply frame (status 0) or the status it failed with.
using FrameDone = std::function<void(Result<protocol::Frame>)>;

class ClientConnection;

struct Call {
  uint8_t opcode = 0;
  uint16_t flags = 0;
  std::vector<uint8_t> body;
  // Servers in preference order: the chain's rendezvous order for a routed call, one
  // server for a call by server index. Each attempt picks (Client::Impl::PickServer).
  std::vector<size_t> order;
  size_t server = 0;  // server of the current attempt
  Clock::time_point deadline;
  uint32_t attempt = 0;
  FrameDone done;
  bool finished = false;
  std::unique_ptr<boost::asio::steady_timer> deadline_timer, backoff_timer;
  ClientConnection* conn = nullptr;  // connection of the attempt in flight
  uint64_t request_id = 0;
};
using CallPtr = std::shared_ptr<Call>;

}  // namespace kvstash::client_detail
