// Default locations of the model fixtures and codec artifacts for `kvstash`
// subcommands, so that they work from any working directory, not only the
// repository root.
//
// ModelsDir(): $KVSTASH_MODELS_DIR when set, else <source tree>/models (the folder
// scripts/setup.sh fills; the source tree is the one the executable was built from).
// Thread-safety: reads the environment; call from the main thread.
#pragma once

#include <string>

namespace kvstash {

std::string ModelsDir();
// ModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf": the default model of the benches,
// the calibration commands and the demo.
std::string DefaultModelPath();
// ModelsDir() + "/artifacts": where calibrate writes and the benches look for codec
// artifacts.
std::string DefaultArtifactDir();
// <source tree>/benchmarks/inputs/smollm2-135m-dckv-fisher.json: the per-dimension
// dckv output weights of the default model (tools/dckv_output_fisher.py).
std::string DefaultDckvSensitivityFile();
// $KVSTASH_SHARED_MODELS_DIR (default <source tree>/../shared/models, the folder beside
// the project) + "/tiny-rwkv-7v0-834K-FP32.bin": the real RWKV-7 of the state benches.
std::string DefaultRwkv7ModelPath();
// <source tree>/benchmarks/data/smollm2_token_embd_bf16.bin: real bf16 values (SmolLM2's
// token embedding) of the entropy bench.
std::string DefaultBf16SamplePath();
// <source tree>/tests/model/hybrid/data/tiny_qwen35: the tiny random-weight Qwen3.5-style
// hybrid fixture (config.json + model.safetensors) of the hybrid demo.
std::string DefaultHybridModelDir();

}  // namespace kvstash
