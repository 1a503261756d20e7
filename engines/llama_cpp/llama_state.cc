#include "engines/llama_cpp/llama_state.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/byte_io.h"

namespace kvstash::llama_cpp {
namespace {

constexpr uint64_t kElemBytes = 2;  // f16 and bf16

std::string Str(uint64_t v) { return std::to_string(v); }

Status Truncated(const char* field) {
  return Status::Corruption(std::string("llama.cpp sequence state truncated at ") + field);
}

const char* GgmlTypeName(int32_t t) {
  switch (t) {
    case 0: return "f32";
    case kGgmlTypeF16: return "f16";
    case kGgmlTypeBf16: return "bf16";
    default: return "a non-f16/bf16 ggml type";
  }
}

// Checks one layer's K or V type field.
Status CheckType(int32_t got, int32_t want, const char* which, uint32_t layer) {
  if (got == want) return Status::Ok();
  return Status::Mismatch(std::string(which) + " type of layer " + Str(layer) + " is " +
                          GgmlTypeName(got) + " (" + std::to_string(got) + "), expected " +
                          GgmlTypeName(want) + " (type_k/type_v of another context)");
}

// Copies the contiguous rows `src` to `dst` (the canonical layout is llama.cpp's row order).
void CopyRows(std::span<const uint8_t> src, uint8_t* dst) {
  std::memcpy(dst, src.data(), src.size());
}

// out[c][r] = in[r][c] for a rows x cols matrix of 16-bit elements (byte copies, so no
// alignment is assumed), in 32 x 32 blocks so that both sides stay in cache for long
// sequences.
void Transpose16(const uint8_t* in, uint64_t rows, uint64_t cols, uint8_t* out) {
  constexpr uint64_t kB = 32;
  for (uint64_t r0 = 0; r0 < rows; r0 += kB) {
    const uint64_t r1 = std::min(rows, r0 + kB);
    for (uint64_t c0 = 0; c0 < cols; c0 += kB) {
      const uint64_t c1 = std::min(cols, c0 + kB);
      for (uint64_t r = r0; r < r1; ++r) {
        for (uint64_t c = c0; c < c1; ++c) {
          std::memcpy(out + (c * rows + r) * kElemBytes, in + (r * cols + c) * kElemBytes, kElemBytes);
        }
      }
    }
  }
}

// Per head of every row: channel 2i+j (interleaved RoPE pairs, llama.cpp) <-> channel
// j*half + i (rotate_half halves, canonical). to_canonical picks the direction.
void PermuteK(uint8_t* rows, uint64_t n_rows, uint32_t heads, uint32_t dim, bool to_canonical) {
  const uint32_t half = dim / 2;
  std::vector<uint8_t> tmp(static_cast<size_t>(dim) * kElemBytes);
  for (uint64_t r = 0; r < n_rows * heads; ++r) {
    uint8_t* h = rows + r * dim * kElemBytes;
    std::memcpy(tmp.data(), h, tmp.size());
    for (uint32_t j = 0; j < 2; ++j) {
      for (uint32_t i = 0; i < half; ++i) {
        const uint32_t inter = 2 * i + j, split = j * half + i;
        const uint32_t dst = to_canonical ? split : inter, src = to_canonical ? inter : split;
        std::memcpy(h + dst * kElemBytes, tmp.data() + src * kElemBytes, kElemBytes);
      }
    }
  }
}

}  // namespace

Result<int32_t> GgmlTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF16: return kGgmlTypeF16;
    case DType::kBF16: return kGgmlTypeBf16;
    default:
      return Status::InvalidArgument("llama.cpp KV dtype must be f16 or bf16, got " +
                                     std::string(DTypeName(dtype)));
  }
}

Status StateLayout::Validate() const {
  KVSTASH_RETURN_IF_ERROR(kv.Validate());
  if (k_rope_interleaved && kv.head_dim % 2 != 0) {
    return Status::InvalidArgument("interleaved-RoPE K needs an even head_dim");
  }
  return GgmlTypeOf(kv.dtype).status();
}

uint64_t StateLayout::RowBytes() const {
  return static_cast<uint64_t>(kv.n_kv_heads) * kv.head_dim * kElemBytes;
}

