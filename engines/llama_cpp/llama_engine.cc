#include "engines/llama_cpp/llama_engine.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>

namespace kvstash::llama_cpp {
namespace {

ggml_log_level g_min_level = GGML_LOG_LEVEL_WARN;

void LogFilter(ggml_log_level level, const char* text, void*) {
  // GGML_LOG_LEVEL_CONT continues the previous line: keep it only when errors are kept.
  if (level == GGML_LOG_LEVEL_CONT) level = GGML_LOG_LEVEL_ERROR;
  if (level >= g_min_level) fputs(text, stderr);
}

// A metadata integer of the model, or -1 when absent.
int64_t MetaInt(const llama_model* model, const std::string& key) {
  char buf[64] = {};
  if (llama_model_meta_val_str(model, key.c_str(), buf, sizeof(buf)) <= 0) return -1;
  char* end = nullptr;
  const long long v = std::strtoll(buf, &end, 10);
  return (end != buf && *end == '\0') ? v : -1;
}

std::string MetaStr(const llama_model* model, const char* key) {
  char buf[128] = {};
  if (llama_model_meta_val_str(model, key, buf, sizeof(buf)) <= 0) return "";
  return buf;
}

Result<DType> DTypeOfGgml(ggml_type t, const char* which) {
  if (t == GGML_TYPE_F16) return DType::kF16;
  if (t == GGML_TYPE_BF16) return DType::kBF16;
  return Status::NotSupported(std::string(which) + " cache type " + ggml_type_name(t) +
                              ": kvstash stores f16 or bf16 KV");
}

}  // namespace

void InitLlamaBackend(ggml_log_level min_level) {
  static std::once_flag once;
  g_min_level = min_level;
  std::call_once(once, [] {
    llama_log_set(LogFilter, nullptr);
    llama_backend_init();
  });
}

Result<ModelPtr> LoadModel(const std::string& gguf_path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(gguf_path, ec)) {
    return Status::NotFound("GGUF file not found: " + gguf_path);
  }
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  ModelPtr m(llama_model_load_from_file(gguf_path.c_str(), mp));
  if (!m) return Status::InvalidArgument("llama.cpp cannot load " + gguf_path);
  return m;
}

Result<llama_context_params> ContextParams(uint32_t n_ctx, int n_threads, bool flash_attn,
                                           DType kv_dtype) {
  if (n_ctx == 0) return Status::InvalidArgument("n_ctx must be > 0");
  llama_context_params p = llama_context_default_params();
  p.n_ctx = n_ctx;
  p.n_batch = n_ctx;
  p.n_ubatch = n_ctx;
  p.n_seq_max = 1;
  p.n_threads = std::max(1, n_threads);
  p.n_threads_batch = std::max(1, n_threads);
  p.flash_attn_type = flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  switch (kv_dtype) {
    case DType::kF16: p.type_k = p.type_v = GGML_TYPE_F16; break;
    case DType::kBF16: p.type_k = p.type_v = GGML_TYPE_BF16; break;
    default:
      return Status::InvalidArgument("llama.cpp KV dtype must be f16 or bf16, got " +
                                     std::string(DTypeName(kv_dtype)));
  }
  p.no_perf = true;
  return p;
}

Result<ContextPtr> NewContext(llama_model* model, const llama_context_params& params) {
  ContextPtr c(llama_init_from_model(model, params));
  if (!c) return Status::InvalidArgument("llama.cpp refused the context parameters");
  return c;
}

Result<StateLayout> StateLayoutOf(const llama_model* model, const llama_context_params& params) {
  if (llama_model_is_recurrent(model) || llama_model_is_hybrid(model)) {
    return Status::NotSupported("recurrent/hybrid models have no plain KV sequence state");
  }
  if (llama_model_n_swa(model) > 0) {
    return Status::NotSupported("sliding-window attention models write a two-cache state");
  }
  const llama_rope_type rope = llama_model_rope_type(model);
  if (rope == LLAMA_ROPE_TYPE_MROPE || rope == LLAMA_ROPE_TYPE_IMROPE ||
      rope == LLAMA_ROPE_TYPE_VISION) {
    return Status::NotSupported("M-RoPE/vision models write cell extension records");
  }
  if (params.flash_attn_type == LLAMA_FLASH_ATTN_TYPE_AUTO) {
    return Status::NotSupported(
        "flash_attn_type AUTO: set ENABLED or DISABLED (it decides whether V is stored "
        "transposed, and llama.cpp does not report the choice)");
  }
  if (params.type_k != params.type_v) {
    return Status::NotSupported("type_k and type_v differ");
  }
  KVSTASH_ASSIGN_OR_RETURN(const DType dtype, DTypeOfGgml(params.type_k, "K"));
  const int32_t n_layer = llama_model_n_layer(model);
  const int32_t n_head = llama_model_n_head(model);
  const int32_t n_head_kv = llama_model_n_head_kv(model);
  const int32_t n_embd = llama_model_n_embd(model);
  if (n_layer <= 0 || n_head <= 0 || n_head_kv <= 0 || n_embd <= 0 || n_embd % n_head != 0) {
    return Status::NotSupported("model reports no usable attention shape");
  }
  const std::string arch = MetaStr(model, "general.architecture");
  int64_t k_dim = MetaInt(model, arch + ".attention.key_length");
  int64_t v_dim = MetaInt(model, arch + ".attention.value_length");
  if (k_dim < 0) k_dim = n_embd / n_head;
  if (v_dim < 0) v_dim = k_dim;
  if (k_dim != v_dim) return Status::NotSupported("K and V head sizes differ");
  StateLayout layout;
  layout.kv = {static_cast<uint32_t>(n_layer), static_cast<uint32_t>(n_head_kv),
               static_cast<uint32_t>(k_dim), dtype};
  layout.v_trans = params.flash_attn_type == LLAMA_FLASH_ATTN_TYPE_DISABLED;
  // Llama-family GGUFs carry q/k permuted for adjacent-pair RoPE (llama_state.h).
  layout.k_rope_interleaved = rope == LLAMA_ROPE_TYPE_NORM;
  KVSTASH_RETURN_IF_ERROR(layout.Validate());
  return layout;
}

