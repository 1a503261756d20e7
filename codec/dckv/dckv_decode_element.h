// The per-value bodies of the CUDA dckv decoder (gpu_kernels/dckv_decode.cuh, host API
// gpu_kernels/dckv_decode.h), written once for host and device (KVSTASH_HD inline) so
// that the CPU can run them as well: tests/codec/dckv/dckv_decode_element_test.cc runs every
// index on the host and compares with DckvCodec::Decode byte for byte (in CI, without
// a GPU); tests/gpu_kernels/dckv_decode_gpu_test.cc compares the kernels on a GPU.
//
// Each function computes the values of one index in the CPU contract's operation
// order: dckv_conditional.h PredictRows (bias first, inputs ascending, zero inputs
// skipped), c = mu + s * step, dckv_synthesis.h (mean first, components ascending,
// zero coefficients skipped), dckv_correction.h's decoder net (steps 1-4: the hidden
// layer from the coefficients, GELU of dckv_gelu.h, the output layer added to the
// synthesis; both layers are the synthesis order again, zero inputs skipped),
// dckv_rope.h RotatePair, kvstash/dtype_bits.h F32ToBf16.
// Every multiply, add and subtract is a single correctly rounded fp32 operation
// (numerics/det_math.h DMul/DAdd/DSub: __fmul_rn/__fadd_rn/__fsub_rn on the device,
// plain operators under the host's -ffp-contract=off), never fused, so host and device
// give the same bits. Indices are independent within one pass (odd rows read only even
// rows, decoded by the previous pass; the synthesis reads the hidden values of the net
// pass before it).
//
// Layouts: symbols and coefficients [rows, stride] (stride = active components of all
// groups, the group's part from `offset`), as in the payload's stream (token-major,
// then group, then component); `out` is the canonical chunk (kvstash/kv_chunk.h) as bf16
// values.
// Thread-safety: pure functions over caller memory.
#pragma once

#include <cstdint>

#include "codec/dckv/dckv_gelu.h"
#include "kvstash/dtype_bits.h"
#include "numerics/det_math.h"

