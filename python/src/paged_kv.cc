// kvstash._native.paged_scatter / paged_gather: copies between canonical KV chunks and
// the (block, head) tiles of a paged CPU KV cache, for engines whose cache layout is a
// permutation inside each tile (the vLLM connector's CPU path, kvstash_vllm/layout.py).
//
//   canonical chunk: uint16 [n_layers, 2, T, n_kv_heads, head_dim] C-contiguous (the
//     16-bit patterns of bf16 or f16 values; kvstash.KvLayout's chunk layout).
//   cache layer: uint16 [num_blocks, n_kv_heads, block_size, 2 * head_dim], tiles dense
//     (strides of the last three dimensions 2*B*D, 2*D, 1; any block stride), e.g. a
//     NumPy view of a torch tensor (tensor.view(torch.int16).numpy().view(numpy.uint16)).
//   src_of_pos: int64 [2 * B * D]: the canonical index kv * B * D + t * D + d of the value
//     stored at flat tile position p (a permutation).
//
// Block j of block_ids holds chunk tokens [token_offset + j * B, token_offset + (j+1) * B).
// Each call precomputes the chunk offset of every tile position once and splits the tile
// into runs of at least 8 positions whose chunk values are equally spaced (a run of
// consecutive values, V of the vec kernels: head_dim values per token, is one memcpy; a
// strided one, K stored transposed: block_size values n_kv_heads * head_dim apart, one
// strided loop), pairs of adjacent values (the amx order's K: one 32-bit copy each) and
// single values (the amx order's V, pairs of tokens), copied through their offsets.
// Arrays are never converted (a float16 chunk, an int16 layer or an int32 src_of_pos
// is a TypeError: a converted copy would be written and thrown away, or values cast).
// Errors: InvalidArgumentError for shapes, strides, a block id out of range, blocks
// past the chunk's end or a src_of_pos that is not a permutation of [0, 2*B*D).
// Duplicated block ids are allowed (the last write wins).
// Thread-safety: the GIL is released while copying; callers must not write the same
// blocks from two threads (the connector's loads own disjoint blocks).
#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "native.h"