uint64_t StateLayout::StateBytes(uint64_t tokens) const {
  const uint64_t header = 4 + 4 + 4 + 4;  // magic, seq_id, n_stream, cell_count
  const uint64_t cells = tokens * 12;     // pos, n_seq_id, one seq_id
  const uint64_t data_header = 4 + 4;     // v_trans, n_layer
  const uint64_t k_layer = 4 + 8 + tokens * RowBytes();
  const uint64_t v_layer = (v_trans ? 4 + 4 + 4 : 4 + 8) + tokens * RowBytes();
  return header + cells + data_header + kv.n_layers * (k_layer + v_layer);
}

namespace {

// The sections of a sequence state, in order (ParseSeqState). Each reads from `r` and
// returns the section's error, or what the next sections need.

// Magic, sequence id, stream count and cell count; sets *seq_id and *cells.
Status ReadSeqHeader(ByteReader& r, int32_t* seq_id, uint32_t* cells) {
  uint32_t magic = 0, seq_u = 0, n_stream = 0;
  if (!r.U32(&magic)) return Truncated("the magic");
  if (magic != kSeqStateMagic) {
    return Status::Corruption("not a llama.cpp sequence state (magic " + Str(magic) + ")");
  }
  if (!r.U32(&seq_u)) return Truncated("the sequence id");
  *seq_id = static_cast<int32_t>(seq_u);
  if (*seq_id < 0) {
    return Status::NotSupported("state of all sequences (seq_id " + std::to_string(*seq_id) +
                                "): only one sequence's state is accepted");
  }
  if (!r.U32(&n_stream)) return Truncated("the stream count");
  if (n_stream != 1) {
    return Status::NotSupported("state with " + Str(n_stream) +
                                " KV streams (non-unified cache): only 1 is accepted");
  }
  if (!r.U32(cells)) return Truncated("the cell count");
  if (*cells == 0) return Status::NotSupported("sequence state holds no cells");
  if (*cells > kMaxChunkTokens) {
    return Status::NotSupported("sequence state of " + Str(*cells) + " cells, above " + Str(kMaxChunkTokens));
  }
  // Each cell record is at least 12 bytes: refuse a count the bytes cannot hold before
  // allocating anything for it.
  if (r.remaining() / 12 < *cells) return Truncated("the cell records");
  return Status::Ok();
}

// The cell records: each of one sequence (seq_id), at position = its index.
Status ReadCells(ByteReader& r, uint32_t cells, int32_t seq_id) {
  for (uint32_t i = 0; i < cells; ++i) {
    uint32_t pos = 0, n_seq = 0, cell_seq = 0;
    if (!r.U32(&pos) || !r.U32(&n_seq)) return Truncated("a cell record");
    if (n_seq == 0) {
      return Status::Corruption("cell " + Str(i) + " belongs to no sequence");
    }
    if (n_seq != 1) {
      return Status::NotSupported("cell " + Str(i) + " is shared by " + Str(n_seq) +
                                  " sequences: only single-sequence cells are accepted");
    }
    if (!r.U32(&cell_seq)) return Truncated("a cell's sequence id");
    if (static_cast<int32_t>(cell_seq) != seq_id) {
      return Status::Corruption("cell " + Str(i) + " names sequence " +
                                std::to_string(static_cast<int32_t>(cell_seq)) +
                                " in the state of sequence " + std::to_string(seq_id));
    }
    if (pos != i) {
      return Status::NotSupported("cell " + Str(i) + " holds position " +
                                  std::to_string(static_cast<int32_t>(pos)) +
                                  ": only positions 0..T-1 in cell order are accepted");
    }
  }
  return Status::Ok();
}

// v_trans and the layer count, checked against `expected`.
Status ReadDataHeader(ByteReader& r, const StateLayout& expected) {
  uint32_t v_trans = 0, n_layer = 0;
  if (!r.U32(&v_trans)) return Truncated("v_trans");
  if (v_trans > 1) return Status::Corruption("v_trans is " + Str(v_trans) + ", not 0 or 1");
  if ((v_trans == 1) != expected.v_trans) {
    return Status::Mismatch(std::string("incompatible V transposition: the state was saved ") +
                            (v_trans ? "without" : "with") + " flash attention, this context runs " +
                            (expected.v_trans ? "without" : "with") + " it");
  }
  if (!r.U32(&n_layer)) return Truncated("the layer count");
  if (n_layer != expected.kv.n_layers) {
    return Status::Mismatch("state of a model with " + Str(n_layer) + " KV layers, expected " +
                            Str(expected.kv.n_layers));
  }
  return Status::Ok();
}

// A layer's row size field ("K" or "V"), which must be `row`.
Status CheckRowBytes(ByteReader& r, const char* what, uint32_t l, uint64_t row) {
  uint64_t row_bytes = 0;
  if (!r.U64(&row_bytes)) return Truncated((std::string("a ") + what + " row size").c_str());
  if (row_bytes != row) {
    return Status::Mismatch(std::string(what) + " row of layer " + Str(l) + " is " + Str(row_bytes) +
                            " bytes, expected " + Str(row) + " (another KV head shape)");
  }
  return Status::Ok();
}

// The K rows of every layer into out->kv (sized here, once the first row size fixed the
// whole state's size).
Status ReadK(ByteReader& r, const StateLayout& expected, int32_t want_type, SeqState* out) {
  const uint64_t row = expected.RowBytes();
  const uint32_t cells = out->kv.tokens;
  for (uint32_t l = 0; l < expected.kv.n_layers; ++l) {
    uint32_t type = 0;
    std::span<const uint8_t> data;
    if (!r.U32(&type)) return Truncated("a K type");
    KVSTASH_RETURN_IF_ERROR(CheckType(static_cast<int32_t>(type), want_type, "K", l));
    KVSTASH_RETURN_IF_ERROR(CheckRowBytes(r, "K", l, row));
    if (l == 0) {
      // The row size matches: the whole state's size is now fixed by the layout. Refuse
      // a state too short for its own cell count before allocating the chunk.
      if (r.remaining() < expected.StateBytes(cells) - r.pos()) return Truncated("the K/V data");
      out->kv.data.resize(expected.kv.DataBytes(cells));
    }
    if (!r.Take(cells * row, &data)) return Truncated("K data");
    CopyRows(data, out->kv.MutableK(l).data());
    if (expected.k_rope_interleaved) {
      PermuteK(out->kv.MutableK(l).data(), cells, expected.kv.n_kv_heads, expected.kv.head_dim, true);
    }
  }
  return Status::Ok();
}

// The V rows of every layer into out->kv: row-major, or transposed (channel-major) when
// the context runs without flash attention.
Status ReadV(ByteReader& r, const StateLayout& expected, int32_t want_type, SeqState* out) {
  const uint64_t row = expected.RowBytes();
  const uint32_t n_embd = expected.kv.n_kv_heads * expected.kv.head_dim;
  const uint32_t cells = out->kv.tokens;
  for (uint32_t l = 0; l < expected.kv.n_layers; ++l) {
    uint32_t type = 0;
    std::span<const uint8_t> data;
    if (!r.U32(&type)) return Truncated("a V type");
    KVSTASH_RETURN_IF_ERROR(CheckType(static_cast<int32_t>(type), want_type, "V", l));
    if (!expected.v_trans) {
      KVSTASH_RETURN_IF_ERROR(CheckRowBytes(r, "V", l, row));
      if (!r.Take(cells * row, &data)) return Truncated("V data");
      CopyRows(data, out->kv.MutableV(l).data());
      continue;
    }
    uint32_t elem_bytes = 0, embd = 0;
    if (!r.U32(&elem_bytes)) return Truncated("a V element size");
    if (elem_bytes != kElemBytes) {
      return Status::Mismatch("V element of layer " + Str(l) + " is " + Str(elem_bytes) +
                              " bytes, expected " + Str(kElemBytes));
    }
    if (!r.U32(&embd)) return Truncated("a V width");
    if (embd != n_embd) {
      return Status::Mismatch("V of layer " + Str(l) + " has " + Str(embd) +
                              " channels per token, expected " + Str(n_embd) + " (another KV head shape)");
    }
    if (!r.Take(cells * row, &data)) return Truncated("V data");
    // data[j][t] (channel-major) -> V[t][j].
    Transpose16(data.data(), n_embd, cells, out->kv.MutableV(l).data());
  }
  return Status::Ok();
}

}  // namespace

