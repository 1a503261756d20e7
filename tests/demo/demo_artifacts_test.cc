// The demo's dckv artifact cache key (demo/demo_artifacts.h, DckvArtifactKeyText): the
// reference demo's fitting keeps the v1 text (its cached artifacts stay valid), and
// each change of the fitting (the engine's rows and their dtype, the conditional
// models, the weights file's bytes) gives another key, so a stale cached artifact is
// never loaded for another fitting.
#include "demo/demo_artifacts.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "tests/support/test_util.h"

namespace kvstash::demo {
namespace {

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

TEST(DemoArtifacts, DckvKeyNamesTheFitting) {
  Digest256 fp{};
  fp[0] = 0xab;
  DemoArtifactOptions o;
  ASSERT_OK_AND_ASSIGN(const std::string v1, DckvArtifactKeyText(fp, o));
  EXPECT_EQ(v1.rfind("kvstash-demo-artifact-v1|model=ab00", 0), 0u) << v1;
  EXPECT_NE(v1.find("|cal_tokens=2048|cal_doc_tokens=1024|chunk=256|files="), std::string::npos) << v1;
  EXPECT_TRUE(EndsWith(v1, "|dckv|rate=16|group=6|head=4|tail=128")) << v1;

  o.engine_name = "llama.cpp-0.3.36-fa-off";
  o.kv_dtype = DType::kF16;
  ASSERT_OK_AND_ASSIGN(const std::string same, DckvArtifactKeyText(fp, o));
  EXPECT_EQ(same, v1);  // the engine's name and dtype only count with its rows
  o.dckv_engine_rows = true;
  ASSERT_OK_AND_ASSIGN(const std::string rows_f16, DckvArtifactKeyText(fp, o));
  EXPECT_EQ(rows_f16, v1 + "|rows=llama.cpp-0.3.36-fa-off-f16-unrope-v1");
  o.kv_dtype = DType::kBF16;
  ASSERT_OK_AND_ASSIGN(const std::string rows_bf16, DckvArtifactKeyText(fp, o));
  EXPECT_EQ(rows_bf16, v1 + "|rows=llama.cpp-0.3.36-fa-off-bf16-unrope-v1");
  o.dckv_conditional = true;
  ASSERT_OK_AND_ASSIGN(const std::string cond, DckvArtifactKeyText(fp, o));
  EXPECT_EQ(cond, rows_bf16 + "|conditional=embed128-checkerboard");

  // Weights: the key holds a hash of the bytes, so editing the file changes it.
  const auto dir = std::filesystem::temp_directory_path() / ("kvstash-demo-key-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "w.json").string();
  std::ofstream(file) << "{\"weight\": [1]}";
  o.dckv_weights_file = file;
  ASSERT_OK_AND_ASSIGN(const std::string w1, DckvArtifactKeyText(fp, o));
  EXPECT_EQ(w1.rfind(cond + "|weights=", 0), 0u) << w1;
  EXPECT_TRUE(EndsWith(w1, "|floor=0.01")) << w1;
  std::ofstream(file) << "{\"weight\": [2]}";
  ASSERT_OK_AND_ASSIGN(const std::string w2, DckvArtifactKeyText(fp, o));
  EXPECT_NE(w1, w2);
  EXPECT_EQ(w1.size(), w2.size());
  const std::set<std::string> keys{v1, rows_f16, rows_bf16, cond, w1, w2};
  EXPECT_EQ(keys.size(), 6u);
  // An unreadable weights file is an error, not a key without weights.
  o.dckv_weights_file = (dir / "absent.json").string();
  EXPECT_TRUE(DckvArtifactKeyText(fp, o).status().IsNotFound());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvstash::demo
