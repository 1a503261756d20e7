// Shared helpers of the kvstash._native module (python/src/*.cc).
//
// Errors: every non-ok Status a binding meets becomes an instance of the Python class
// of its code (python/kvstash/_errors.py), made by the factory kvstash/__init__.py
// registers with _native._set_error_factory(fn(code_name, message) -> exception);
// until one is registered, RuntimeError("<Code>: <message>").
//
// Byte/key conversion: keys cross as Python bytes (StoredKey 16 bytes, Digest256 32
// bytes); a wrong length is InvalidArgumentError. Token lists are any sequence of
// ints or a 1-D integer NumPy array, each in [0, 2^32).
//
// Thread-safety: ThrowStatus/MakeError REQUIRE the GIL; the conversions too.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvstash/kv_chunk.h"
#include "kvstash/prefix_key.h"
#include "kvstash/result.h"
#include "kvstash/status.h"

namespace kvstash::py {

namespace nb = nanobind;

// The Python exception instance for `s` (REQUIRES: !s.ok()).
nb::object MakeError(const Status& s);
// Raises MakeError(s) as a Python exception (throws nb::python_error).
[[noreturn]] void ThrowStatus(const Status& s);
inline void ThrowIfError(const Status& s) {
  if (!s.ok()) ThrowStatus(s);
}
template <typename T>
T ValueOrThrow(Result<T>&& r) {
  if (!r.ok()) ThrowStatus(r.status());
  return std::move(r).value();
}
[[noreturn]] inline void ThrowInvalid(const std::string& msg) {
  ThrowStatus(Status::InvalidArgument(msg));
}

// Bytes of any buffer-protocol object (bytes, bytearray, memoryview, C-contiguous
// array), copied. InvalidArgumentError for an object without a contiguous buffer.
std::vector<uint8_t> BufferBytes(nb::handle obj, const char* what);
StoredKey ToStoredKey(nb::handle obj, const char* what);
Digest256 ToDigest(nb::handle obj, const char* what);
nb::bytes ToBytes(const uint8_t* data, size_t n);
template <typename A>
nb::bytes ToBytes(const A& a) {
  return ToBytes(a.data(), a.size());
}
// Token ids from a sequence of ints or a 1-D integer array.
std::vector<uint32_t> ToTokens(nb::handle obj);
// extra_keys: None or a list (one per chunk) of lists of bytes/str.
std::vector<std::vector<std::string>> ToExtraKeys(nb::handle obj);

// A canonical chunk as a NumPy array [n_layers, 2, tokens, n_kv_heads, head_dim] that
// owns the chunk's data (no copy): uint16 bit patterns for bf16, float16 for f16,
// float32 for f32, uint8 for fp8_e4m3 (its scales are dropped: not used here).
nb::object KvChunkToArray(KvChunk chunk);
// A read-only 1-D uint8 NumPy array that owns `bytes` (no copy): a received payload.
nb::object BytesToArray(std::vector<uint8_t> bytes);

// Borrowed, read-only, C-contiguous buffers of a sequence of bytes-like objects (bytes,
// read-only NumPy arrays, memoryview...), read in place. The exports are held until
// the object is destroyed, so a bytearray cannot be resized meanwhile; spans() stays
// valid that long. InvalidArgumentError (what[i]) for an item without such a buffer.
// Thread-safety: construct and destroy with the GIL; spans() may be read without it.
class BufferViews {
 public:
  BufferViews(nb::handle seq, const char* what);
  ~BufferViews();
  BufferViews(const BufferViews&) = delete;
  BufferViews& operator=(const BufferViews&) = delete;
  const std::vector<std::span<const uint8_t>>& spans() const { return spans_; }
  // A capsule that holds item i's export (so the object and its memory stay put) until
  // it is freed: the owner of an array viewing that memory.
  nb::capsule Pin(size_t i) const;

 private:
  std::vector<nb::object> items_;
  std::vector<Py_buffer> views_;
  std::vector<std::span<const uint8_t>> spans_;
};

// A read-only canonical chunk array (as KvChunkToArray's dtypes) viewing `chunk`'s data,
// which `owner` keeps alive.
nb::object KvChunkViewToArray(const KvChunkView& chunk, nb::handle owner);

void BindErrors(nb::module_& m);
void BindKeys(nb::module_& m);
void BindClient(nb::module_& m);
void BindCodec(nb::module_& m);
void BindReferenceModel(nb::module_& m);
void BindRestoreCost(nb::module_& m);
void BindPagedKv(nb::module_& m);
#if defined(KVSTASH_PYTHON_CUDA)
void BindCuda(nb::module_& m);  // cuda/cuda_module.cc, only with KVSTASH_PYTHON_CUDA
#endif

}  // namespace kvstash::py
