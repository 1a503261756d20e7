#include "codec/dckv/dckv_output_weights.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kvstash::dckv {

Result<OutputWeightsFile> ReadOutputWeights(const std::string& path) {
  std::error_code ec;
  std::ifstream f(path);
  if (!std::filesystem::is_regular_file(path, ec) || !f) {
    return Status::IOError("dckv output weights: cannot read " + path + " (not a readable regular file)");
  }
  std::stringstream text;
  text << f.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("dckv output weights: " + path + " is not valid JSON");
  if (!j.is_object() || !j.contains("weight") || !j["weight"].is_array()) {
    return Status::InvalidArgument("dckv output weights: " + path +
                                   " is not a weights file (a JSON object with a `weight` array)");
  }
  auto shape = [&](const char* key) -> uint32_t {
    if (!j.contains(key) || !j[key].is_number_unsigned()) return 0;
    const uint64_t v = j[key].get<uint64_t>();
    return v <= std::numeric_limits<uint32_t>::max() ? static_cast<uint32_t>(v) : 0;
  };
  OutputWeightsFile w{shape("n_layers"), shape("n_kv_heads"), shape("head_dim"), {}};
  if (w.n_layers == 0 || w.n_kv_heads == 0 || w.head_dim == 0 ||
      j["weight"].size() != 2ull * w.n_layers * w.n_kv_heads * w.head_dim) {
    return Status::InvalidArgument("dckv output weights: " + path +
                                   " needs n_layers, n_kv_heads, head_dim and 2 * n_layers * n_kv_heads * "
                                   "head_dim weights");
  }
  w.weight.reserve(j["weight"].size());
  for (const auto& x : j["weight"]) {
    if (!x.is_number() || !(x.get<double>() > 0) || !std::isnormal(x.get<double>())) {
      return Status::InvalidArgument("dckv output weights: " + path +
                                     " has a weight that is not a finite, normal number > 0");
    }
    w.weight.push_back(x.get<double>());
  }
  return w;
}

Status FloorOutputWeights(double floor, std::vector<double>* weight) {
  double mean = 0;
  for (double w : *weight) mean += w / static_cast<double>(weight->size());
  if (weight->empty() || !(mean > 0)) return Status::InvalidArgument("dckv output weights: no weight > 0");
  for (double& w : *weight) w = std::max(w, floor * mean);
  return Status::Ok();
}

}  // namespace kvstash::dckv
