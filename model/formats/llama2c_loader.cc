// llama2.c checkpoint -> Model (see model_loader.h).
//
// Layout (karpathy/llama2.c run.c, "version 0" / legacy export), little-endian:
//   int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
//   (vocab_size < 0 means a separate classifier follows; > 0: shared with the
//   embedding), then fp32 arrays:
//   token_embedding [vocab, dim], rms_att [L, dim], wq [L, dim, dim],
//   wk [L, kv_dim, dim], wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn [L, dim],
//   w1 [L, hidden, dim], w2 [L, dim, hidden], w3 [L, hidden, dim], rms_final [dim],
//   freq_cis_real [seq_len, head_dim/2], freq_cis_imag [seq_len, head_dim/2] (unused:
//   RoPE is recomputed, theta 10000), wcls [vocab, dim] when not shared.
// Matrices are [out, in]. q/k use the interleaved RoPE layout and are permuted to
// rotate_half here. RMSNorm eps is 1e-5 (run.c).
#include <string>

#include "common/byte_io.h"
#include "common/mapped_file.h"
#include "kvstash/dtype_bits.h"
#include "model/formats/model_loader.h"

namespace kvstash::model {
namespace {

class FloatCursor {
 public:
  explicit FloatCursor(std::span<const uint8_t> b) : r_(b) {}
  Result<std::vector<float>> Take(uint64_t n, const std::string& what) {
    std::span<const uint8_t> s;
    if (n > r_.remaining() / 4 || !r_.Take(n * 4, &s)) {
      return Status::Corruption("llama2.c checkpoint truncated in " + what);
    }
    std::vector<float> out(n);
    for (uint64_t i = 0; i < n; ++i) out[i] = FromBits(LoadLe<uint32_t>(s.data() + 4 * i));
    return out;
  }
  ByteReader& reader() { return r_; }

 private:
  ByteReader r_;
};

std::vector<float> Slice(const std::vector<float>& all, uint32_t l, uint64_t per) {
  return std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(l * per),
                            all.begin() + static_cast<std::ptrdiff_t>((l + 1) * per));
}

}  // namespace

