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
// One order has its own copy loops, used when src_of_pos is exactly it: vLLM's "amx"
// tile (block_size a multiple of 16, head_dim of 16), whose generic plan is all pairs
// and single values. K: per group of 16 tokens, head_dim / 2 rows of 16 32-bit (dim
// pair) values, one per token (a 16 x head_dim/2 transpose of 32-bit words); V: per 16
// dims, block_size / 2 rows of the 16 dims of two tokens interleaved (token t, t + 1).
// With AVX2 (CpuMayUseAvx2: the CPU and KVSTASH_CPU_PATH) these are 8 x 8 word transposes and 16-bit unpacks;
// scalar loops otherwise. The scatter takes them; the gather (saves) keeps the plan.
// Arrays are never converted (a float16 chunk, an int16 layer or an int32 src_of_pos
// is a TypeError: a converted copy would be written and thrown away, or values cast).
// Errors: InvalidArgumentError for shapes, strides, a block id out of range, blocks
// past the chunk's end or a src_of_pos that is not a permutation of [0, 2*B*D).
// Duplicated block ids are allowed (the last write wins).
// Thread-safety: the GIL is released while copying; callers must not write the same
// blocks from two threads (the connector's loads own disjoint blocks).
#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/cpu_path.h"
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
  bool amx = false;                // src_of_pos is vLLM's amx tile order (IsAmxOrder)
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

// True when order[p] (p < 2 * B * D) is vLLM's amx tile order (see the top of this file):
//   K, p < B*D:  g = p / (16 D), j = (p % (16 D)) / 32, q = p % 32:
//                token 16 g + q / 2, dim 2 j + q % 2;
//   V, p' = p - B*D: b = p' / (16 B), r = (p' % (16 B)) / 32, q = p' % 32:
//                token 2 r + q % 2, dim 16 b + q / 2.
bool IsAmxOrder(const int64_t* order, size_t B, size_t D) {
  if (B % 16 != 0 || D % 16 != 0) return false;
  for (size_t p = 0; p < B * D; ++p) {
    const size_t g = p / (16 * D), j = p % (16 * D) / 32, q = p % 32;
    if (order[p] != static_cast<int64_t>((16 * g + q / 2) * D + 2 * j + q % 2)) return false;
  }
  for (size_t p = 0; p < B * D; ++p) {
    const size_t b = p / (16 * B), r = p % (16 * B) / 32, q = p % 32;
    if (order[B * D + p] != static_cast<int64_t>(B * D + (2 * r + q % 2) * D + 16 * b + q / 2)) return false;
  }
  return true;
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
  p.amx = IsAmxOrder(order, p.B, p.D);
  SplitRuns(off, &p);  // the gather's loops, and the scatter's for any other order
  return p;
}

// The amx scatter of one (block, head) tile. s: the chunk at the block's first token of
// this head (token t's head_dim values at s + t * row, row = n_kv_heads * head_dim).
void ScatterAmxScalar(const Plan& p, uint16_t* tile, const uint16_t* s) {
  const size_t B = p.B, D = p.D, row = p.H * p.D, v0 = p.T * p.H * p.D;
  uint16_t* k = tile;
  for (size_t g = 0; g < B / 16; ++g) {
    for (size_t j = 0; j < D / 2; ++j, k += 32) {
      for (size_t i = 0; i < 16; ++i) std::memcpy(k + 2 * i, s + (16 * g + i) * row + 2 * j, 4);
    }
  }
  uint16_t* v = tile + B * D;
  for (size_t b = 0; b < D / 16; ++b) {
    for (size_t r = 0; r < B / 2; ++r, v += 32) {
      const uint16_t* a = s + v0 + 2 * r * row + 16 * b;
      for (size_t q = 0; q < 16; ++q) {
        v[2 * q] = a[q];
        v[2 * q + 1] = a[row + q];
      }
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void ScatterAmxAvx2(const Plan& p, uint16_t* tile, const uint16_t* s) {
  const size_t B = p.B, D = p.D, row = p.H * p.D, v0 = p.T * p.H * p.D;
  // K: for 8 tokens x 8 dim pairs, an 8 x 8 transpose of 32-bit words (rows: tokens).
  for (size_t g = 0; g < B / 16; ++g) {
    for (size_t h8 = 0; h8 < 2; ++h8) {  // tokens 16 g + 8 h8 .. + 7
      const uint16_t* src = s + (16 * g + 8 * h8) * row;
      for (size_t j0 = 0; j0 < D / 2; j0 += 8) {  // dim pairs j0 .. j0 + 7
        __m256i r[8];
        for (int i = 0; i < 8; ++i)
          r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * row + 2 * j0));
        const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
        const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
        const __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]);
        const __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]);
        const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
        const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
        const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
        const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
        // column c (dim pair j0 + c) of the 8 tokens: lanes of u[c % 4] paired with u[c % 4 + 4]
        const __m256i col[8] = {
            _mm256_permute2x128_si256(u0, u4, 0x20), _mm256_permute2x128_si256(u1, u5, 0x20),
            _mm256_permute2x128_si256(u2, u6, 0x20), _mm256_permute2x128_si256(u3, u7, 0x20),
            _mm256_permute2x128_si256(u0, u4, 0x31), _mm256_permute2x128_si256(u1, u5, 0x31),
            _mm256_permute2x128_si256(u2, u6, 0x31), _mm256_permute2x128_si256(u3, u7, 0x31)};
        uint16_t* k = tile + g * 16 * D + 16 * h8;  // row j holds 16 words at g * 16 D + 32 j
        for (int c = 0; c < 8; ++c)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(k + 32 * (j0 + c)), col[c]);
      }
    }
  }
  // V: the 16 dims of tokens 2 r and 2 r + 1, interleaved.
  uint16_t* v = tile + B * D;
  for (size_t b = 0; b < D / 16; ++b) {
    for (size_t r = 0; r < B / 2; ++r, v += 32) {
      const uint16_t* a = s + v0 + 2 * r * row + 16 * b;
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
      const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + row));
      const __m256i lo = _mm256_unpacklo_epi16(x, y), hi = _mm256_unpackhi_epi16(x, y);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(v), _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
  }
}
#endif

void ScatterAmx(const Plan& p, uint16_t* tile, const uint16_t* s) {
#if defined(__x86_64__)
  if (CpuMayUseAvx2()) return ScatterAmxAvx2(p, tile, s);
#endif
  ScatterAmxScalar(p, tile, s);
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
        if (p.amx) {
          ForEachTile(p, token_offset, block_ids,
                      [&](uint16_t* tile, size_t base) { ScatterAmx(p, tile, src + base); });
          return;
        }
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
      "paged_copy_loops",
      [](Order src_of_pos, size_t block_size, size_t head_dim) -> const char* {
        if (block_size > (size_t{1} << 20) || head_dim > (size_t{1} << 20) ||
            src_of_pos.shape(0) != 2 * block_size * head_dim) {
          ThrowInvalid("paged KV: src_of_pos must have 2 * block_size * head_dim entries");
        }
        return IsAmxOrder(src_of_pos.data(), block_size, head_dim) ? "amx" : "plan";
      },
      nb::arg("src_of_pos").noconvert(), nb::arg("block_size"), nb::arg("head_dim"),
      "Which copy loops paged_scatter takes for this tile order: 'amx' (vLLM's amx tile, its own "
      "loops) or 'plan' (runs, pairs and single values of any permutation).");
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
