// Status -> Python exception, and the byte/token conversions of native.h.
#include <nanobind/stl/string.h>

#include <cstring>

#include "native.h"

namespace kvstash::py {
namespace {

// The factory registered by kvstash/__init__.py (a strong reference for the process
// lifetime; never released, so no decref can run after interpreter teardown).
PyObject* g_error_factory = nullptr;

}  // namespace

nb::object MakeError(const Status& s) {
  const std::string code(CodeName(s.code()));
  if (g_error_factory != nullptr) {
    return nb::borrow(g_error_factory)(code, s.message());
  }
  return nb::borrow(PyExc_RuntimeError)(code + ": " + s.message());
}

void ThrowStatus(const Status& s) {
  nb::object exc = MakeError(s);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw nb::python_error();
}

std::vector<uint8_t> BufferBytes(nb::handle obj, const char* what) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
    PyErr_Clear();
    ThrowInvalid(std::string(what) + ": expected a contiguous bytes-like object, got " +
                 nb::type_name(obj.type()).c_str());
  }
  std::vector<uint8_t> out(static_cast<size_t>(view.len));
  if (view.len > 0) std::memcpy(out.data(), view.buf, out.size());
  PyBuffer_Release(&view);
  return out;
}

namespace {
template <size_t N>
std::array<uint8_t, N> FixedBytes(nb::handle obj, const char* what) {
  std::vector<uint8_t> b = BufferBytes(obj, what);
  if (b.size() != N) {
    ThrowInvalid(std::string(what) + ": expected " + std::to_string(N) + " bytes, got " +
                 std::to_string(b.size()));
  }
  std::array<uint8_t, N> out{};
  std::memcpy(out.data(), b.data(), N);
  return out;
}
}  // namespace

StoredKey ToStoredKey(nb::handle obj, const char* what) { return FixedBytes<16>(obj, what); }
Digest256 ToDigest(nb::handle obj, const char* what) { return FixedBytes<32>(obj, what); }

nb::bytes ToBytes(const uint8_t* data, size_t n) {
  return nb::bytes(reinterpret_cast<const char*>(data), n);
}

namespace {
template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
}  // namespace

std::vector<uint32_t> ToTokens(nb::handle obj) {
  // Fast path: a buffer of integers (NumPy array, array.array), any int width.
  Py_buffer view;
  if (!PyBytes_Check(obj.ptr()) && !PyByteArray_Check(obj.ptr()) &&
      PyObject_GetBuffer(obj.ptr(), &view, PyBUF_FORMAT | PyBUF_ND | PyBUF_C_CONTIGUOUS) == 0) {
    std::vector<uint32_t> out;
    const std::string fmt = view.format ? view.format : "B";
    const char f = fmt.empty() ? 'B' : fmt.back();
    const bool is_int = std::strchr("bBhHiIlLqQ", f) != nullptr && fmt.size() <= 2;
    const bool signed_int = std::strchr("bhilq", f) != nullptr;
    const Py_ssize_t n = view.itemsize > 0 ? view.len / view.itemsize : 0;
    if (!is_int || view.ndim != 1) {
      PyBuffer_Release(&view);
      ThrowInvalid("tokens: expected a 1-D integer array, got format '" + fmt + "'");
    }
    out.reserve(static_cast<size_t>(n));
    bool bad = false;
    for (Py_ssize_t i = 0; i < n && !bad; ++i) {
      const char* p = static_cast<const char*>(view.buf) + i * view.itemsize;
      int64_t v = 0;
      switch (view.itemsize) {
        case 1: v = signed_int ? int64_t{Load<int8_t>(p)} : int64_t{Load<uint8_t>(p)}; break;
        case 2: v = signed_int ? int64_t{Load<int16_t>(p)} : int64_t{Load<uint16_t>(p)}; break;
        case 4: v = signed_int ? int64_t{Load<int32_t>(p)} : int64_t{Load<uint32_t>(p)}; break;
        case 8: {
          const uint64_t u = Load<uint64_t>(p);
          v = (signed_int || u <= 0xFFFFFFFFull) ? static_cast<int64_t>(u) : -1;
          break;
        }
        default: bad = true;
      }
      if (v < 0 || v > 0xFFFFFFFFll) bad = true;
      const uint64_t u = static_cast<uint64_t>(v);
      out.push_back(static_cast<uint32_t>(u));
    }
    PyBuffer_Release(&view);
    if (bad) ThrowInvalid("tokens: every token id must be in [0, 2^32)");
    return out;
  }
  PyErr_Clear();
  if (!PySequence_Check(obj.ptr())) {
    ThrowInvalid(std::string("tokens: expected a sequence of ints, got ") +
                 nb::type_name(obj.type()).c_str());
  }
  std::vector<uint32_t> out;
  nb::sequence seq = nb::borrow<nb::sequence>(obj);
  out.reserve(nb::len(seq));
  for (nb::handle item : seq) {
    // Python ints and integer scalars (NumPy's, torch's: anything with __index__), not
    // bools and not floats.
    if (PyBool_Check(item.ptr()) || !PyIndex_Check(item.ptr())) {
      ThrowInvalid(std::string("tokens: every token id must be an integer, got ") +
                   nb::type_name(item.type()).c_str());
    }
    nb::object index = nb::steal(PyNumber_Index(item.ptr()));
    if (!index.is_valid()) {
      PyErr_Clear();
      ThrowInvalid("tokens: every token id must be an integer");
    }
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (overflow != 0 || v < 0 || v > 0xFFFFFFFFll) {
      ThrowInvalid("tokens: every token id must be in [0, 2^32)");
    }
    out.push_back(static_cast<uint32_t>(v));
  }
  return out;
}

std::vector<std::vector<std::string>> ToExtraKeys(nb::handle obj) {
  std::vector<std::vector<std::string>> out;
  if (obj.is_none()) return out;
  if (!PySequence_Check(obj.ptr())) ThrowInvalid("extra_keys: expected a list of lists of bytes");
  for (nb::handle chunk : nb::borrow<nb::sequence>(obj)) {
    if (!PySequence_Check(chunk.ptr()) || PyBytes_Check(chunk.ptr()) || PyUnicode_Check(chunk.ptr())) {
      ThrowInvalid("extra_keys: each chunk's entry must be a list of bytes");
    }
    std::vector<std::string> keys;
    for (nb::handle k : nb::borrow<nb::sequence>(chunk)) {
      if (PyUnicode_Check(k.ptr())) {
        keys.push_back(nb::cast<std::string>(k));
      } else {
        std::vector<uint8_t> b = BufferBytes(k, "extra key");
        keys.emplace_back(b.begin(), b.end());
      }
    }
    out.push_back(std::move(keys));
  }
  return out;
}

void BindErrors(nb::module_& m) {
  m.def(
      "_set_error_factory",
      [](nb::object fn) {
        PyObject* old = g_error_factory;
        g_error_factory = fn.release().ptr();
        Py_XDECREF(old);
      },
      nb::arg("factory"),
      "Registers fn(code_name: str, message: str) -> KvstashError (kvstash/__init__.py does).");
  m.def(
      "_raise_status",
      [](const std::string& code, const std::string& message) {
        for (uint8_t c = 1; c <= static_cast<uint8_t>(Status::Code::kInternal); ++c) {
          if (CodeName(static_cast<Status::Code>(c)) == code) ThrowStatus(Status::FromCode(c, message));
        }
        ThrowInvalid("unknown status code '" + code + "'");
      },
      nb::arg("code"), nb::arg("message"),
      "Raises the exception of a native Status code (tests of the error mapping).");
}

}  // namespace kvstash::py
