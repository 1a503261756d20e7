#include "model/formats/model_loader.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/tokenizers/sentencepiece_tokenizer.h"

namespace kvstash::model {

Result<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::string& path);  // gguf_model_loader.cc

namespace {

bool HasGgufMagic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char m[4] = {};
  return in.read(m, 4) && std::memcmp(m, "GGUF", 4) == 0;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path, uint32_t vocab_size) {
  if (HasGgufMagic(path)) return LoadGgufTokenizer(path);
  KVSTASH_ASSIGN_OR_RETURN(auto t, SentencePieceTokenizer::FromLlama2cFile(path, vocab_size));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

Result<std::unique_ptr<Model>> LoadModel(const std::string& path, const LoadOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::IOError("model file " + path + " does not exist");
  std::unique_ptr<Model> m;
  if (fs::is_directory(path, ec) || fs::path(path).extension() == ".safetensors") {
    KVSTASH_ASSIGN_OR_RETURN(m, LoadSafetensorsModel(path));
  } else if (HasGgufMagic(path)) {
    KVSTASH_ASSIGN_OR_RETURN(m, LoadGgufModel(path));
  } else {
    KVSTASH_ASSIGN_OR_RETURN(m, LoadLlama2cModel(path));
  }
  if (!options.tokenizer_path.empty()) {
    KVSTASH_ASSIGN_OR_RETURN(m->tokenizer, LoadTokenizer(options.tokenizer_path, m->config.vocab_size));
    KVSTASH_RETURN_IF_ERROR(m->Validate());
  }
  return m;
}

}  // namespace kvstash::model
