// kvstash dashboard. At load it fetches the server's own history (/v1/history: one
// sample every history_interval_ms, the last hour by default) so the time charts start
// with what happened before the page opened; then it polls /v1/stats once a second
// and feeds six Chart.js charts. After each update it writes a JSON summary into
// <pre id="status"> (chart point counts, axis ranges and the latest numbers) so a
// headless browser test can check that the charts render live data.
"use strict";

const kHistory = 720;  // points kept on the time charts (the server's default history)
const kPollMs = 1000;
const kTenantColors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];

function fmtBytes(n) {
  const units = ["B", "KB", "MB", "GB", "TB", "PB"];
  let i = 0;
  while (Math.abs(n) >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return n.toFixed(i ? 1 : 0) + " " + units[i];
}

function fmtMicros(us) {
  if (us >= 1e6) return (us / 1e6).toFixed(us >= 1e7 ? 0 : 1) + " s";
  if (us >= 1e3) return (us / 1e3).toFixed(us >= 1e4 ? 0 : 1) + " ms";
  return us.toFixed(0) + " µs";
}

// A time chart; `y` is its value axis (Chart.js scale options).
function lineChart(id, datasets, y) {
  return new Chart(document.getElementById(id), {
    type: "line",
    data: {
      labels: [],
      datasets: datasets.map(([label, color]) => ({ label, data: [], borderColor: color, tension: 0.2, pointRadius: 0 })),
    },
    options: { animation: false, maintainAspectRatio: false, spanGaps: true,
               scales: { x: { ticks: { maxTicksLimit: 6 } }, y } },
  });
}

function barChart(id, datasets, y) {
  return new Chart(document.getElementById(id), {
    type: "bar",
    data: { labels: [], datasets: datasets.map(([label, color]) => ({ label, data: [], backgroundColor: color })) },
    options: { animation: false, maintainAspectRatio: false, scales: { y } },
  });
}

const kRateAxis = { min: 0, max: 1, title: { display: true, text: "tokens hit / tokens looked up" } };
const charts = {
  hitRate: lineChart("chart-hit-rate", [["hit rate", "#1f77b4"]], kRateAxis),
  tenantHitRate: lineChart("chart-tenant-hit-rate", [], kRateAxis),
  bytesSaved: lineChart("chart-bytes-saved", [["bytes saved", "#2ca02c"]],
                        { min: 0, ticks: { precision: 0, callback: (v) => fmtBytes(v) } }),
  codecs: barChart("chart-codecs", [["ratio", "#ff7f0e"]], { min: 0, title: { display: true, text: "raw / stored" } }),
  tiers: barChart("chart-tiers", [["occupancy %", "#9467bd"]], { min: 0, max: 100, ticks: { callback: (v) => v + " %" } }),
  latency: barChart("chart-latency", [["p50", "#17becf"], ["p99", "#d62728"]],
                    { type: "logarithmic", min: 1, ticks: { callback: (v) => fmtMicros(v) } }),
};

// Appends one time point: `values[i]` to dataset i (datasets absent from `values` get
// a gap), dropping the oldest beyond kHistory.
function pushPoint(chart, label, values) {
  chart.data.labels.push(label);
  chart.data.datasets.forEach((d, i) => d.data.push(i < values.length ? values[i] : null));
  if (chart.data.labels.length > kHistory) {
    chart.data.labels.shift();
    for (const d of chart.data.datasets) d.data.shift();
  }
}

// Hit rate between two cumulative counts (interval rate when the interval had lookups,
// else the cumulative rate; null before any lookup).
function hitRate(requested, hit, prevRequested, prevHit) {
  if (prevRequested !== undefined && requested > prevRequested) return (hit - prevHit) / (requested - prevRequested);
  return requested > 0 ? hit / requested : null;
}

// The per-tenant chart's dataset of `name`, made on first sight.
function tenantDataset(name) {
  const c = charts.tenantHitRate;
  let d = c.data.datasets.find((x) => x.label === name);
  if (!d) {
    const color = kTenantColors[c.data.datasets.length % kTenantColors.length];
    d = { label: name, data: c.data.labels.map(() => null), borderColor: color, tension: 0.2, pointRadius: 0 };
    c.data.datasets.push(d);
  }
  return d;
}

// One point on the three time charts from a sample `cur` and the one before it (`prev`,
// may be null). Both carry tokens_requested/tokens_hit, bytes_saved and tenants{name:
// {tokens_requested, tokens_hit}}, as /v1/history samples do.
function pushTimePoint(label, cur, prev) {
  const hit = hitRate(cur.tokens_requested, cur.tokens_hit, prev?.tokens_requested, prev?.tokens_hit);
  pushPoint(charts.hitRate, label, [hit]);
  pushPoint(charts.bytesSaved, label, [cur.bytes_saved]);
  const names = Object.keys(cur.tenants || {});
  names.forEach(tenantDataset);
  const values = charts.tenantHitRate.data.datasets.map((d) => {
    const t = cur.tenants?.[d.label], p = prev?.tenants?.[d.label];
    return t ? hitRate(t.tokens_requested, t.tokens_hit, p?.tokens_requested, p?.tokens_hit) : null;
  });
  pushPoint(charts.tenantHitRate, label, values);
  return hit;
}

// /v1/stats reduced to the fields of a history sample.
function sampleOf(s) {
  const tenants = {};
  for (const [name, t] of Object.entries(s.tenants || {})) {
    tenants[name] = { tokens_requested: t.tokens_requested, tokens_hit: t.tokens_hit };
  }
  return { tokens_requested: s.lookup.tokens_requested, tokens_hit: s.lookup.tokens_hit,
           bytes_saved: s.bytes_saved, tenants };
}

let previous = null;        // last /v1/stats document
let previousSample = null;  // last point's sample (history or live)
let updates = 0;
let historyPoints = 0;

function timeLabel(ms) { return new Date(ms).toLocaleTimeString(); }

function loadHistory(h) {
  for (const s of h.samples) {
    pushTimePoint(timeLabel(s.t_ms), s, previousSample);
    previousSample = s;
    historyPoints++;
  }
}

function update(s) {
  document.getElementById("server-id").textContent = s.server_id;
  const sample = sampleOf(s);
  let hit = pushTimePoint(timeLabel(Date.now()), sample, previousSample);
  previousSample = sample;
  if (hit === null) hit = 0;

  const codecs = Object.keys(s.codecs);
  charts.codecs.data.labels = codecs;
  charts.codecs.data.datasets[0].data = codecs.map((c) => s.codecs[c].ratio);

  const tiers = s.tiers.filter((t) => t.enabled);
  charts.tiers.data.labels = tiers.map((t) => t.name);
  charts.tiers.data.datasets[0].data = tiers.map((t) => (t.budget_bytes ? (100 * t.bytes) / t.budget_bytes : 0));

  const ops = Object.keys(s.requests).filter((op) => s.requests[op].count > 0);
  charts.latency.data.labels = ops;
  charts.latency.data.datasets[0].data = ops.map((op) => s.requests[op].p50_us);
  charts.latency.data.datasets[1].data = ops.map((op) => s.requests[op].p99_us);

  let reqRate = 0;
  const total = (x) => Object.values(x.requests).reduce((a, r) => a + r.count, 0);
  if (previous) reqRate = (total(s) - total(previous)) / Math.max(1e-3, s.uptime_s - previous.uptime_s);
  document.getElementById("hit-rate").textContent = hit.toFixed(3);
  document.getElementById("req-rate").textContent = reqRate.toFixed(1);
  document.getElementById("bytes-saved").textContent = fmtBytes(s.bytes_saved);
  document.getElementById("connections").textContent = s.connections.open;
  document.getElementById("checksum-failures").textContent = s.checksum_failures;
  // Request memory (docs/protocol.md §5.7): mean payload + state per stored PUT.
  document.getElementById("put-memory").textContent = fmtBytes(s.memory.PUT.mean_request_bytes);
  document.getElementById("state-stored").textContent = fmtBytes(s.memory.PUT.state_bytes);

  for (const c of Object.values(charts)) c.update();
  previous = s;
  updates++;
  const points = {};
  const axes = {};
  for (const [name, c] of Object.entries(charts)) {
    points[name] = c.data.datasets.reduce((a, d) => a + d.data.filter((v) => v !== null).length, 0);
    axes[name] = { min: c.scales.y.min, max: c.scales.y.max, type: c.scales.y.type };
  }
  const tenantRates = {};
  for (const [name, t] of Object.entries(s.tenants || {})) tenantRates[name] = t.hit_rate;
  document.getElementById("status").textContent = JSON.stringify({
    updates, points, axes, history_points: historyPoints, hit_rate: hit, bytes_saved: s.bytes_saved, codecs,
    put_memory: s.memory.PUT.mean_request_bytes, state_stored: s.memory.PUT.state_bytes,
    tiers: charts.tiers.data.labels, latency_ops: ops, tenants: charts.tenantHitRate.data.datasets.map((d) => d.label),
    tenant_hit_rates: tenantRates, bytes_saved_tick: charts.bytesSaved.scales.y.ticks[0]?.label,
    lookups: s.lookup.lookups, rendered: Object.values(charts).every((c) => c.canvas.width > 0),
  });
}

async function fetchJson(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

async function poll() {
  try {
    update(await fetchJson("/v1/stats"));
    document.getElementById("error").textContent = "";
  } catch (e) {
    document.getElementById("error").textContent = "(stats unavailable: " + e.message + ")";
  }
  setTimeout(poll, kPollMs);
}

async function start() {
  try {
    loadHistory(await fetchJson("/v1/history"));
  } catch (e) {
    document.getElementById("error").textContent = "(no history: " + e.message + ")";
  }
  poll();
}

start();
