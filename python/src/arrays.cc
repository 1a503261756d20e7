// KvChunk -> NumPy array without a copy, and whole-file reads (native.h).
#include <nanobind/ndarray.h>


#include "native.h"

namespace kvstash::py {

nb::object KvChunkToArray(KvChunk chunk) {
  const KvLayout L = chunk.layout;
  nb::dlpack::dtype dt;
  switch (L.dtype) {
    case DType::kBF16: dt = nb::dtype<uint16_t>(); break;
    case DType::kF16: dt = {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1}; break;
    case DType::kF32: dt = nb::dtype<float>(); break;
    default: dt = nb::dtype<uint8_t>(); break;
  }
  auto* owned = new std::vector<uint8_t>(std::move(chunk.data));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<uint8_t>*>(p); });
  const size_t shape[5] = {L.n_layers, 2, chunk.tokens, L.n_kv_heads, L.head_dim};
  nb::ndarray<nb::numpy> arr(owned->data(), 5, shape, owner, nullptr, dt);
  return nb::cast(arr, nb::rv_policy::reference);
}

}  // namespace kvstash::py
