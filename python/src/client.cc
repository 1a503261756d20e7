// Bindings of kvstash::Client (client/include/kvstash/client.h): TlsOptions,
// LookupResult, PutChunk and the native Client behind kvstash.Client.
//
// GIL: every network call runs with the GIL released. The async forms (names ending
// in _cb) take a Python callable done(error, value) and call it ONCE on the client's
// I/O thread with the GIL held (error: a KvstashError or None); kvstash/_client.py
// turns that into an asyncio future with loop.call_soon_threadsafe. The callable is
// released under the GIL.
//
// Lifetime: the C++ client is held by a shared_ptr; close() drops the binding's
// reference with the GIL released (its destructor fails outstanding calls, whose
// callbacks need the GIL: they fail with UnavailableError) and later calls raise
// InvalidArgumentError("client is closed"): using a closed client is the caller's
// error, never worth a retry.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "common/thread_annotations.h"
#include "kvstash/client.h"
#include "native.h"

namespace kvstash::py {
namespace {

CallOptions Call(std::optional<int64_t> deadline_ms) {
  CallOptions c;
  if (deadline_ms) {
    if (*deadline_ms <= 0) ThrowInvalid("deadline_ms must be positive");
    c.deadline = std::chrono::milliseconds(*deadline_ms);
  }
  return c;
}

std::vector<ChunkRef> ToChain(const std::vector<ChunkKey>& chain) {
  std::vector<ChunkRef> refs;
  refs.reserve(chain.size());
  for (const ChunkKey& k : chain) refs.push_back({k.stored(), k.tokens});
  return refs;
}

// A Python callable kept alive across threads; deleted (decref) under the GIL.
using PyFn = std::shared_ptr<nb::object>;
PyFn HoldFn(nb::object fn) {
  return PyFn(new nb::object(std::move(fn)), [](nb::object* p) {
    nb::gil_scoped_acquire gil;
    delete p;
  });
}

// Calls done(error, value) with the GIL; a Python exception inside done is reported
// as unraisable (it cannot propagate into the I/O thread).
template <typename MakeValue>
void Deliver(const PyFn& done, const Status& s, MakeValue make_value) {
  nb::gil_scoped_acquire gil;
  try {
    if (s.ok()) {
      (*done)(nb::none(), make_value());
    } else {
      (*done)(MakeError(s), nb::none());
    }
  } catch (nb::python_error& e) {
    e.discard_as_unraisable("kvstash async callback");
  }
}

class PyClient {
 public:
  explicit PyClient(std::unique_ptr<Client> c) : c_(std::move(c)) {}
  ~PyClient() {
    std::shared_ptr<Client> c;
    {
      MutexLock lock(mu_);
      c = std::move(c_);
    }
    if (c) {
      nb::gil_scoped_release release;
      c.reset();
    }
  }

  // The client, or InvalidArgumentError (not retryable) when closed. REQUIRES: the GIL.
  std::shared_ptr<Client> Get() {
    MutexLock lock(mu_);
    if (!c_) ThrowStatus(Status::InvalidArgument("client is closed"));
    return c_;
  }
  void Close() {
    std::shared_ptr<Client> c;
    {
      MutexLock lock(mu_);
      c = std::move(c_);
    }
    nb::gil_scoped_release release;
    c.reset();
  }
  bool closed() {
    MutexLock lock(mu_);
    return c_ == nullptr;
  }

  // Runs f(client) with the GIL released; the local reference is dropped before the
  // GIL comes back, so a last reference never destroys the client under the GIL.
  template <typename F>
  auto Run(F f) {
    std::shared_ptr<Client> c = Get();
    nb::gil_scoped_release release;
    auto out = f(*c);
    c.reset();
    return out;
  }

