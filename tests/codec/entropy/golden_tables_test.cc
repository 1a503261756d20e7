// Rebuilds every table of data/golden_tables.json (written by the independent Python
// mirror data/gen_golden_tables.py) and requires bit-identical frequencies: the
// table builder gives the same output on every machine and matches its spec.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "codec/entropy/pmf.h"
#include "codec/entropy/table_builder.h"
#include "tests/support/test_util.h"

namespace kvstash::entropy {
namespace {

// Mirrors histogram_counts() of gen_golden_tables.py.
std::vector<uint64_t> HistogramCounts(int bits) {
  std::vector<uint64_t> c(size_t{1} << bits);
  for (uint64_t v = 0; v < c.size(); ++v) {
    c[v] = v % 5 == 3 ? 0 : (uint64_t{1000000} >> std::min<uint64_t>(20, v / 3)) + v % 7;
  }
  return c;
}

Result<std::vector<double>> PmfOf(const nlohmann::json& s) {
  const int bits = s["symbol_bits"];
  const std::string kind = s["kind"];
  if (kind == "histogram") return HistogramPmf(HistogramCounts(bits));
  const SymbolMapping mapping =
      s["mapping"] == "twos" ? SymbolMapping::kTwosComplement : SymbolMapping::kUnsigned;
  if (kind == "laplace") return LaplacePmf(bits, mapping, s["mu"], s["scale"]);
  if (kind == "gaussian") return GaussianPmf(bits, mapping, s["mu"], s["scale"]);
  std::vector<GaussianComponent> comps;
  for (const auto& c : s["components"]) comps.push_back({c[0], c[1], c[2]});
  KVSTASH_ASSIGN_OR_RETURN(auto core, GaussianMixturePmf(bits, mapping, comps));
  KVSTASH_ASSIGN_OR_RETURN(auto marginal, HistogramPmf(HistogramCounts(bits)));
  return MixPmfs(core, 1.0, marginal, s["histogram_weight"]);
}

TEST(GoldenTables, BuilderMatchesCommittedTables) {
  std::ifstream f(kvstash::testing::SourceDir() + "/tests/codec/entropy/data/golden_tables.json");
  ASSERT_TRUE(f.good()) << "missing tests/codec/entropy/data/golden_tables.json";
  const nlohmann::json doc = nlohmann::json::parse(f);
  ASSERT_GE(doc["tables"].size(), 30u);
  for (const auto& s : doc["tables"]) {
    SCOPED_TRACE(s.dump().substr(0, 160));
    ASSERT_OK_AND_ASSIGN(auto pmf, PmfOf(s));
    ASSERT_OK_AND_ASSIGN(FrequencyTable t, BuildTable(pmf, {.precision = s["precision"]}));
    const auto& g = s["table"];
    EXPECT_EQ(t.precision(), g["precision"].get<int>());
    EXPECT_EQ(t.symbol_bits(), g["symbol_bits"].get<int>());
    EXPECT_EQ(t.first_symbol(), g["first"].get<uint32_t>());
    EXPECT_EQ(t.escape_freq(), g["escape"].get<uint32_t>());
    EXPECT_EQ(t.freqs(), g["freqs"].get<std::vector<uint32_t>>());
  }
}

}  // namespace
}  // namespace kvstash::entropy
