// Bytes and KV chunks across the binding without copies (native.h): KvChunk -> NumPy
// array, received payloads -> read-only arrays, payload buffers read in place
// (BufferViews) and chunk arrays viewing them.
#include <nanobind/ndarray.h>

#include "native.h"

namespace kvstash::py {
namespace {

nb::dlpack::dtype ChunkDType(DType t) {
  switch (t) {
    case DType::kBF16: return nb::dtype<uint16_t>();
    case DType::kF16: return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case DType::kF32: return nb::dtype<float>();
    default: return nb::dtype<uint8_t>();
  }
}

}  // namespace

nb::object KvChunkToArray(KvChunk chunk) {
  const KvLayout L = chunk.layout;
  auto* owned = new std::vector<uint8_t>(std::move(chunk.data));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<uint8_t>*>(p); });
  const size_t shape[5] = {L.n_layers, 2, chunk.tokens, L.n_kv_heads, L.head_dim};
  nb::ndarray<nb::numpy> arr(owned->data(), 5, shape, owner, nullptr, ChunkDType(L.dtype));
  return nb::cast(arr, nb::rv_policy::reference);
}

nb::object KvChunkViewToArray(const KvChunkView& chunk, nb::handle owner) {
  const KvLayout L = chunk.layout;
  const size_t shape[5] = {L.n_layers, 2, chunk.tokens, L.n_kv_heads, L.head_dim};
  nb::ndarray<nb::numpy, nb::ro> arr(chunk.data.data(), 5, shape, owner, nullptr, ChunkDType(L.dtype));
  return nb::cast(arr, nb::rv_policy::reference);
}

nb::object BytesToArray(std::vector<uint8_t> bytes) {
  auto* owned = new std::vector<uint8_t>(std::move(bytes));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<uint8_t>*>(p); });
  const size_t shape[1] = {owned->size()};
  nb::ndarray<nb::numpy, nb::ro, const uint8_t, nb::ndim<1>> arr(owned->data(), 1, shape, owner);
  return nb::cast(arr, nb::rv_policy::reference);
}

BufferViews::BufferViews(nb::handle seq, const char* what) {
  if (!PySequence_Check(seq.ptr())) ThrowInvalid(std::string(what) + ": expected a list of bytes-like objects");
  for (nb::handle h : nb::borrow<nb::sequence>(seq)) items_.push_back(nb::borrow(h));
  views_.reserve(items_.size());
  for (const nb::object& o : items_) {
    Py_buffer v;
    if (PyObject_GetBuffer(o.ptr(), &v, PyBUF_C_CONTIGUOUS) != 0) {
      PyErr_Clear();
      for (Py_buffer& taken : views_) PyBuffer_Release(&taken);  // no destructor after a throw
      ThrowInvalid(std::string(what) + "[" + std::to_string(views_.size()) +
                   "]: expected a contiguous bytes-like object, got " + nb::type_name(o.type()).c_str());
    }
    views_.push_back(v);
    spans_.emplace_back(static_cast<const uint8_t*>(v.buf), static_cast<size_t>(v.len));
  }
}

BufferViews::~BufferViews() {
  for (Py_buffer& v : views_) PyBuffer_Release(&v);
}

nb::capsule BufferViews::Pin(size_t i) const {
  auto* v = new Py_buffer;
  if (PyObject_GetBuffer(items_[i].ptr(), v, PyBUF_C_CONTIGUOUS) != 0) {
    delete v;
    throw nb::python_error();
  }
  return nb::capsule(v, [](void* p) noexcept {
    auto* b = static_cast<Py_buffer*>(p);
    PyBuffer_Release(b);
    delete b;
  });
}

}  // namespace kvstash::py
