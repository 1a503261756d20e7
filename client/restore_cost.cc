#include "kvstash/restore_cost.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvstash {
namespace {

double Median(const std::deque<double>& samples) {
  if (samples.empty()) return 0;
  std::vector<double> v(samples.begin(), samples.end());
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool UsableTime(double s) { return std::isfinite(s) && s >= 0; }

}  // namespace

Status ValidateRestoreCostOptions(const RestoreCostOptions& options) {
  if (options.policy != RestoreCostOptions::Policy::kCost && options.policy != RestoreCostOptions::Policy::kAlways) {
    return Status::InvalidArgument("restore policy must be cost or always");
  }
  if (options.window == 0) return Status::InvalidArgument("restore cost window must be >= 1");
  if (!std::isfinite(options.link_bytes_per_s) || !(options.link_bytes_per_s > 0)) {
    return Status::InvalidArgument("restore cost link_bytes_per_s must be a finite number > 0");
  }
  if (!std::isfinite(options.margin) || !(options.margin > 0)) {
    return Status::InvalidArgument("restore cost margin must be a finite number > 0");
  }
  return Status::Ok();
}

std::string_view RestorePolicyName(RestoreCostOptions::Policy policy) {
  return policy == RestoreCostOptions::Policy::kAlways ? "always" : "cost";
}

bool ParseRestorePolicy(std::string_view name, RestoreCostOptions::Policy* out) {
  if (name == "cost") {
    *out = RestoreCostOptions::Policy::kCost;
  } else if (name == "always") {
    *out = RestoreCostOptions::Policy::kAlways;
  } else {
    return false;
  }
  return true;
}

RestoreCostModel::RestoreCostModel(RestoreCostOptions options) : options_(options) {}

void RestoreCostModel::Push(std::deque<double>* samples, double value) {
  samples->push_back(value);
  while (samples->size() > std::max<uint32_t>(options_.window, 1)) samples->pop_front();
}

void RestoreCostModel::ObservePrefill(uint64_t tokens, double seconds) {
  if (tokens == 0 || tokens < options_.min_prefill_tokens || !UsableTime(seconds)) return;
  std::lock_guard<std::mutex> lock(mu_);
  Push(&prefill_, seconds / static_cast<double>(tokens));
}

void RestoreCostModel::ObserveRestore(uint64_t tokens, uint64_t bytes, double transfer_s, double decode_s) {
  if (tokens == 0 || !UsableTime(transfer_s) || !UsableTime(decode_s)) return;
  std::lock_guard<std::mutex> lock(mu_);
  Push(&decode_, decode_s / static_cast<double>(tokens));
  if (bytes > 0) {
    Push(&link_, transfer_s / static_cast<double>(bytes));
    Push(&bytes_per_token_, static_cast<double>(bytes) / static_cast<double>(tokens));
  }
}

void RestoreCostModel::ObserveEncode(uint64_t tokens, uint64_t bytes, double seconds) {
  if (tokens == 0 || !UsableTime(seconds)) return;
  std::lock_guard<std::mutex> lock(mu_);
  Push(&encode_, seconds / static_cast<double>(tokens));
  if (bytes > 0) Push(&bytes_per_token_, static_cast<double>(bytes) / static_cast<double>(tokens));
}

RestoreRates RestoreCostModel::rates() const {
  std::lock_guard<std::mutex> lock(mu_);
  RestoreRates r;
  r.prefill_s_per_token = Median(prefill_);
  r.decode_s_per_token = Median(decode_);
  r.encode_s_per_token = Median(encode_);
  r.link_s_per_byte = Median(link_);
  r.bytes_per_token = Median(bytes_per_token_);
  r.prefill_samples = static_cast<uint32_t>(prefill_.size());
  r.decode_samples = static_cast<uint32_t>(decode_.size());
  r.encode_samples = static_cast<uint32_t>(encode_.size());
  r.link_samples = static_cast<uint32_t>(link_.size());
  return r;
}

RestoreEstimate RestoreCostModel::Estimate(uint64_t restore_tokens, uint64_t recompute_tokens) const {
  const RestoreRates r = rates();
  RestoreEstimate e;
  e.tokens = restore_tokens;
  e.recompute_tokens = recompute_tokens;
  const double n = static_cast<double>(restore_tokens);
  const double link_s_per_byte =
      r.link_samples > 0 ? r.link_s_per_byte : 1.0 / std::max(options_.link_bytes_per_s, 1.0);
  e.decode_from_encode = r.decode_samples == 0 && r.encode_samples > 0;
  const double decode_rate = r.decode_samples > 0 ? r.decode_s_per_token : r.encode_s_per_token;
  e.transfer_s = n * r.bytes_per_token * link_s_per_byte;
  e.decode_s = n * decode_rate;
  e.restore_s = e.transfer_s + e.decode_s;
  e.recompute_s = static_cast<double>(recompute_tokens) * r.prefill_s_per_token;
  e.informed = r.prefill_samples > 0 && (r.decode_samples > 0 || r.encode_samples > 0);
  e.take = options_.policy == RestoreCostOptions::Policy::kAlways ||
           (e.informed && e.restore_s * options_.margin < e.recompute_s);
  return e;
}

}  // namespace kvstash