namespace kvstash::dckv {

// The table index of symbol s = r * active + i of a chunk: even[i] on even coded rows
// r, odd[i] on odd ones (DckvCodec's symbol tables).
KVSTASH_HD inline uint16_t DckvSymbolTable(const uint16_t* even, const uint16_t* odd, uint64_t active,
                                           uint64_t s) {
  const uint64_t r = s / active;
  return (r % 2 == 0 ? even : odd)[s - r * active];
}

// One pass (one parity) of one group: coefficients of coded rows parity, parity + 2, ...
struct DckvPassParams {
  const float* map = nullptr;        // [k + rank + 1, n_active], last row the bias
  uint32_t k = 0;                    // neighbour inputs (0: the token map)
  uint32_t rank = 0;                 // token embedding inputs
  uint32_t n_active = 0;
  uint32_t parity = 0;
  uint32_t rows = 0;                 // coded rows of the chunk (>= 1)
  uint64_t stride = 0;               // symbols per coded row (all groups)
  uint64_t offset = 0;               // the group's first component in a row
  const float* step = nullptr;       // [n_active]
  const uint16_t* embed = nullptr;   // [vocab, rank] bf16 reduced embeddings
  const uint32_t* token_ids = nullptr;  // [rows], or null: z = 0
  const uint16_t* symbols = nullptr; // [rows, stride] two's complement
  float* coef = nullptr;             // [rows, stride]
};

// Indices of a pass: (rows of this parity) * n_active.
KVSTASH_HD inline uint64_t DckvPassCount(const DckvPassParams& p) {
  return static_cast<uint64_t>((p.rows - p.parity + 1) / 2) * p.n_active;
}

// mu + v * m (product rounded, then the sum), or mu when v is 0 (PredictRows).
KVSTASH_HD inline float DckvAccumulate(float mu, float v, float m) {
  return v != 0.0f ? spec::DAdd(mu, spec::DMul(v, m)) : mu;
}

// Index t < DckvPassCount(p): component i = t % n_active of coded row
// r = parity + 2 (t / n_active). Pass 2 with a context map reads n = the mean of rows
// r - 1 and r + 1 (just r - 1 when r + 1 is not coded), first k components.
KVSTASH_HD inline void DckvPassElement(const DckvPassParams& p, uint64_t t) {
  const uint32_t na = p.n_active;
  const uint32_t i = static_cast<uint32_t>(t % na);
  const uint64_t r = p.parity + 2 * (t / na);
  float mu = p.map[static_cast<uint64_t>(p.k + p.rank) * na + i];
  if (p.k > 0) {
    const float* prev = p.coef + (r - 1) * p.stride + p.offset;
    const float* next = r + 1 < p.rows ? prev + 2 * p.stride : nullptr;
    for (uint32_t j = 0; j < p.k; ++j) {
      const float v = next == nullptr ? prev[j] : spec::DMul(0.5f, spec::DAdd(prev[j], next[j]));
      mu = DckvAccumulate(mu, v, p.map[static_cast<uint64_t>(j) * na + i]);
    }
  }
  if (p.token_ids != nullptr) {
    const uint16_t* z = p.embed + static_cast<uint64_t>(p.token_ids[r]) * p.rank;
    for (uint32_t j = 0; j < p.rank; ++j) {
      mu = DckvAccumulate(mu, Bf16ToF32(z[j]), p.map[static_cast<uint64_t>(p.k + j) * na + i]);
    }
  }
  const uint64_t at = r * p.stride + p.offset + i;
  const float s = static_cast<float>(static_cast<int16_t>(p.symbols[at]));
  p.coef[at] = spec::DAdd(mu, spec::DMul(s, p.step[i]));
}

// The hidden layer of one group's decoder correction net (dckv_correction.h steps 1
// and 2) for every coded row: hidden[r][k] = Gelu(b1[k] + sum_i c_i w1[k][i]), bias
// first, components ascending, zero coefficients skipped.
struct DckvNetHiddenParams {
  const float* w1 = nullptr;  // [hidden, n_active] (nn.Linear order)
  const float* b1 = nullptr;  // [hidden]
  uint32_t hidden = 0, n_active = 0;
  uint32_t rows = 0;                // coded rows
  uint64_t stride = 0, offset = 0;  // as DckvPassParams
  const float* coef = nullptr;      // [rows, stride]
  float* out = nullptr;             // [rows, hidden]
};

// Indices: rows * hidden.
KVSTASH_HD inline uint64_t DckvNetHiddenCount(const DckvNetHiddenParams& p) {
  return static_cast<uint64_t>(p.rows) * p.hidden;
}

// Index t < DckvNetHiddenCount(p): unit k = t % hidden of coded row r = t / hidden.
KVSTASH_HD inline void DckvNetHiddenElement(const DckvNetHiddenParams& p, uint64_t t) {
  const uint64_t r = t / p.hidden;
  const uint32_t k = static_cast<uint32_t>(t % p.hidden);
  const float* c = p.coef + r * p.stride + p.offset;
  const float* w = p.w1 + static_cast<uint64_t>(k) * p.n_active;
  float a = p.b1[k];
  for (uint32_t i = 0; i < p.n_active; ++i) a = DckvAccumulate(a, c[i], w[i]);
  p.out[t] = Gelu(a);
}

// Synthesis, RoPE and bf16 rounding of one group's coded rows.
struct DckvSynthesisParams {
  const float* mean = nullptr;   // [dims]
  const float* basis = nullptr;  // [n_active, dims] decoder rows
  uint32_t n_active = 0, dims = 0;
  uint32_t first_layer = 0;
  uint32_t n_kv_heads = 0, head_dim = 0;
  uint32_t rows = 0;             // coded rows
  uint32_t first_row = 0;        // the chunk row of coded row 0 (= raw head rows)
  uint32_t tokens = 0;           // rows of the chunk
  uint64_t stride = 0, offset = 0;  // as DckvPassParams
  const float* coef = nullptr;   // [rows, stride]
  const float* rope_cos = nullptr;  // [rows, head_dim / 2]: dckv::RopeTable from the
  const float* rope_sin = nullptr;  // position of coded row 0
  // The group's decoder correction net, or hidden = 0 for none: its output layer and
  // the hidden values of DckvNetHiddenElement.
  uint32_t hidden = 0;
  const float* net_w2 = nullptr;      // [dims, hidden] (nn.Linear order)
  const float* net_b2 = nullptr;      // [dims]
  const float* net_hidden = nullptr;  // [rows, hidden]
  uint16_t* out = nullptr;       // canonical chunk, bf16
};

// Column j's net output o_j = b2[j] + sum_k h_k w2[j][k] (hidden units ascending, zero
// activations skipped) for the hidden values h of one row (dckv_correction.h step 3).
KVSTASH_HD inline float DckvNetOutput(const DckvSynthesisParams& p, const float* h, uint32_t j) {
  const float* w = p.net_w2 + static_cast<uint64_t>(j) * p.hidden;
  float o = p.net_b2[j];
  for (uint32_t k = 0; k < p.hidden; ++k) o = DckvAccumulate(o, h[k], w[k]);
  return o;
}

// Indices: rows * dims / 2 (one per pair of columns a, a + head_dim / 2).
KVSTASH_HD inline uint64_t DckvSynthesisCount(const DckvSynthesisParams& p) {
  return static_cast<uint64_t>(p.rows) * (p.dims / 2);
}

// Index t < DckvSynthesisCount(p): coded row r = t / (dims / 2); within the row, pair
// q = ((layer_in_group * 2 + kv) * n_kv_heads + head) * head_dim / 2 + i, the columns
// a = (layer_in_group * 2 + kv) * n_kv_heads * head_dim + head * head_dim + i and
// a + head_dim / 2, rotated together when kv = 0 (K).
KVSTASH_HD inline void DckvSynthesisElement(const DckvSynthesisParams& p, uint64_t t) {
  const uint32_t half = p.head_dim / 2;
  const uint32_t head_row = p.n_kv_heads * p.head_dim;
  const uint32_t pairs = p.dims / 2;
  const uint64_t r = t / pairs;
  const uint32_t q = static_cast<uint32_t>(t % pairs);
  const uint32_t i = q % half;
  const uint32_t h = (q / half) % p.n_kv_heads;
  const uint32_t block = q / (half * p.n_kv_heads);  // layer_in_group * 2 + kv
  const uint32_t a = block * head_row + h * p.head_dim + i, b = a + half;
  float xa = p.mean[a], xb = p.mean[b];
  const float* c = p.coef + r * p.stride + p.offset;
  for (uint32_t k = 0; k < p.n_active; ++k) {
    const float ck = c[k];
    if (ck != 0.0f) {
      const float* w = p.basis + static_cast<uint64_t>(k) * p.dims;
      xa = spec::DAdd(xa, spec::DMul(ck, w[a]));
      xb = spec::DAdd(xb, spec::DMul(ck, w[b]));
    }
  }
  if (p.hidden > 0) {  // dckv_correction.h step 4, before RoPE
    const float* h = p.net_hidden + r * p.hidden;
    xa = spec::DAdd(xa, DckvNetOutput(p, h, a));
    xb = spec::DAdd(xb, DckvNetOutput(p, h, b));
  }
  const uint32_t kv = block % 2;
  if (kv == 0) {  // RotatePair (dckv_rope.cc), forward
    const float cs = p.rope_cos[r * half + i], sn = p.rope_sin[r * half + i];
    const float ra = spec::DSub(spec::DMul(xa, cs), spec::DMul(xb, sn));
    const float rb = spec::DAdd(spec::DMul(xb, cs), spec::DMul(xa, sn));
    xa = ra;
    xb = rb;
  }
  const uint64_t layer = p.first_layer + block / 2;
  const uint64_t at = ((2 * layer + kv) * p.tokens + p.first_row + r) * head_row + h * p.head_dim + i;
  p.out[at] = F32ToBf16(xa);
  p.out[at + half] = F32ToBf16(xb);
}

}  // namespace kvstash::dckv
