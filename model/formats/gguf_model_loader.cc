// GGUF -> Model (see model_loader.h). Tensor names follow llama.cpp
// (token_embd, blk.N.attn_q, ..., output_norm, output); q/k rows of "llama" files are
// stored in the interleaved RoPE layout and are permuted back here. "qwen3" and "qwen2"
// files keep Hugging Face's row order (llama.cpp runs them with NEOX RoPE, which is
// rotate_half); "qwen2" adds blk.N.attn_{q,k,v}.bias (F32 vectors).
#include <string>

#include "model/tokenizers/bpe_tokenizer.h"
#include "model/formats/gguf_reader.h"
#include "model/formats/model_loader.h"
#include "model/tokenizers/sentencepiece_tokenizer.h"

namespace kvstash::model {
namespace {

// Reads tensor `name` as a row-major [rows, cols] fp32 matrix (GGUF dims {cols, rows}).
Result<std::vector<float>> ReadMatrix(const GgufFile& f, const std::string& name, uint32_t rows, uint32_t cols) {
  KVSTASH_ASSIGN_OR_RETURN(const GgufTensorInfo* t, f.FindTensor(name));
  const bool ok = (rows == 1 && t->dims.size() == 1 && t->dims[0] == cols) ||
                  (t->dims.size() == 2 && t->dims[0] == cols && t->dims[1] == rows);
  if (!ok) {
    std::string d;
    for (uint64_t x : t->dims) d += (d.empty() ? "" : ", ") + std::to_string(x);
    return Status::InvalidArgument("GGUF tensor " + name + " has dims {" + d + "}, want {" +
                                   std::to_string(cols) + ", " + std::to_string(rows) + "}");
  }
  return f.ReadF32(name);
}

// The stored blocks of a [rows, cols] tensor, as the file holds them.
Result<GgmlTensor> ReadStored(const GgufFile& f, const std::string& name, uint32_t rows, uint32_t cols) {
  KVSTASH_ASSIGN_OR_RETURN(const GgufTensorInfo* t, f.FindTensor(name));
  if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows) {
    return Status::InvalidArgument("GGUF tensor " + name + " has the wrong shape");
  }
  KVSTASH_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, f.TensorBytes(*t));
  GgmlTensor out;
  out.type = t->raw_type;
  out.rows = rows;
  out.cols = cols;
  out.bytes.assign(bytes.begin(), bytes.end());
  return out;
}

Result<uint32_t> Key(const GgufFile& f, const std::string& arch, const std::string& k) {
  return f.GetU32(arch + "." + k);
}

