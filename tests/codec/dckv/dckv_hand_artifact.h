// A dckv artifact built by hand from fixed integer formulas (no calibration, no
// Eigen, no BLAS), so its bytes and its decoder's output are the same on every
// machine: the tests pin them (digest, content checksum) and evaluate the decoder
// against independent double-precision arithmetic.
//
// Shape: tests/codec/dckv/dckv_test_data.h (3 layers x 2 KV heads x 8), groups of 2 layers
// (dims 64 and 32), 5 active components each, no token conditioning (rank 0), token
// map bias 0 (so the decoded coefficient is c = s * step), no context map, no raw
// head/tail, one 16-bit frequency table (symbols 0..15 direct, the rest by escape).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "codec/dckv/dckv_artifact.h"
#include "codec/dckv/dckv_codec.h"
#include "codec/entropy/frequency_table.h"
#include "tests/codec/dckv/dckv_test_data.h"

namespace kvstash::dckv::testing {

inline constexpr uint32_t kHandActive = 5;

// A value in [-1, 1] in steps of 1/512 from (a, b, salt), fixed formula.
inline float HandValue(uint32_t a, uint32_t b, uint32_t salt) {
  uint32_t h = a * 2654435761u ^ (b + 0x9E3779B9u) * 2246822519u ^ salt * 3266489917u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return static_cast<float>(static_cast<int32_t>(h % 1025) - 512) / 512.0f;
}

inline DckvArtifact HandArtifact() {
  DckvArtifact a;
  a.n_layers = kLayers;
  a.n_kv_heads = kHeads;
  a.head_dim = kHeadDim;
  a.rope_theta = 10000.0f;
  a.group_layers = 2;
  a.raw_head = 0;
  a.raw_tail = 0;
  a.target_ratio = 8.0f;
  for (uint32_t first = 0; first < kLayers; first += 2) {
    DckvGroup g;
    g.first_layer = first;
    g.layers = std::min(2u, kLayers - first);
    g.dims = 2 * g.layers * kHeads * kHeadDim;
    for (uint32_t j = 0; j < g.dims; ++j) g.mean.push_back(HandValue(first, j, 1) * 2.0f);
    for (uint32_t i = 0; i < kHandActive; ++i) {
      for (uint32_t j = 0; j < g.dims; ++j) g.basis.push_back(HandValue(first * 100 + i, j, 2) * 0.25f);
      g.step.push_back(0.0625f * static_cast<float>(i + 1));
      g.table_index.push_back(0);
      g.odd_table_index.push_back(0);
      g.token_map.push_back(0.0f);
    }
    a.groups.push_back(std::move(g));
  }
  std::vector<uint32_t> freqs(16, 200);
  auto table = entropy::FrequencyTable::Create(12, 16, 0, freqs, 4096 - 16 * 200);
  std::vector<entropy::FrequencyTable> tables;
  tables.push_back(std::move(*table));
  a.tables =
      std::make_shared<const entropy::TableSet>(std::move(*entropy::TableSet::Create(std::move(tables))));
  return a;
}

// A quantised chunk of `tokens` coded rows with symbols in [-6, 6] (fixed formula).
inline DckvQuantized HandQuantized(const DckvArtifact& a, uint32_t tokens) {
  DckvQuantized q;
  q.tokens = tokens;
  const uint64_t per_row = a.ActiveComponents();
  for (uint64_t i = 0; i < tokens * per_row; ++i) {
    const int s = static_cast<int>((i * 7 + 3) % 13) - 6;
    q.symbols.push_back(static_cast<uint16_t>(static_cast<int16_t>(s)));
  }
  return q;
}

}  // namespace kvstash::dckv::testing
