#include "common/kv_chunk_slice.h"

#include <cstring>
#include <string>

#include "kvstash/dtype.h"

namespace kvstash {

Result<KvChunk> SliceTokens(const KvChunk& chunk, uint32_t begin, uint32_t count) {
  KVSTASH_RETURN_IF_ERROR(chunk.Validate());
  if (count == 0 || begin > chunk.tokens || count > chunk.tokens - begin) {
    return Status::InvalidArgument("token range [" + std::to_string(begin) + ", " +
                                   std::to_string(uint64_t{begin} + count) + ") outside a " +
                                   std::to_string(chunk.tokens) + "-token chunk");
  }
  KvChunk out;
  out.layout = chunk.layout;
  out.tokens = count;
  out.data.resize(chunk.layout.DataBytes(count));
  out.scales = chunk.scales;
  const uint64_t tok_bytes = chunk.layout.ScalarsPerTensor(1) * DTypeSize(chunk.layout.dtype);
  const KvChunkView in = chunk.view();
  for (uint32_t l = 0; l < chunk.layout.n_layers; ++l) {
    std::memcpy(out.MutableK(l).data(), in.K(l).data() + begin * tok_bytes, count * tok_bytes);
    std::memcpy(out.MutableV(l).data(), in.V(l).data() + begin * tok_bytes, count * tok_bytes);
  }
  return out;
}

}  // namespace kvstash