Result<std::unique_ptr<Tokenizer>> GgufTokenizer(const GgufFile& f) {
  if (!f.Has("tokenizer.ggml.model")) return Status::NotFound("GGUF file has no tokenizer");
  KVSTASH_ASSIGN_OR_RETURN(std::string kind, f.GetString("tokenizer.ggml.model"));
  KVSTASH_ASSIGN_OR_RETURN(const GgufValue* tokens, f.GetArray("tokenizer.ggml.tokens"));
  if (tokens->elem_type != GgufValueType::kString) {
    return Status::Corruption("tokenizer.ggml.tokens is not a string array");
  }
  std::vector<int32_t> types;
  if (f.Has("tokenizer.ggml.token_type")) {
    KVSTASH_ASSIGN_OR_RETURN(const GgufValue* tt, f.GetArray("tokenizer.ggml.token_type"));
    for (int64_t x : tt->ints) types.push_back(static_cast<int32_t>(x));
  }
  std::optional<uint32_t> bos, eos;
  if (f.Has("tokenizer.ggml.bos_token_id")) {
    KVSTASH_ASSIGN_OR_RETURN(bos, f.GetU32("tokenizer.ggml.bos_token_id"));
  }
  if (f.Has("tokenizer.ggml.eos_token_id")) {
    KVSTASH_ASSIGN_OR_RETURN(eos, f.GetU32("tokenizer.ggml.eos_token_id"));
  }
  if (kind == "gpt2") {
    BpeVocab v;
    v.tokens = tokens->strings;
    v.token_types = std::move(types);
    KVSTASH_ASSIGN_OR_RETURN(const GgufValue* merges, f.GetArray("tokenizer.ggml.merges"));
    v.merges = merges->strings;
    if (f.Has("tokenizer.ggml.pre")) {
      KVSTASH_ASSIGN_OR_RETURN(v.pre, f.GetString("tokenizer.ggml.pre"));
    }
    v.bos = bos;
    v.eos = eos;
    if (f.Has("tokenizer.ggml.add_bos_token")) {
      KVSTASH_ASSIGN_OR_RETURN(v.add_bos, f.GetBool("tokenizer.ggml.add_bos_token"));
    }
    KVSTASH_ASSIGN_OR_RETURN(auto t, BpeTokenizer::Create(std::move(v)));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  if (kind == "llama") {
    SentencePieceVocab v;
    v.pieces = tokens->strings;
    KVSTASH_ASSIGN_OR_RETURN(const GgufValue* scores, f.GetArray("tokenizer.ggml.scores"));
    for (double s : scores->floats) v.scores.push_back(static_cast<float>(s));
    v.types = std::move(types);
    v.bos = bos;
    v.eos = eos;
    if (f.Has("tokenizer.ggml.add_bos_token")) {
      KVSTASH_ASSIGN_OR_RETURN(v.add_bos, f.GetBool("tokenizer.ggml.add_bos_token"));
    }
    KVSTASH_ASSIGN_OR_RETURN(auto t, SentencePieceTokenizer::Create(std::move(v)));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  return Status::NotSupported("GGUF tokenizer model '" + kind + "' is not supported");
}

Result<std::unique_ptr<Model>> LoadFromGguf(const GgufFile& f) {
  KVSTASH_ASSIGN_OR_RETURN(std::string arch, f.GetString("general.architecture"));
  auto m = std::make_unique<Model>();
  m->source = "gguf";
  ModelConfig& c = m->config;
  if (arch == "llama") {
    c.arch = Architecture::kLlama;
  } else if (arch == "qwen3") {
    c.arch = Architecture::kQwen3;
  } else if (arch == "qwen2") {
    c.arch = Architecture::kQwen2;
  } else {
    return Status::NotSupported("GGUF architecture '" + arch + "' is not supported (llama, qwen2, qwen3)");
  }
  KVSTASH_ASSIGN_OR_RETURN(c.n_layers, Key(f, arch, "block_count"));
  KVSTASH_ASSIGN_OR_RETURN(c.hidden, Key(f, arch, "embedding_length"));
  KVSTASH_ASSIGN_OR_RETURN(c.ffn_hidden, Key(f, arch, "feed_forward_length"));
  KVSTASH_ASSIGN_OR_RETURN(c.n_heads, Key(f, arch, "attention.head_count"));
  c.n_kv_heads = c.n_heads;
  if (f.Has(arch + ".attention.head_count_kv")) {
    KVSTASH_ASSIGN_OR_RETURN(c.n_kv_heads, Key(f, arch, "attention.head_count_kv"));
  }
  if (c.n_heads == 0) return Status::InvalidArgument("GGUF head_count is 0");
  c.head_dim = c.hidden / c.n_heads;
  if (f.Has(arch + ".attention.key_length")) {
    KVSTASH_ASSIGN_OR_RETURN(c.head_dim, Key(f, arch, "attention.key_length"));
  }
  if (f.Has(arch + ".rope.dimension_count")) {
    KVSTASH_ASSIGN_OR_RETURN(uint32_t rope_dims, Key(f, arch, "rope.dimension_count"));
    if (rope_dims != c.head_dim) return Status::NotSupported("partial rotary embeddings are not supported");
  }
  if (f.Has(arch + ".context_length")) {
    KVSTASH_ASSIGN_OR_RETURN(c.max_positions, Key(f, arch, "context_length"));
  }
  if (f.Has(arch + ".rope.freq_base")) {
    KVSTASH_ASSIGN_OR_RETURN(c.rope_theta, f.GetF32(arch + ".rope.freq_base"));
  }
  KVSTASH_ASSIGN_OR_RETURN(c.rms_eps, f.GetF32(arch + ".attention.layer_norm_rms_epsilon"));
  KVSTASH_ASSIGN_OR_RETURN(const GgufTensorInfo* emb, f.FindTensor("token_embd.weight"));
  if (emb->dims.size() != 2 || emb->dims[1] > ModelConfig::kMaxVocab) {
    return Status::InvalidArgument("token_embd.weight must be 2-D");
  }
  c.vocab_size = static_cast<uint32_t>(emb->dims[1]);
  c.tied_embeddings = !f.FindTensor("output.weight").ok();
  KVSTASH_RETURN_IF_ERROR(c.Validate());

  const uint32_t D = c.hidden;
  KVSTASH_ASSIGN_OR_RETURN(auto embed, ReadMatrix(f, "token_embd.weight", c.vocab_size, D));
  m->embed = std::make_shared<const std::vector<float>>(std::move(embed));
  const bool permute = c.arch == Architecture::kLlama;
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights w;
    KVSTASH_ASSIGN_OR_RETURN(w.attn_norm, ReadMatrix(f, p + "attn_norm.weight", 1, D));
    KVSTASH_ASSIGN_OR_RETURN(w.ffn_norm, ReadMatrix(f, p + "ffn_norm.weight", 1, D));
    KVSTASH_ASSIGN_OR_RETURN(auto wq, ReadMatrix(f, p + "attn_q.weight", c.q_dim(), D));
    KVSTASH_ASSIGN_OR_RETURN(auto wk, ReadMatrix(f, p + "attn_k.weight", c.kv_dim(), D));
    if (permute) {
      wq = InterleavedToHalfSplit(wq, c.n_heads, c.head_dim, D);
      wk = InterleavedToHalfSplit(wk, c.n_kv_heads, c.head_dim, D);
    }
    KVSTASH_ASSIGN_OR_RETURN(w.wq, MakeDense(std::move(wq), c.q_dim(), D, p + "attn_q"));
    KVSTASH_ASSIGN_OR_RETURN(w.wk, MakeDense(std::move(wk), c.kv_dim(), D, p + "attn_k"));
    KVSTASH_ASSIGN_OR_RETURN(auto wv, ReadMatrix(f, p + "attn_v.weight", c.kv_dim(), D));
    KVSTASH_ASSIGN_OR_RETURN(w.wv, MakeDense(std::move(wv), c.kv_dim(), D, p + "attn_v"));
    KVSTASH_ASSIGN_OR_RETURN(auto wo, ReadMatrix(f, p + "attn_output.weight", D, c.q_dim()));
    KVSTASH_ASSIGN_OR_RETURN(w.wo, MakeDense(std::move(wo), D, c.q_dim(), p + "attn_output"));
    KVSTASH_ASSIGN_OR_RETURN(auto wg, ReadMatrix(f, p + "ffn_gate.weight", c.ffn_hidden, D));
    KVSTASH_ASSIGN_OR_RETURN(w.w_gate, MakeDense(std::move(wg), c.ffn_hidden, D, p + "ffn_gate"));
    KVSTASH_ASSIGN_OR_RETURN(auto wu, ReadMatrix(f, p + "ffn_up.weight", c.ffn_hidden, D));
    KVSTASH_ASSIGN_OR_RETURN(w.w_up, MakeDense(std::move(wu), c.ffn_hidden, D, p + "ffn_up"));
    KVSTASH_ASSIGN_OR_RETURN(auto wd, ReadMatrix(f, p + "ffn_down.weight", D, c.ffn_hidden));
    KVSTASH_ASSIGN_OR_RETURN(w.w_down, MakeDense(std::move(wd), D, c.ffn_hidden, p + "ffn_down"));
    if (c.qk_norm()) {
      KVSTASH_ASSIGN_OR_RETURN(w.q_norm, ReadMatrix(f, p + "attn_q_norm.weight", 1, c.head_dim));
      KVSTASH_ASSIGN_OR_RETURN(w.k_norm, ReadMatrix(f, p + "attn_k_norm.weight", 1, c.head_dim));
    }
    if (c.qkv_bias()) {
      KVSTASH_ASSIGN_OR_RETURN(w.bq, ReadMatrix(f, p + "attn_q.bias", 1, c.q_dim()));
      KVSTASH_ASSIGN_OR_RETURN(w.bk, ReadMatrix(f, p + "attn_k.bias", 1, c.kv_dim()));
      KVSTASH_ASSIGN_OR_RETURN(w.bv, ReadMatrix(f, p + "attn_v.bias", 1, c.kv_dim()));
    }
    m->layers.push_back(std::move(w));
    GgmlLayerTensors g;
    const std::pair<const char*, GgmlTensor*> stored[] = {
        {"attn_q", &g.wq},        {"attn_k", &g.wk},   {"attn_v", &g.wv},      {"attn_output", &g.wo},
        {"ffn_gate", &g.w_gate}, {"ffn_up", &g.w_up}, {"ffn_down", &g.w_down}};
    const uint32_t shape[][2] = {{c.q_dim(), D}, {c.kv_dim(), D}, {c.kv_dim(), D}, {D, c.q_dim()},
                                 {c.ffn_hidden, D}, {c.ffn_hidden, D}, {D, c.ffn_hidden}};
    for (size_t i = 0; i < 7; ++i) {
      KVSTASH_ASSIGN_OR_RETURN(*stored[i].second,
                               ReadStored(f, p + stored[i].first + ".weight", shape[i][0], shape[i][1]));
    }
    m->ggml_layers.push_back(std::move(g));
  }
  KVSTASH_ASSIGN_OR_RETURN(m->final_norm, ReadMatrix(f, "output_norm.weight", 1, D));
  if (c.tied_embeddings) {
    KVSTASH_ASSIGN_OR_RETURN(auto head, DenseLinear::Create(m->embed, c.vocab_size, D));
    m->lm_head = std::move(head);
  } else {
    KVSTASH_ASSIGN_OR_RETURN(auto out, ReadMatrix(f, "output.weight", c.vocab_size, D));
    KVSTASH_ASSIGN_OR_RETURN(m->lm_head, MakeDense(std::move(out), c.vocab_size, D, "output"));
  }
  Result<std::unique_ptr<Tokenizer>> tok = GgufTokenizer(f);
  if (tok.ok()) {
    m->tokenizer = std::move(tok).value();
  } else if (!tok.status().IsNotFound()) {
    return tok.status();
  }
  KVSTASH_RETURN_IF_ERROR(m->Validate());
  return m;
}

}  // namespace

Result<std::unique_ptr<Model>> LoadGgufModel(const std::string& path) {
  KVSTASH_ASSIGN_OR_RETURN(auto f, GgufFile::Open(path));
  Result<std::unique_ptr<Model>> m = LoadFromGguf(*f);
  if (!m.ok()) return m.status().WithContext(path);
  return m;
}

Result<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::string& path) {
  KVSTASH_ASSIGN_OR_RETURN(auto f, GgufFile::Open(path));
  return GgufTokenizer(*f);
}

}  // namespace kvstash::model
