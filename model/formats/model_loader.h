// Loading a Model from a file, whatever its format.
//
// LoadModel(path) picks the format from the content:
//   - GGUF (magic "GGUF"): architectures "llama", "qwen2" and "qwen3"; tensors F32,
//     F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (dequantised to fp32);
//     tokenizer from tokenizer.ggml.* ("gpt2" byte-level BPE or "llama" SentencePiece).
//   - a directory, or a *.safetensors file whose directory holds config.json:
//     Hugging Face LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM (F32, F16,
//     BF16 tensors).
//     No tokenizer (pass one with LoadTokenizer).
//   - anything else is tried as a llama2.c checkpoint (model/formats/llama2c_loader.cc); its
//     tokenizer is read from `tokenizer_path` if given.
// Errors: IOError for unreadable files; Corruption for malformed files;
// NotSupported for a valid file of an architecture, dtype or tokenizer we do not
// run; InvalidArgument for inconsistent hyper-parameters. Never crashes on bad input.
//
// Thread-safety: loading functions are re-entrant.
#pragma once

#include <memory>
#include <string>

#include "kvstash/result.h"
#include "model/forward/model.h"

namespace kvstash::model {

struct LoadOptions {
  std::string tokenizer_path;  // llama2.c tokenizer.bin or a GGUF to take the tokenizer from. Default: none.
};

Result<std::unique_ptr<Model>> LoadModel(const std::string& path, const LoadOptions& options = {});

// Format-specific loaders (LoadModel dispatches to these).
Result<std::unique_ptr<Model>> LoadGgufModel(const std::string& path);
Result<std::unique_ptr<Model>> LoadSafetensorsModel(const std::string& dir_or_file);
Result<std::unique_ptr<Model>> LoadLlama2cModel(const std::string& path);

// A tokenizer from a GGUF file's metadata (NotFound if it has none) or a llama2.c
// tokenizer.bin (vocab_size entries).
Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path, uint32_t vocab_size);

}  // namespace kvstash::model