Result<std::unique_ptr<Model>> LoadLlama2cModel(const std::string& path) {
  KVSTASH_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  FloatCursor cur(file->bytes());
  int32_t h[7];
  for (int32_t& x : h) {
    uint32_t u = 0;
    if (!cur.reader().U32(&u)) return Status::Corruption("llama2.c checkpoint " + path + ": truncated header");
    x = static_cast<int32_t>(u);
  }
  for (int i = 0; i < 7; ++i) {
    if (i != 5 && h[i] <= 0) {
      return Status::Corruption("llama2.c checkpoint " + path + ": header field " + std::to_string(i) +
                                " is " + std::to_string(h[i]));
    }
  }
  if (h[5] == 0 || h[5] == INT32_MIN) return Status::Corruption("llama2.c checkpoint " + path + ": vocab_size 0");
  auto m = std::make_unique<Model>();
  m->source = "llama2c";
  ModelConfig& c = m->config;
  c.arch = Architecture::kLlama;
  c.hidden = static_cast<uint32_t>(h[0]);
  c.ffn_hidden = static_cast<uint32_t>(h[1]);
  c.n_layers = static_cast<uint32_t>(h[2]);
  c.n_heads = static_cast<uint32_t>(h[3]);
  c.n_kv_heads = static_cast<uint32_t>(h[4]);
  const bool shared = h[5] > 0;
  c.vocab_size = static_cast<uint32_t>(shared ? h[5] : -h[5]);
  c.max_positions = static_cast<uint32_t>(h[6]);
  c.head_dim = c.n_heads != 0 ? c.hidden / c.n_heads : 0;
  c.rope_theta = 10000.0f;
  c.rms_eps = 1e-5f;
  c.tied_embeddings = shared;
  if (c.n_heads == 0 || c.hidden % c.n_heads != 0) {
    return Status::Corruption("llama2.c checkpoint " + path + ": dim is not a multiple of n_heads");
  }
  Status valid = c.Validate();
  if (!valid.ok()) return Status::Corruption(valid.message()).WithContext(path);
  const uint64_t D = c.hidden, F = c.ffn_hidden, L = c.n_layers, KV = c.kv_dim();
  // Size check before reading anything: header + all arrays (+ classifier).
  const uint64_t floats = c.vocab_size * D + L * (2 * D + 2 * D * D + 2 * KV * D + 3 * F * D) + D +
                          static_cast<uint64_t>(c.max_positions) * c.head_dim + (shared ? 0 : c.vocab_size * D);
  if (file->bytes().size() != 28 + floats * 4) {
    return Status::Corruption("llama2.c checkpoint " + path + " is " + std::to_string(file->bytes().size()) +
                              " bytes; its header implies " + std::to_string(28 + floats * 4));
  }
  KVSTASH_ASSIGN_OR_RETURN(auto embed, cur.Take(c.vocab_size * D, "token_embedding"));
  m->embed = std::make_shared<const std::vector<float>>(std::move(embed));
  KVSTASH_ASSIGN_OR_RETURN(auto rms_att, cur.Take(L * D, "rms_att"));
  KVSTASH_ASSIGN_OR_RETURN(auto wq, cur.Take(L * D * D, "wq"));
  KVSTASH_ASSIGN_OR_RETURN(auto wk, cur.Take(L * KV * D, "wk"));
  KVSTASH_ASSIGN_OR_RETURN(auto wv, cur.Take(L * KV * D, "wv"));
  KVSTASH_ASSIGN_OR_RETURN(auto wo, cur.Take(L * D * D, "wo"));
  KVSTASH_ASSIGN_OR_RETURN(auto rms_ffn, cur.Take(L * D, "rms_ffn"));
  KVSTASH_ASSIGN_OR_RETURN(auto w1, cur.Take(L * F * D, "w1"));
  KVSTASH_ASSIGN_OR_RETURN(auto w2, cur.Take(L * D * F, "w2"));
  KVSTASH_ASSIGN_OR_RETURN(auto w3, cur.Take(L * F * D, "w3"));
  KVSTASH_ASSIGN_OR_RETURN(m->final_norm, cur.Take(D, "rms_final"));
  KVSTASH_ASSIGN_OR_RETURN(auto freq, cur.Take(static_cast<uint64_t>(c.max_positions) * c.head_dim, "freq_cis"));
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "layer " + std::to_string(l) + " ";
    LayerWeights w;
    w.attn_norm = Slice(rms_att, l, D);
    w.ffn_norm = Slice(rms_ffn, l, D);
    KVSTASH_ASSIGN_OR_RETURN(
        w.wq, MakeDense(InterleavedToHalfSplit(Slice(wq, l, D * D), c.n_heads, c.head_dim, c.hidden), c.hidden,
                        c.hidden, p + "wq"));
    KVSTASH_ASSIGN_OR_RETURN(
        w.wk, MakeDense(InterleavedToHalfSplit(Slice(wk, l, KV * D), c.n_kv_heads, c.head_dim, c.hidden),
                        c.kv_dim(), c.hidden, p + "wk"));
    KVSTASH_ASSIGN_OR_RETURN(w.wv, MakeDense(Slice(wv, l, KV * D), c.kv_dim(), c.hidden, p + "wv"));
    KVSTASH_ASSIGN_OR_RETURN(w.wo, MakeDense(Slice(wo, l, D * D), c.hidden, c.hidden, p + "wo"));
    KVSTASH_ASSIGN_OR_RETURN(w.w_gate, MakeDense(Slice(w1, l, F * D), c.ffn_hidden, c.hidden, p + "w1"));
    KVSTASH_ASSIGN_OR_RETURN(w.w_down, MakeDense(Slice(w2, l, D * F), c.hidden, c.ffn_hidden, p + "w2"));
    KVSTASH_ASSIGN_OR_RETURN(w.w_up, MakeDense(Slice(w3, l, F * D), c.ffn_hidden, c.hidden, p + "w3"));
    m->layers.push_back(std::move(w));
  }
  if (shared) {
    KVSTASH_ASSIGN_OR_RETURN(auto head, DenseLinear::Create(m->embed, c.vocab_size, c.hidden));
    m->lm_head = std::move(head);
  } else {
    KVSTASH_ASSIGN_OR_RETURN(auto wcls, cur.Take(c.vocab_size * D, "wcls"));
    KVSTASH_ASSIGN_OR_RETURN(m->lm_head, MakeDense(std::move(wcls), c.vocab_size, c.hidden, "wcls"));
  }
  KVSTASH_RETURN_IF_ERROR(m->Validate());
  return m;
}

}  // namespace kvstash::model
