#include "common/default_paths.h"

#include <cstdlib>

namespace kvstash {

std::string ModelsDir() {
  if (const char* dir = std::getenv("KVSTASH_MODELS_DIR"); dir != nullptr && *dir != '\0')
    return dir;
  return std::string(KVSTASH_SOURCE_DIR) + "/models";
}

std::string DefaultModelPath() { return ModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf"; }

std::string DefaultArtifactDir() { return ModelsDir() + "/artifacts"; }

std::string DefaultDckvSensitivityFile() {
  return std::string(KVSTASH_SOURCE_DIR) + "/benchmarks/inputs/smollm2-135m-dckv-fisher.json";
}

std::string DefaultRwkv7ModelPath() {
  const char* env = std::getenv("KVSTASH_SHARED_MODELS_DIR");
  const std::string dir =
      (env != nullptr && *env != '\0') ? env : std::string(KVSTASH_SOURCE_DIR) + "/../shared/models";
  return dir + "/tiny-rwkv-7v0-834K-FP32.bin";
}

std::string DefaultBf16SamplePath() {
  return std::string(KVSTASH_SOURCE_DIR) + "/benchmarks/data/smollm2_token_embd_bf16.bin";
}

std::string DefaultHybridModelDir() {
  return std::string(KVSTASH_SOURCE_DIR) + "/tests/model/hybrid/data/tiny_qwen35";
}

}  // namespace kvstash