 private:
  Mutex mu_;
  std::shared_ptr<Client> c_ KVSTASH_GUARDED_BY(mu_);
};

PutChunk MakePutChunk(nb::handle route, nb::handle key, nb::handle parent, nb::handle payload,
                      bool pin) {
  PutChunk c;
  c.route = ToStoredKey(route, "route");
  c.key = ToStoredKey(key, "key");
  if (!parent.is_none()) c.parent = ToStoredKey(parent, "parent");
  c.payload = BufferBytes(payload, "payload");
  c.pin = pin;
  return c;
}

nb::object StatsValue(const std::string& json) { return nb::str(json.data(), json.size()); }

}  // namespace

void BindClient(nb::module_& m) {
  nb::class_<ClientTlsOptions>(m, "TlsOptions", "TLS to servers whose protocol port speaks TLS.")
      .def("__init__",
           [](ClientTlsOptions* self, bool enabled, const std::string& ca_file, bool verify_peer,
              const std::string& server_name) {
             new (self) ClientTlsOptions{enabled, ca_file, verify_peer, server_name};
           },
           nb::arg("enabled") = true, nb::arg("ca_file") = "", nb::arg("verify_peer") = true,
           nb::arg("server_name") = "")
      .def_rw("enabled", &ClientTlsOptions::enabled)
      .def_rw("ca_file", &ClientTlsOptions::ca_file)
      .def_rw("verify_peer", &ClientTlsOptions::verify_peer)
      .def_rw("server_name", &ClientTlsOptions::server_name);

  nb::class_<LookupResult>(m, "LookupResult", "Longest stored run of a chain.")
      .def_ro("matched_chunks", &LookupResult::matched_chunks, "chain[0:matched_chunks] are stored")
      .def_ro("matched_tokens", &LookupResult::matched_tokens, "tokens those chunks cover")
      .def("__repr__", [](const LookupResult& r) {
        return "LookupResult(matched_chunks=" + std::to_string(r.matched_chunks) +
               ", matched_tokens=" + std::to_string(r.matched_tokens) + ")";
      });

  nb::class_<PutChunk>(m, "PutChunk", "One chunk to store: route (chain's first stored key), key, "
                                      "parent (previous chunk's key or None) and payload.")
      .def("__init__",
           [](PutChunk* self, nb::handle route, nb::handle key, nb::handle parent,
              nb::handle payload, bool pin) {
             new (self) PutChunk(MakePutChunk(route, key, parent, payload, pin));
           },
           nb::arg("route"), nb::arg("key"), nb::arg("parent").none(), nb::arg("payload"),
           nb::arg("pin") = false)
      .def_prop_ro("route", [](const PutChunk& c) { return ToBytes(c.route); })
      .def_prop_ro("key", [](const PutChunk& c) { return ToBytes(c.key); })
      .def_prop_ro("parent", [](const PutChunk& c) -> nb::object {
        if (!c.parent) return nb::none();
        return ToBytes(*c.parent);
      })
      .def_prop_ro("payload", [](const PutChunk& c) { return ToBytes(c.payload); },
                   "The whole chunk payload (bytes, a copy).")
      .def_prop_ro("payload_size", [](const PutChunk& c) { return c.payload.size(); })
      .def_rw("pin", &PutChunk::pin)
      .def("__repr__", [](const PutChunk& c) {
        return "PutChunk(key=" + ToHex(c.key) + ", payload_size=" + std::to_string(c.payload.size()) + ")";
      });

  nb::class_<PyClient>(m, "Client", "Native client; use kvstash.Client.")
      .def("__init__",
           [](PyClient* self, std::vector<std::string> servers, std::string tenant,
              std::string credential, std::optional<ClientTlsOptions> tls, int64_t deadline_ms,
              std::string client_name, uint32_t connections_per_server, uint32_t max_attempts,
              int64_t initial_backoff_ms, int64_t max_backoff_ms, uint32_t max_reply_bytes,
              int64_t connect_timeout_ms, bool request_memory, int64_t down_server_skip_ms,
              int64_t unacked_timeout_ms) {
             ClientOptions o;
             o.servers = std::move(servers);
             o.tenant = std::move(tenant);
             o.credential = std::move(credential);
             if (tls) o.tls = *tls;
             if (deadline_ms <= 0 || connect_timeout_ms <= 0 || initial_backoff_ms < 0 ||
                 max_backoff_ms < 0 || down_server_skip_ms < 0 || unacked_timeout_ms < 0) {
               ThrowInvalid("deadline_ms and connect_timeout_ms must be positive; backoffs, "
                            "down_server_skip_ms and unacked_timeout_ms >= 0");
             }
             o.default_deadline = std::chrono::milliseconds(deadline_ms);
             o.client_name = std::move(client_name);
             o.connections_per_server = connections_per_server;
             o.max_attempts = max_attempts;
             o.initial_backoff = std::chrono::milliseconds(initial_backoff_ms);
             o.max_backoff = std::chrono::milliseconds(max_backoff_ms);
             o.max_reply_bytes = max_reply_bytes;
             o.connect_timeout = std::chrono::milliseconds(connect_timeout_ms);
             o.request_memory = request_memory;
             o.down_server_skip = std::chrono::milliseconds(down_server_skip_ms);
             o.unacked_timeout = std::chrono::milliseconds(unacked_timeout_ms);
             Result<std::unique_ptr<Client>> c = Status::Internal("unset");
             {
               nb::gil_scoped_release release;
               c = Client::Create(std::move(o));
             }
             new (self) PyClient(ValueOrThrow(std::move(c)));
           },
           nb::arg("servers"), nb::arg("tenant"), nb::arg("credential"), nb::arg("tls").none(),
           nb::arg("deadline_ms"), nb::arg("client_name"), nb::arg("connections_per_server"),
           nb::arg("max_attempts"), nb::arg("initial_backoff_ms"), nb::arg("max_backoff_ms"),
           nb::arg("max_reply_bytes"), nb::arg("connect_timeout_ms"), nb::arg("request_memory"),
           nb::arg("down_server_skip_ms"), nb::arg("unacked_timeout_ms"))
      .def("close", &PyClient::Close)
      .def_prop_ro("closed", &PyClient::closed)
      .def("server_for", [](PyClient& c, nb::handle route) {
        const StoredKey r = ToStoredKey(route, "route");
        return c.Run([&](Client& cl) { return cl.ServerFor(r); });
      })
      // ---------------------------------------------------------------- sync
      .def("lookup",
           [](PyClient& c, const std::vector<ChunkKey>& chain, bool require_state,
              std::optional<int64_t> deadline_ms) {
             const auto refs = ToChain(chain);
             const CallOptions call = Call(deadline_ms);
             return ValueOrThrow(c.Run([&](Client& cl) { return cl.Lookup(refs, require_state, call); }));
           },
           nb::arg("chain"), nb::arg("require_state") = false, nb::arg("deadline_ms").none() = nb::none())
      .def("put",
           [](PyClient& c, nb::handle route, nb::handle key, nb::handle parent, nb::handle payload,
              bool pin, std::optional<int64_t> deadline_ms) {
             const PutChunk chunk = MakePutChunk(route, key, parent, payload, pin);
             const CallOptions call = Call(deadline_ms);
             auto r = c.Run([&](Client& cl) { return cl.PutWithResult(chunk, call); });
             return ValueOrThrow(std::move(r)).stored_bytes;
           },
           nb::arg("route"), nb::arg("key"), nb::arg("parent").none(), nb::arg("payload"),
           nb::arg("pin") = false, nb::arg("deadline_ms").none() = nb::none())
      .def("put_chunks",
           [](PyClient& c, nb::sequence seq, std::optional<int64_t> deadline_ms) {
             std::vector<const PutChunk*> chunks;
             for (nb::handle h : seq) {
               if (!nb::isinstance<PutChunk>(h)) ThrowInvalid("put_chunks: every item must be a PutChunk");
               chunks.push_back(nb::inst_ptr<PutChunk>(h));
             }
             const CallOptions call = Call(deadline_ms);
             ThrowIfError(c.Run([&](Client& cl) {
               for (const PutChunk* p : chunks) {
                 Status s = cl.Put(*p, call);
                 if (!s.ok()) return s;
               }
               return Status::Ok();
             }));
           },
           nb::arg("chunks"), nb::arg("deadline_ms").none() = nb::none())
      .def("get",
           [](PyClient& c, nb::handle route, nb::handle key, std::optional<int64_t> deadline_ms) {
             const StoredKey r = ToStoredKey(route, "route"), k = ToStoredKey(key, "key");
             const CallOptions call = Call(deadline_ms);
             auto g = ValueOrThrow(c.Run([&](Client& cl) { return cl.Get(r, k, {}, call); }));
             return ToBytes(g.payload);
           },
           nb::arg("route"), nb::arg("key"), nb::arg("deadline_ms").none() = nb::none())
      .def("get_array",
           [](PyClient& c, nb::handle route, nb::handle key, std::optional<int64_t> deadline_ms) {
             const StoredKey r = ToStoredKey(route, "route"), k = ToStoredKey(key, "key");
             const CallOptions call = Call(deadline_ms);
             auto g = ValueOrThrow(c.Run([&](Client& cl) { return cl.Get(r, k, {}, call); }));
             return BytesToArray(std::move(g.payload));
           },
           nb::arg("route"), nb::arg("key"), nb::arg("deadline_ms").none() = nb::none())
      .def("delete",
           [](PyClient& c, nb::handle route, nb::handle key, std::optional<int64_t> deadline_ms) {
             const StoredKey r = ToStoredKey(route, "route"), k = ToStoredKey(key, "key");
             const CallOptions call = Call(deadline_ms);
             return ValueOrThrow(c.Run([&](Client& cl) { return cl.Delete(r, k, call); }));
           },
           nb::arg("route"), nb::arg("key"), nb::arg("deadline_ms").none() = nb::none())
      .def("pin",
           [](PyClient& c, nb::handle route, nb::handle key, bool pinned, std::optional<int64_t> deadline_ms) {
             const StoredKey r = ToStoredKey(route, "route"), k = ToStoredKey(key, "key");
             const CallOptions call = Call(deadline_ms);
             ThrowIfError(c.Run([&](Client& cl) { return cl.Pin(r, k, pinned, call); }));
           },
           nb::arg("route"), nb::arg("key"), nb::arg("pinned") = true,
           nb::arg("deadline_ms").none() = nb::none())
      .def("stats",
           [](PyClient& c, size_t server_index, std::optional<int64_t> deadline_ms) {
             const CallOptions call = Call(deadline_ms);
             auto s = ValueOrThrow(c.Run([&](Client& cl) { return cl.Stats(server_index, call); }));
             return StatsValue(s);
           },
           nb::arg("server_index") = 0, nb::arg("deadline_ms").none() = nb::none())
      // ---------------------------------------------------------------- callback forms
      .def("lookup_cb",
           [](PyClient& c, const std::vector<ChunkKey>& chain, bool require_state,
              std::optional<int64_t> deadline_ms, nb::object done) {
             auto refs = ToChain(chain);
             const CallOptions call = Call(deadline_ms);
             PyFn fn = HoldFn(std::move(done));
             c.Run([&](Client& cl) {
               cl.LookupAsync(std::move(refs), require_state, [fn](Result<LookupResult> r) {
                 Deliver(fn, r.status(), [&] { return nb::cast(*r, nb::rv_policy::copy); });
               }, call);
               return 0;
             });
           },
           nb::arg("chain"), nb::arg("require_state"), nb::arg("deadline_ms").none(), nb::arg("done"))
      .def("put_cb",
           [](PyClient& c, nb::handle route, nb::handle key, nb::handle parent, nb::handle payload,
              bool pin, std::optional<int64_t> deadline_ms, nb::object done) {
             PutChunk chunk = MakePutChunk(route, key, parent, payload, pin);
             const CallOptions call = Call(deadline_ms);
             PyFn fn = HoldFn(std::move(done));
             c.Run([&](Client& cl) {
               cl.PutWithResultAsync(std::move(chunk), [fn](Result<PutResult> r) {
                 Deliver(fn, r.status(), [&] { return nb::cast(r->stored_bytes); });
               }, call);
               return 0;
             });
           },
           nb::arg("route"), nb::arg("key"), nb::arg("parent").none(), nb::arg("payload"),
           nb::arg("pin"), nb::arg("deadline_ms").none(), nb::arg("done"))
      .def("get_cb",
           [](PyClient& c, nb::handle route, nb::handle key, std::optional<int64_t> deadline_ms,
              nb::object done) {
             const StoredKey r = ToStoredKey(route, "route"), k = ToStoredKey(key, "key");
             const CallOptions call = Call(deadline_ms);
             PyFn fn = HoldFn(std::move(done));
             c.Run([&](Client& cl) {
               cl.GetAsync(r, k, {}, [fn](Result<GetResult> g) {
                 Deliver(fn, g.status(), [&] { return nb::object(ToBytes(g->payload)); });
               }, call);
               return 0;
             });
           },
           nb::arg("route"), nb::arg("key"), nb::arg("deadline_ms").none(), nb::arg("done"))
      .def("delete_cb",
           [](PyClient& c, nb::handle route, nb::handle key, std::optional<int64_t> deadline_ms,
              nb::object done) {
             const StoredKey r = ToStoredKey(route, "route"), k = ToStoredKey(key, "key");
             const CallOptions call = Call(deadline_ms);
             PyFn fn = HoldFn(std::move(done));
             c.Run([&](Client& cl) {
               cl.DeleteAsync(r, k, [fn](Result<bool> e) {
                 Deliver(fn, e.status(), [&] { return nb::cast(*e); });
               }, call);
               return 0;
             });
           },
           nb::arg("route"), nb::arg("key"), nb::arg("deadline_ms").none(), nb::arg("done"))
      .def("pin_cb",
           [](PyClient& c, nb::handle route, nb::handle key, bool pinned,
              std::optional<int64_t> deadline_ms, nb::object done) {
             const StoredKey r = ToStoredKey(route, "route"), k = ToStoredKey(key, "key");
             const CallOptions call = Call(deadline_ms);
             PyFn fn = HoldFn(std::move(done));
             c.Run([&](Client& cl) {
               cl.PinAsync(r, k, pinned, [fn](Status s) {
                 Deliver(fn, s, [] { return nb::none(); });
               }, call);
               return 0;
             });
           },
           nb::arg("route"), nb::arg("key"), nb::arg("pinned"), nb::arg("deadline_ms").none(),
           nb::arg("done"))
      .def("stats_cb",
           [](PyClient& c, size_t server_index, std::optional<int64_t> deadline_ms, nb::object done) {
             const CallOptions call = Call(deadline_ms);
             PyFn fn = HoldFn(std::move(done));
             c.Run([&](Client& cl) {
               cl.StatsAsync(server_index, [fn](Result<std::string> s) {
                 Deliver(fn, s.status(), [&] { return StatsValue(*s); });
               }, call);
               return 0;
             });
           },
           nb::arg("server_index"), nb::arg("deadline_ms").none(), nb::arg("done"));
}

}  // namespace kvstash::py
