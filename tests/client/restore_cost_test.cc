// RestoreCostModel: estimates and decisions checked against values derived by hand
// from the samples fed in.
#include "kvstash/restore_cost.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace kvstash {
namespace {

TEST(RestoreCostTest, UninformedDeclinesTheHit) {
  RestoreCostModel m;
  RestoreEstimate e = m.Estimate(1000);
  EXPECT_FALSE(e.informed);
  EXPECT_FALSE(e.take);
  m.ObservePrefill(1000, 1.0);  // a prefill rate, but no decode or encode rate yet
  e = m.Estimate(1000);
  EXPECT_FALSE(e.informed);
  EXPECT_FALSE(e.take);
  EXPECT_DOUBLE_EQ(e.recompute_s, 1.0);
  m.ObserveEncode(1000, 1000, 0.1);
  EXPECT_TRUE(m.Estimate(1000).take);
}

TEST(RestoreCostTest, RecomputeCountsItsOwnTokens) {
  RestoreCostModel m;
  m.ObservePrefill(1000, 1.0);            // 1 ms/token
  m.ObserveRestore(1000, 0, 0.0, 0.5);    // 0.5 ms/token
  RestoreEstimate e = m.Estimate(1000, 400);  // decode 1000 tokens to save 400
  EXPECT_DOUBLE_EQ(e.decode_s, 0.5);
  EXPECT_DOUBLE_EQ(e.recompute_s, 0.4);
  EXPECT_EQ(e.recompute_tokens, 400u);
  EXPECT_FALSE(e.take);
  EXPECT_TRUE(m.Estimate(1000, 600).take);
}

TEST(RestoreCostTest, EncodeStandsInForDecodeUntilALoadIsSeen) {
  RestoreCostOptions o;
  o.link_bytes_per_s = 1e9;
  RestoreCostModel m(o);
  m.ObservePrefill(1000, 1.0);            // 1 ms/token
  m.ObserveEncode(1000, 4'000'000, 3.0);  // 3 ms/token, 4000 bytes/token
  RestoreEstimate e = m.Estimate(500);
  EXPECT_TRUE(e.informed);
  EXPECT_TRUE(e.decode_from_encode);
  EXPECT_DOUBLE_EQ(e.decode_s, 1.5);
  EXPECT_DOUBLE_EQ(e.transfer_s, 500 * 4000 / 1e9);  // the assumed link
  EXPECT_DOUBLE_EQ(e.recompute_s, 0.5);
  EXPECT_FALSE(e.take);  // 1.502 s > 0.5 s

  // A measured load (0.2 ms/token decode; 2000 bytes/token, 2 MB in 4 ms) replaces
  // the proxy; bytes/token becomes the median of {4000, 2000} = 3000.
  m.ObserveRestore(1000, 2'000'000, 0.004, 0.2);
  e = m.Estimate(500);
  EXPECT_FALSE(e.decode_from_encode);
  EXPECT_DOUBLE_EQ(e.decode_s, 0.1);
  EXPECT_DOUBLE_EQ(e.transfer_s, 500 * 3000 * (0.004 / 2e6));
  EXPECT_DOUBLE_EQ(e.restore_s, e.decode_s + e.transfer_s);
  EXPECT_TRUE(e.take);  // 0.103 s < 0.5 s
}

TEST(RestoreCostTest, MediansOverTheWindow) {
  RestoreCostOptions o;
  o.window = 3;
  RestoreCostModel m(o);
  for (double s : {9.0, 1.0, 2.0, 3.0}) m.ObservePrefill(1000, s);  // 9.0 leaves the window
  const RestoreRates r = m.rates();
  EXPECT_EQ(r.prefill_samples, 3u);
  EXPECT_DOUBLE_EQ(r.prefill_s_per_token, 2.0 / 1000);
  m.ObservePrefill(1000, 4.0);  // window {2, 3, 4}: median 3
  EXPECT_DOUBLE_EQ(m.rates().prefill_s_per_token, 3.0 / 1000);
}

TEST(RestoreCostTest, IgnoresUnusableSamples) {
  RestoreCostModel m;
  m.ObservePrefill(10, 1.0);  // below min_prefill_tokens (64)
  m.ObservePrefill(0, 1.0);
  m.ObservePrefill(1000, -1.0);
  m.ObservePrefill(1000, std::numeric_limits<double>::quiet_NaN());
  m.ObserveEncode(0, 10, 1.0);
  m.ObserveRestore(100, 10, std::numeric_limits<double>::infinity(), 1.0);
  const RestoreRates r = m.rates();
  EXPECT_EQ(r.prefill_samples + r.encode_samples + r.decode_samples + r.link_samples, 0u);
}

TEST(RestoreCostTest, PolicyAlwaysStillEstimates) {
  RestoreCostOptions o;
  o.policy = RestoreCostOptions::Policy::kAlways;
  RestoreCostModel m(o);
  m.ObservePrefill(100, 0.1);
  m.ObserveEncode(100, 100, 1.0);
  const RestoreEstimate e = m.Estimate(100);
  EXPECT_TRUE(e.informed);
  EXPECT_GT(e.restore_s, e.recompute_s);
  EXPECT_TRUE(e.take);
}

TEST(RestoreCostTest, MarginScalesTheRestore) {
  RestoreCostOptions o;
  o.margin = 2.0;
  RestoreCostModel m(o);
  m.ObservePrefill(100, 1.0);
  m.ObserveRestore(100, 0, 0.0, 0.6);  // restore 0.6 s vs recompute 1.0 s
  EXPECT_FALSE(m.Estimate(100).take);  // 1.2 > 1.0
}

TEST(RestoreCostTest, PolicyNames) {
  RestoreCostOptions::Policy p;
  ASSERT_TRUE(ParseRestorePolicy("always", &p));
  EXPECT_EQ(p, RestoreCostOptions::Policy::kAlways);
  ASSERT_TRUE(ParseRestorePolicy("cost", &p));
  EXPECT_EQ(p, RestoreCostOptions::Policy::kCost);
  EXPECT_FALSE(ParseRestorePolicy("sometimes", &p));
  EXPECT_EQ(RestorePolicyName(RestoreCostOptions::Policy::kAlways), "always");
}

TEST(RestoreCostTest, ValidateRefusesEachBadField) {
  EXPECT_TRUE(ValidateRestoreCostOptions(RestoreCostOptions{}).ok());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto with = [](auto edit) {
    RestoreCostOptions o;
    edit(o);
    return ValidateRestoreCostOptions(o);
  };
  for (const Status& s : {with([](RestoreCostOptions& o) { o.window = 0; }),
                          with([](RestoreCostOptions& o) { o.margin = 0; }),
                          with([&](RestoreCostOptions& o) { o.margin = nan; }),
                          with([&](RestoreCostOptions& o) { o.link_bytes_per_s = -1; }),
                          with([&](RestoreCostOptions& o) { o.link_bytes_per_s = inf; }),
                          with([](RestoreCostOptions& o) { o.policy = static_cast<RestoreCostOptions::Policy>(7); })}) {
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.message();
  }
}

}  // namespace
}  // namespace kvstash
