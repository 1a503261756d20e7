// Per-dimension output weights of dckv (DckvFitOptions::output_weight,
// dckv_calibration.h) read from a JSON file of tools/dckv_output_fisher.py (the
// diagonal Fisher information of the next-token distributions with respect to the
// coded cache; benchmarks/inputs/smollm2-135m-dckv-fisher.json is SmolLM2-135M's).
//
// File: a JSON object with unsigned n_layers, n_kv_heads, head_dim and `weight`, an
// array of 2 * n_layers * n_kv_heads * head_dim finite, normal numbers > 0 in the order
// [n_layers, 2 (K before RoPE, V), n_kv_heads, head_dim] (the order output_weight takes).
// Errors: IOError when `path` is not a readable regular file; InvalidArgument for
// invalid JSON, a missing or malformed field, a wrong weight count or a weight that is
// not finite, normal and > 0. Messages name the file.
// Thread-safety: pure (reads the file once).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvstash/result.h"

namespace kvstash::dckv {

struct OutputWeightsFile {
  uint32_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
  std::vector<double> weight;  // [n_layers, 2, n_kv_heads, head_dim]
};

Result<OutputWeightsFile> ReadOutputWeights(const std::string& path);

// weight[i] raised to floor x their mean (a dimension whose noise barely moved the
// outputs keeps a small finite weight rather than a noisy near-zero one), as the
// calibration of `kvstash calibrate dckv` does. REQUIRES floor >= 0.
// Errors: InvalidArgument when the weights are empty or their mean is not > 0.
Status FloorOutputWeights(double floor, std::vector<double>* weight);

}  // namespace kvstash::dckv