namespace kvstash::py {
namespace {

using Chunk = nb::ndarray<uint16_t, nb::ndim<5>, nb::c_contig, nb::device::cpu>;
using ConstChunk = nb::ndarray<const uint16_t, nb::ndim<5>, nb::c_contig, nb::device::cpu>;
using Layer = nb::ndarray<uint16_t, nb::ndim<4>, nb::device::cpu>;
using Order = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// Runs shorter than this are copied value by value through their offsets: a short run
// (the pairs of the amx tile order) costs more as a run than as single values.
constexpr size_t kMinRun = 8;

// Tile positions [pos, pos + len) hold chunk values off, off + stride, ... (offsets from
// the (block, head) base): a stretch of positions whose values are equally spaced.
struct Run {
  uint32_t pos;
  uint32_t len;
  int64_t off;
  int64_t stride;
};

struct Plan {
  size_t L = 0, T = 0, H = 0, D = 0, B = 0;
  std::vector<Run> runs;           // the tile's runs of at least kMinRun positions
  std::vector<uint32_t> pair_pos;  // positions p whose values p, p + 1 are adjacent ...
  std::vector<int64_t> pair_off;   // ... in the chunk at these offsets (the amx order's K)
  std::vector<uint32_t> pos;       // its other positions ...
  std::vector<int64_t> off;        // ... and the offsets of their values
  std::vector<uint16_t*> tiles;    // per layer: data pointer
  std::vector<int64_t> block_stride;  // per layer, elements
};

// Splits the tile (the offsets of its positions' values) into runs and single values.
void SplitRuns(const std::vector<int64_t>& off, Plan* p) {
  for (size_t a = 0; a < off.size();) {
    const int64_t stride = a + 1 < off.size() ? off[a + 1] - off[a] : 1;
    size_t b = a + 1;
    while (b < off.size() && off[b] - off[b - 1] == stride) ++b;
    if (b - a >= kMinRun) {
      p->runs.push_back({static_cast<uint32_t>(a), static_cast<uint32_t>(b - a), off[a], stride});
      a = b;
    } else if (a + 1 < off.size() && off[a + 1] == off[a] + 1) {  // two values, one 32-bit copy
      p->pair_pos.push_back(static_cast<uint32_t>(a));
      p->pair_off.push_back(off[a]);
      a += 2;
    } else {  // one single value; the next run may start at a + 1
      p->pos.push_back(static_cast<uint32_t>(a));
      p->off.push_back(off[a]);
      ++a;
    }
  }
}

template <typename ChunkT>
Plan MakePlan(const ChunkT& chunk, size_t token_offset, const std::vector<Layer>& layers,
              const std::vector<int64_t>& block_ids, const Order& src_of_pos) {
  Plan p;
  p.L = chunk.shape(0);
  p.T = chunk.shape(2);
  p.H = chunk.shape(3);
  p.D = chunk.shape(4);
  if (chunk.shape(1) != 2) ThrowInvalid("paged KV: the chunk must be [layers, 2, tokens, heads, head_dim]");
  if (layers.size() != p.L) {
    ThrowInvalid("paged KV: " + std::to_string(layers.size()) + " cache layers for a chunk of " +
                 std::to_string(p.L));
  }
  if (layers.empty()) ThrowInvalid("paged KV: no layers");
  p.B = layers[0].shape(2);
  const size_t n = 2 * p.B * p.D;
  if (src_of_pos.shape(0) != n) ThrowInvalid("paged KV: src_of_pos must have 2 * block_size * head_dim entries");
  if (token_offset > p.T || block_ids.size() > (p.T - token_offset) / std::max<size_t>(p.B, 1)) {
    ThrowInvalid("paged KV: blocks past the chunk's end (offset " + std::to_string(token_offset) + ", " +
                 std::to_string(block_ids.size()) + " blocks of " + std::to_string(p.B) + ", " +
                 std::to_string(p.T) + " tokens)");
  }
  for (const Layer& l : layers) {
    if (l.shape(1) != p.H || l.shape(2) != p.B || l.shape(3) != 2 * p.D) {
      ThrowInvalid("paged KV: a cache layer is not [blocks, " + std::to_string(p.H) + ", " + std::to_string(p.B) +
                   ", " + std::to_string(2 * p.D) + "]");
    }
    if (l.stride(3) != 1 || l.stride(2) != static_cast<int64_t>(2 * p.D) ||
        l.stride(1) != static_cast<int64_t>(n) || l.stride(0) < static_cast<int64_t>(p.H * n)) {
      ThrowInvalid("paged KV: a cache layer's tiles are not dense");
    }
    for (int64_t id : block_ids) {
      if (id < 0 || static_cast<size_t>(id) >= l.shape(0)) ThrowInvalid("paged KV: block id out of range");
    }
    p.tiles.push_back(l.data());
    p.block_stride.push_back(l.stride(0));
  }
  std::vector<uint8_t> seen(n, 0);
  std::vector<int64_t> off(n);
  const int64_t* order = src_of_pos.data();
  for (size_t pos = 0; pos < n; ++pos) {
    const int64_t s = order[pos];
    if (s < 0 || static_cast<size_t>(s) >= n || seen[s]) ThrowInvalid("paged KV: src_of_pos is not a permutation");
    seen[s] = 1;
    const size_t kv = s / (p.B * p.D), t = (s / p.D) % p.B, d = s % p.D;
    off[pos] = static_cast<int64_t>(kv * p.T * p.H * p.D + t * p.H * p.D + d);
  }
  SplitRuns(off, &p);
  return p;
}

// Calls fn(tile pointer, chunk base offset) for every (layer, block, head).
template <typename Fn>
void ForEachTile(const Plan& p, size_t token_offset, const std::vector<int64_t>& block_ids, Fn fn) {
  for (size_t l = 0; l < p.L; ++l) {
    for (size_t j = 0; j < block_ids.size(); ++j) {
      for (size_t h = 0; h < p.H; ++h) {
        uint16_t* tile = p.tiles[l] + block_ids[j] * p.block_stride[l] + h * 2 * p.B * p.D;
        const size_t base = l * 2 * p.T * p.H * p.D + (token_offset + j * p.B) * p.H * p.D + h * p.D;
        fn(tile, base);
      }
    }
  }
}

}  // namespace

void BindPagedKv(nb::module_& m) {
  m.def(
      "paged_scatter",
      [](ConstChunk chunk, size_t token_offset, std::vector<Layer> layers, std::vector<int64_t> block_ids,
         Order src_of_pos) {
        const Plan p = MakePlan(chunk, token_offset, layers, block_ids, src_of_pos);
        const uint16_t* src = chunk.data();
        nb::gil_scoped_release release;
        const size_t n = p.pos.size(), np = p.pair_pos.size();
        ForEachTile(p, token_offset, block_ids, [&](uint16_t* tile, size_t base) {
          const uint16_t* s = src + base;
          for (const Run& r : p.runs) {
            if (r.stride == 1) {
              std::memcpy(tile + r.pos, s + r.off, r.len * sizeof(uint16_t));
            } else {
              for (size_t i = 0; i < r.len; ++i) tile[r.pos + i] = s[r.off + i * r.stride];
            }
          }
          for (size_t i = 0; i < np; ++i) std::memcpy(tile + p.pair_pos[i], s + p.pair_off[i], 2 * sizeof(uint16_t));
          for (size_t i = 0; i < n; ++i) tile[p.pos[i]] = s[p.off[i]];
        });
      },
      nb::arg("chunk").noconvert(), nb::arg("token_offset"), nb::arg("layers").noconvert(), nb::arg("block_ids"),
      nb::arg("src_of_pos").noconvert(),
      "Writes chunk tokens [token_offset, token_offset + len(block_ids) * B) into blocks block_ids of every "
      "cache layer, in the tile order src_of_pos (python/src/paged_kv.cc).");
  m.def(
      "paged_gather",
      [](std::vector<Layer> layers, std::vector<int64_t> block_ids, Order src_of_pos, Chunk out) {
        const Plan p = MakePlan(out, 0, layers, block_ids, src_of_pos);
        if (block_ids.size() * p.B != p.T) ThrowInvalid("paged KV: out must hold exactly the blocks' tokens");
        uint16_t* dst = out.data();
        nb::gil_scoped_release release;
        const size_t n = p.pos.size(), np = p.pair_pos.size();
        ForEachTile(p, 0, block_ids, [&](uint16_t* tile, size_t base) {
          uint16_t* d = dst + base;
          for (const Run& r : p.runs) {
            if (r.stride == 1) {
              std::memcpy(d + r.off, tile + r.pos, r.len * sizeof(uint16_t));
            } else {
              for (size_t i = 0; i < r.len; ++i) d[r.off + i * r.stride] = tile[r.pos + i];
            }
          }
          for (size_t i = 0; i < np; ++i) std::memcpy(d + p.pair_off[i], tile + p.pair_pos[i], 2 * sizeof(uint16_t));
          for (size_t i = 0; i < n; ++i) d[p.off[i]] = tile[p.pos[i]];
        });
      },
      nb::arg("layers").noconvert(), nb::arg("block_ids"), nb::arg("src_of_pos").noconvert(),
      nb::arg("out").noconvert(),
      "Copies blocks block_ids of every cache layer into out [layers, 2, len(block_ids) * B, heads, head_dim] "
      "(canonical order).");
}

}  // namespace kvstash::py