Result<SeqState> ParseSeqState(std::span<const uint8_t> bytes, const StateLayout& expected) {
  KVSTASH_RETURN_IF_ERROR(expected.Validate());
  const int32_t want_type = *GgmlTypeOf(expected.kv.dtype);
  ByteReader r(bytes);
  SeqState out;
  uint32_t cells = 0;
  KVSTASH_RETURN_IF_ERROR(ReadSeqHeader(r, &out.seq_id, &cells));
  KVSTASH_RETURN_IF_ERROR(ReadCells(r, cells, out.seq_id));
  KVSTASH_RETURN_IF_ERROR(ReadDataHeader(r, expected));
  out.kv.layout = expected.kv;
  out.kv.tokens = cells;
  KVSTASH_RETURN_IF_ERROR(ReadK(r, expected, want_type, &out));
  KVSTASH_RETURN_IF_ERROR(ReadV(r, expected, want_type, &out));
  if (r.remaining() != 0) {
    return Status::Corruption(Str(r.remaining()) + " bytes after the end of the sequence state");
  }
  return out;
}

Result<std::vector<uint8_t>> WriteSeqState(const StateLayout& layout, int32_t seq_id,
                                           std::span<const KvChunk> chunks) {
  KVSTASH_RETURN_IF_ERROR(layout.Validate());
  if (seq_id < 0) return Status::InvalidArgument("sequence id must be >= 0");
  if (chunks.empty()) return Status::InvalidArgument("no chunks to write");
  uint64_t total = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    KVSTASH_RETURN_IF_ERROR(chunks[c].Validate().WithContext("chunk " + Str(c)));
    if (!(chunks[c].layout == layout.kv)) {
      return Status::InvalidArgument("chunk " + Str(c) + " has another KV layout or dtype");
    }
    total += chunks[c].tokens;
  }
  if (total > kMaxChunkTokens) {
    return Status::InvalidArgument("state of " + Str(total) + " tokens, above " +
                                   Str(kMaxChunkTokens));
  }
  const uint32_t cells = static_cast<uint32_t>(total);
  const int32_t type = *GgmlTypeOf(layout.kv.dtype);
  const uint64_t row = layout.RowBytes();
  const uint32_t n_embd = layout.kv.n_kv_heads * layout.kv.head_dim;

  std::vector<uint8_t> out;
  out.reserve(layout.StateBytes(cells));
  ByteWriter w(&out);
  w.U32(kSeqStateMagic);
  w.U32(static_cast<uint32_t>(seq_id));
  w.U32(1);  // n_stream
  w.U32(cells);
  for (uint32_t i = 0; i < cells; ++i) {
    w.U32(i);  // pos
    w.U32(1);  // n_seq_id
    w.U32(static_cast<uint32_t>(seq_id));
  }
  w.U32(layout.v_trans ? 1 : 0);
  w.U32(layout.kv.n_layers);
  for (uint32_t l = 0; l < layout.kv.n_layers; ++l) {
    w.U32(static_cast<uint32_t>(type));
    w.U64(row);
    const size_t k_at = out.size();
    for (const KvChunk& c : chunks) w.Bytes(c.view().K(l));
    if (layout.k_rope_interleaved) {
      PermuteK(out.data() + k_at, cells, layout.kv.n_kv_heads, layout.kv.head_dim, false);
    }
  }
  for (uint32_t l = 0; l < layout.kv.n_layers; ++l) {
    w.U32(static_cast<uint32_t>(type));
    if (!layout.v_trans) {
      w.U64(row);
      for (const KvChunk& c : chunks) w.Bytes(c.view().V(l));
      continue;
    }
    w.U32(kElemBytes);
    w.U32(n_embd);
    // V[t][j] of the concatenated chunks -> data[j][t].
    const size_t base = out.size();
    out.resize(base + static_cast<uint64_t>(cells) * row);
    uint8_t* dst = out.data() + base;
    if (chunks.size() == 1) {
      Transpose16(chunks[0].view().V(l).data(), cells, n_embd, dst);
      continue;
    }
    // Several chunks: gather V[t][j] of their concatenation, then transpose once.
    std::vector<uint8_t> v(static_cast<uint64_t>(cells) * row);
    uint64_t at = 0;
    for (const KvChunk& c : chunks) {
      const auto src = c.view().V(l);
      std::memcpy(v.data() + at, src.data(), src.size());
      at += src.size();
    }
    Transpose16(v.data(), cells, n_embd, dst);
  }
  if (out.size() != layout.StateBytes(cells)) {
    return Status::Internal("sequence state size " + Str(out.size()) + " != " +
                            Str(layout.StateBytes(cells)));
  }
  return out;
}

}  // namespace kvstash::llama_cpp
