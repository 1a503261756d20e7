#include "client/cli/default_paths.h"

#include <cstdlib>

namespace kvstash::cli {

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

}  // namespace kvstash::cli
