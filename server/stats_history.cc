#include "server/stats_history.h"

#include <algorithm>

namespace kvstash::server {
namespace {

using nlohmann::json;

uint64_t U64(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return 0;
  return it->is_number_unsigned() ? it->get<uint64_t>() : static_cast<uint64_t>(std::max<int64_t>(0, it->get<int64_t>()));
}

}  // namespace

StatsHistory::StatsHistory(size_t capacity, uint32_t interval_ms)
    : capacity_(capacity), interval_ms_(interval_ms) {}

void StatsHistory::Record(int64_t unix_ms, const json& stats) {
  json s = {{"t_ms", unix_ms}};
  // Copies, not references into temporaries (items() of a temporary dangles).
  const json empty = json::object();
  const json lookup = stats.value("lookup", empty);
  const json ops = stats.value("requests", empty);
  const json tier_rows = stats.value("tiers", json::array());
  const json tenant_rows = stats.value("tenants", empty);
  s["tokens_requested"] = U64(lookup, "tokens_requested");
  s["tokens_hit"] = U64(lookup, "tokens_hit");
  uint64_t requests = 0, errors = 0;
  for (const auto& [op, r] : ops.items()) {
    requests += U64(r, "count");
    errors += U64(r, "errors");
  }
  s["requests"] = requests;
  s["errors"] = errors;
  for (const char* k : {"bytes_raw", "bytes_stored", "bytes_saved"}) s[k] = U64(stats, k);
  json tiers = json::object();
  for (const json& t : tier_rows) {
    if (!t.value("enabled", false)) continue;
    tiers[t.value("name", "?")] = {{"bytes", U64(t, "bytes")},
                                   {"budget_bytes", U64(t, "budget_bytes")},
                                   {"entries", U64(t, "entries")}};
  }
  s["tiers"] = std::move(tiers);
  json tenants = json::object();
  for (const auto& [name, t] : tenant_rows.items()) {
    tenants[name] = {{"tokens_requested", U64(t, "tokens_requested")},
                     {"tokens_hit", U64(t, "tokens_hit")},
                     {"requests", U64(t, "requests")},
                     {"errors", U64(t, "errors")}};
  }
  s["tenants"] = std::move(tenants);

  MutexLock lock(mu_);
  samples_.push_back(std::move(s));
  while (samples_.size() > capacity_) samples_.pop_front();
}

json StatsHistory::Render() const {
  json samples = json::array();
  {
    MutexLock lock(mu_);
    for (const json& s : samples_) samples.push_back(s);
  }
  return {{"interval_ms", interval_ms_}, {"capacity", capacity_}, {"samples", std::move(samples)}};
}

size_t StatsHistory::size() const {
  MutexLock lock(mu_);
  return samples_.size();
}

}  // namespace kvstash::server