Result<std::vector<llama_token>> Tokenize(const llama_model* model, const std::string& text) {
  const llama_vocab* vocab = llama_model_get_vocab(model);
  std::vector<llama_token> out(text.size() + 8);
  int32_t n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), out.data(),
                             static_cast<int32_t>(out.size()), false, true);
  if (n < 0) {
    out.resize(static_cast<size_t>(-static_cast<int64_t>(n)));
    n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), out.data(),
                       static_cast<int32_t>(out.size()), false, true);
  }
  if (n < 0) return Status::InvalidArgument("llama_tokenize failed");
  out.resize(static_cast<size_t>(n));
  return out;
}

Result<std::vector<float>> Evaluate(llama_context* ctx, std::span<const llama_token> tokens,
                                    llama_pos pos0, llama_seq_id seq) {
  if (tokens.empty()) return Status::InvalidArgument("no tokens to evaluate");
  const uint32_t n_batch = std::max<uint32_t>(1, llama_n_batch(ctx));
  llama_batch batch = llama_batch_init(static_cast<int32_t>(n_batch), 0, 1);
  Status st;
  for (size_t i0 = 0; i0 < tokens.size() && st.ok(); i0 += n_batch) {
    const size_t n = std::min<size_t>(n_batch, tokens.size() - i0);
    batch.n_tokens = static_cast<int32_t>(n);
    for (size_t i = 0; i < n; ++i) {
      batch.token[i] = tokens[i0 + i];
      batch.pos[i] = pos0 + static_cast<llama_pos>(i0 + i);
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = seq;
      batch.logits[i] = (i0 + i + 1 == tokens.size()) ? 1 : 0;
    }
    const int32_t rc = llama_decode(ctx, batch);
    if (rc != 0) {
      st = Status::Unavailable("llama_decode returned " + std::to_string(rc) +
                               (rc == 1 ? " (no KV slot: context too small)" : ""));
    }
  }
  llama_batch_free(batch);
  KVSTASH_RETURN_IF_ERROR(st);
  const float* logits = llama_get_logits_ith(ctx, -1);
  if (logits == nullptr) return Status::Internal("llama.cpp returned no logits");
  const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
  return std::vector<float>(logits, logits + n_vocab);
}

Result<std::vector<uint8_t>> ExportSeqState(llama_context* ctx, llama_seq_id seq) {
  const size_t size = llama_state_seq_get_size(ctx, seq);
  if (size == 0) return Status::Internal("llama_state_seq_get_size returned 0");
  std::vector<uint8_t> out(size);
  const size_t n = llama_state_seq_get_data(ctx, out.data(), out.size(), seq);
  if (n != size) {
    return Status::Internal("llama_state_seq_get_data wrote " + std::to_string(n) +
                            " bytes of " + std::to_string(size));
  }
  return out;
}

Status ImportSeqState(llama_context* ctx, std::span<const uint8_t> state, uint32_t expect_tokens,
                      llama_seq_id seq) {
  llama_memory_t mem = llama_get_memory(ctx);
  llama_memory_seq_rm(mem, seq, -1, -1);
  const size_t n = llama_state_seq_set_data(ctx, state.data(), state.size(), seq);
  Status st;
  if (n == 0) {
    st = Status::Corruption("llama_state_seq_set_data refused the state");
  } else if (n != state.size()) {
    st = Status::Corruption("llama_state_seq_set_data read " + std::to_string(n) + " of " +
                            std::to_string(state.size()) + " bytes");
  } else if (llama_memory_seq_pos_min(mem, seq) != 0 ||
             llama_memory_seq_pos_max(mem, seq) != static_cast<llama_pos>(expect_tokens) - 1) {
    st = Status::Internal("imported sequence does not hold positions 0.." +
                          std::to_string(expect_tokens - 1));
  }
  if (!st.ok()) llama_memory_seq_rm(mem, seq, -1, -1);
  return st;
}

}  // namespace kvstash::llama_cpp
