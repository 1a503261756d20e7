// kvstash dashboard: polls /v1/stats once a second and feeds five Chart.js charts.
// After each update it writes a JSON summary into <pre id="status"> (chart point
// counts and the latest numbers) so a headless browser test can check that the
// charts render live data.
"use strict";

const kHistory = 120;  // points kept on the time charts
const kPollMs = 1000;

function fmtBytes(n) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return n.toFixed(i ? 1 : 0) + " " + units[i];
}

function lineChart(id, label, color) {
  return new Chart(document.getElementById(id), {
    type: "line",
    data: { labels: [], datasets: [{ label, data: [], borderColor: color, tension: 0.2, pointRadius: 0 }] },
    options: { animation: false, maintainAspectRatio: false, scales: { x: { ticks: { maxTicksLimit: 6 } } } },
  });
}

function barChart(id, datasets) {
  return new Chart(document.getElementById(id), {
    type: "bar",
    data: { labels: [], datasets: datasets.map(([label, color]) => ({ label, data: [], backgroundColor: color })) },
    options: { animation: false, maintainAspectRatio: false },
  });
}

const charts = {
  hitRate: lineChart("chart-hit-rate", "hit rate", "#1f77b4"),
  bytesSaved: lineChart("chart-bytes-saved", "bytes saved", "#2ca02c"),
  codecs: barChart("chart-codecs", [["ratio", "#ff7f0e"]]),
  tiers: barChart("chart-tiers", [["occupancy %", "#9467bd"]]),
  latency: barChart("chart-latency", [["p50", "#17becf"], ["p99", "#d62728"]]),
};

let previous = null;
let updates = 0;

function pushPoint(chart, label, value) {
  chart.data.labels.push(label);
  chart.data.datasets[0].data.push(value);
  if (chart.data.labels.length > kHistory) {
    chart.data.labels.shift();
    chart.data.datasets[0].data.shift();
  }
}

function update(s) {
  const now = new Date().toLocaleTimeString();
  document.getElementById("server-id").textContent = s.server_id;
  // Hit rate of the last interval when there were lookups in it, else cumulative.
  let hit = s.lookup.hit_rate;
  if (previous) {
    const dt = s.lookup.tokens_requested - previous.lookup.tokens_requested;
    if (dt > 0) hit = (s.lookup.tokens_hit - previous.lookup.tokens_hit) / dt;
  }
  pushPoint(charts.hitRate, now, hit);
  pushPoint(charts.bytesSaved, now, s.bytes_saved);

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
  for (const [name, c] of Object.entries(charts)) {
    points[name] = c.data.datasets.reduce((a, d) => a + d.data.length, 0);
  }
  document.getElementById("status").textContent = JSON.stringify({
    updates, points, hit_rate: hit, bytes_saved: s.bytes_saved, codecs,
    put_memory: s.memory.PUT.mean_request_bytes, state_stored: s.memory.PUT.state_bytes,
    tiers: charts.tiers.data.labels, latency_ops: ops,
    lookups: s.lookup.lookups, rendered: Object.values(charts).every((c) => c.canvas.width > 0),
  });
}

async function poll() {
  try {
    const r = await fetch("/v1/stats", { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    update(await r.json());
    document.getElementById("error").textContent = "";
  } catch (e) {
    document.getElementById("error").textContent = "(stats unavailable: " + e.message + ")";
  }
  setTimeout(poll, kPollMs);
}

poll();
