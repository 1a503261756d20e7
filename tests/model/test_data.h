// Helpers of model_tests: reading committed golden JSON and comparing tensors.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/test_util.h"

namespace kvstash::model::testing {

inline std::string DataPath(const std::string& name) {
  return ::kvstash::testing::SourceDir() + "/tests/model/data/" + name;
}

inline nlohmann::json LoadJson(const std::string& name) {
  std::ifstream in(DataPath(name));
  EXPECT_TRUE(in.good()) << "missing golden file " << DataPath(name);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

inline std::vector<float> Floats(const nlohmann::json& j) { return j.get<std::vector<float>>(); }
inline std::vector<uint32_t> Ids(const nlohmann::json& j) { return j.get<std::vector<uint32_t>>(); }

struct ErrorStats {
  double max_abs = 0;  // max |a - b|
  double max_ref = 0;  // max |b|
  double rel() const { return max_ref > 0 ? max_abs / max_ref : max_abs; }
};

inline ErrorStats Compare(const float* a, const std::vector<float>& ref) {
  ErrorStats s;
  for (size_t i = 0; i < ref.size(); ++i) {
    s.max_abs = std::max(s.max_abs, std::abs(static_cast<double>(a[i]) - ref[i]));
    s.max_ref = std::max(s.max_ref, std::abs(static_cast<double>(ref[i])));
  }
  return s;
}

}  // namespace kvstash::model::testing
