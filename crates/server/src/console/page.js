// The sluice console: reads /api/console every two seconds and draws it.
// Everything is built with DOM calls and textContent, never HTML strings:
// keys and rule names come from traffic and config.
"use strict";

const REFRESH_MS = 2000;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) {
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function setText(id, text) {
  document.getElementById(id).textContent = text;
}

function duration(s) {
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  return d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : `${m}m ${s % 60}s`;
}

function clock(unix) {
  return new Date(unix * 1000).toLocaleTimeString();
}

// A sparkline of requests (grey) and over-limit (red) per second.
function spark(requests, over) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 180 28");
  svg.setAttribute("preserveAspectRatio", "none");
  const max = Math.max(1, ...requests, ...over);
  const line = (values, cls) => {
    const p = document.createElementNS(ns, "polyline");
    const step = 180 / Math.max(1, values.length - 1);
    p.setAttribute("points", values.map((v, i) => `${(i * step).toFixed(1)},${(27 - v / max * 26).toFixed(1)}`).join(" "));
    p.setAttribute("class", cls);
    return p;
  };
  svg.append(line(requests, "req"));
  if (over.some(v => v > 0)) svg.append(line(over, "over"));
  return svg;
}

function last(values, n) {
  const tail = values.slice(-n);
  return tail.length ? tail.reduce((a, b) => a + b, 0) / tail.length : 0;
}

function drawRules(domains) {
  const root = document.getElementById("rules");
  root.replaceChildren();
  for (const d of domains) {
    root.append(el("div", { class: "domain" }, `domain ${d.domain}`));
    if (!d.complete) {
      // A big domain (a rule per customer): only rules with traffic lately.
      root.append(el("div", { class: "note" },
        `${d.rules.length} of ${d.rules_total} rules shown: those with traffic in the last 3 minutes, the busiest first`));
    }
    const body = el("tbody");
    for (const r of d.rules) {
      const req = r.rates.requests, over = r.rates.over_limit;
      const name = el("td", { class: "rule" }, r.rule);
      if (r.name) name.append(el("span", { class: "tag" }, r.name));
      if (r.shadow_mode) name.append(el("span", { class: "tag" }, "shadow"));
      if (r.count_after) name.append(el("span", { class: "tag", title: "answered on each instance's credit, counted in the store after: may pass its limit by up to instances x credit a window" }, "counts after"));
      const row = el("tr", { "data-rule": `${d.domain}/${r.rule}`, class: r.blocking ? "blocking" : "" },
        name,
        el("td", {}, r.limit, r.shape ? el("span", { class: "tag" }, r.shape) : ""),
        el("td", { class: "num" }, last(req, 5).toFixed(1)),
        el("td", { class: "num" }, last(r.rates.near_limit, 5).toFixed(1)),
        el("td", { class: "num over" }, last(over, 5).toFixed(1)),
        el("td", {}, spark(req, over)));
      body.append(row);
    }
    const head = el("thead", {}, el("tr", {},
      el("th", {}, "rule"), el("th", {}, "limit"), el("th", { class: "num" }, "req/s"),
      el("th", { class: "num" }, "near/s"), el("th", { class: "num" }, "over/s"), el("th", {}, "last 3 min")));
    root.append(el("table", {}, head, body));
  }
}

function drawEvents(id, events) {
  const list = document.getElementById(id);
  list.replaceChildren(...events.slice().reverse().map(e => el("li", {}, el("time", {}, clock(e.at)), e.what)));
}

function draw(doc) {
  const status = document.getElementById("status");
  status.textContent = doc.status;
  status.className = `badge ${doc.status}`;
  setText("store-in-use", doc.store.in_use);
  setText("version", doc.version);
  setText("uptime", duration(doc.uptime_seconds));
  setText("quota-streams", doc.quota.streams);
  setText("updated", clock(doc.now));
  const trip = doc.store.round_trip_ms == null ? "" :
    ` · round trip ${doc.store.round_trip_ms.toFixed(1)} ms · ${doc.store.renewals_ahead} renewals ahead` +
    (doc.store.credit_answered ? ` · ${doc.store.credit_answered} answered on credit` : "");
  setText("store-detail", (doc.store.detail || `${doc.store.backend}: healthy`) + trip);
  drawEvents("failovers", doc.store.history);
  drawRules(doc.domains);

  const top = document.querySelector("#top-keys tbody");
  top.replaceChildren(...doc.top_keys.keys.map(k => {
    // "domain rule: entries"
    const cut = k.key.indexOf(": ");
    const rule = cut < 0 ? "" : k.key.slice(0, cut);
    const entries = cut < 0 ? k.key : k.key.slice(cut + 2);
    return el("tr", {}, el("td", {}, rule), el("td", { class: "key" }, entries), el("td", { class: "num" }, k.over_limit));
  }));
  document.getElementById("top-empty").hidden = doc.top_keys.keys.length > 0;

  const c = doc.config;
  const dl = document.getElementById("config");
  const rows = [["source", c.source], ["from", c.location], ["generation", c.generation],
    ["loaded at", c.loaded_at ? clock(c.loaded_at) : "?"]];
  if (c.version) rows.push(["xDS version", c.version]);
  if (c.overlay) rows.push(["shapes from", c.overlay]);
  dl.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  const err = document.getElementById("config-error");
  err.hidden = !c.last_error;
  err.textContent = c.last_error ? `last load rejected:\n${c.last_error}` : "";
  drawEvents("loads", c.history);
}

async function refresh() {
  try {
    const res = await fetch("/api/console", { cache: "no-store" });
    if (res.ok) draw(await res.json());
  } catch (e) {
    // The next refresh tries again; a restarting sluice is not an error.
    const status = document.getElementById("status");
    status.textContent = "unreachable";
    status.className = "badge degraded";
  }
}

// Counters: a lookup, a reset, and who is refused now. The token stays in
// this page's memory only; every call is the admin port's own JSON.
function counterBody() {
  const entries = document.getElementById("counter-descriptor").value.split(",").map(e => {
    const at = e.indexOf("=");
    return { key: e.slice(0, at).trim(), value: e.slice(at + 1).trim() };
  });
  return { domain: document.getElementById("counter-domain").value.trim(), descriptors: [{ entries }] };
}

async function counters(method, path, body) {
  const headers = { "Content-Type": "application/json" };
  const token = document.getElementById("counter-token").value;
  if (token) headers.Authorization = `Bearer ${token}`;
  const res = await fetch(path, { method, headers, body: body ? JSON.stringify(body) : undefined, cache: "no-store" });
  const text = await res.text();
  if (!res.ok) {
    // A reset that met no limit answers 404 with a JSON document saying why.
    let why = text.trim();
    try { why = JSON.parse(text).error || why; } catch (_) { /* plain text */ }
    throw new Error(`${res.status}: ${why}`);
  }
  return JSON.parse(text);
}

function drawCounters(doc) {
  const rows = [];
  for (const d of doc.descriptors) {
    const shown = d.entries.map(e => `${e.key}=${e.value}`).join(",");
    const how = d.match.steps.map(s => s.pattern ? `${s.key}: ${s.how} ${s.pattern}` : `${s.key}: ${s.how}`).join(", ");
    if (!d.limits.length) {
      rows.push(el("tr", {}, el("td", { class: "key" }, shown), el("td", {}, d.unlimited ? "unlimited" : "no limit"),
        el("td", { colspan: "6" }, d.match.why_none || how)));
    }
    for (const l of d.limits) {
      const next = l.over_limit ? (l.shadow_mode ? "refused (shadow: passes)" : "refused") : "admitted";
      rows.push(el("tr", { class: l.over_limit ? "blocking" : "" }, el("td", { class: "key" }, shown),
        el("td", { class: "rule" }, l.rule), el("td", {}, how), el("td", { class: "num" }, l.count === null ? "-" : l.count),
        el("td", { class: "num" }, l.limit), el("td", { class: "num" }, l.remaining),
        el("td", { class: "num" }, `${l.reset_seconds}s`), el("td", { class: "next" }, next)));
    }
  }
  document.querySelector("#counter-result tbody").replaceChildren(...rows);
  document.getElementById("counter-result").hidden = false;
}

async function counterAction(path, verb) {
  const msg = document.getElementById("counter-message");
  try {
    const doc = await counters("POST", path, counterBody());
    drawCounters(doc);
    msg.textContent = doc.reset ? `${verb}: these were the counts before` : `${verb} at ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    msg.textContent = `${verb} refused: ${e.message}`;
  }
}

async function counterTop() {
  const msg = document.getElementById("counter-message");
  try {
    const doc = await counters("GET", "/api/counters/top");
    const list = document.getElementById("counter-refused");
    list.replaceChildren(...doc.keys.map(k => {
      if (!doc.clear) return el("li", {}, `${k.key} (${k.over_limit})`);
      const shown = k.entries.map(e => `${e.key}=${e.value}`).join(",");
      const pick = el("button", { type: "button", class: "pick" }, `${k.domain} ${shown}`);
      pick.addEventListener("click", () => {
        document.getElementById("counter-domain").value = k.domain;
        document.getElementById("counter-descriptor").value = shown;
        counterAction("/api/counters", "looked up");
      });
      return el("li", {}, pick, ` ${k.over_limit} refused`);
    }));
    msg.textContent = doc.clear ? "refused lately, in clear: pick one to look it up" : "refused lately (masked: enter the token)";
  } catch (e) {
    msg.textContent = `refused: ${e.message}`;
  }
}

document.getElementById("counter-form").addEventListener("submit", e => {
  e.preventDefault();
  counterAction("/api/counters", "looked up");
});
document.getElementById("counter-reset").addEventListener("click", () => counterAction("/api/counters/reset", "reset"));
document.getElementById("counter-top").addEventListener("click", counterTop);

// Usage: the distribution of per-key usage of one limit, as bars of keys
// that reached each level (both axes log), the limit a red line.
function usageChart(doc, limit) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 600 120");
  svg.setAttribute("class", "usage");
  // This instance's share of the fleet's: below 0 where it took back a
  // refund of hits another instance counted; drawn as none.
  const points = doc.at_least.map(([level, n]) => [level, Math.max(0, n)]);
  if (!points.length) return svg;
  const maxLevel = Math.max(limit + 1, points[points.length - 1][0]);
  const x = v => 10 + 580 * Math.log(v) / Math.log(maxLevel + 1);
  const maxKeys = Math.max(...points.map(p => p[1]));
  const y = n => 110 - 100 * Math.log(1 + n) / Math.log(1 + maxKeys);
  for (const [level, keys] of points) {
    const r = document.createElementNS(ns, "rect");
    r.setAttribute("x", x(level).toFixed(1));
    r.setAttribute("y", y(keys).toFixed(1));
    r.setAttribute("width", "3");
    r.setAttribute("height", (110 - y(keys)).toFixed(1));
    r.setAttribute("class", level > limit ? "refused" : "within");
    svg.append(r);
  }
  const line = document.createElementNS(ns, "line");
  line.setAttribute("x1", x(limit + 0.5).toFixed(1)); line.setAttribute("x2", x(limit + 0.5).toFixed(1));
  line.setAttribute("y1", "5"); line.setAttribute("y2", "115");
  line.setAttribute("class", "limit");
  svg.append(line);
  const label = (text, at, anchor, cls) => {
    const t = document.createElementNS(ns, "text");
    t.setAttribute("x", at.toFixed(1)); t.setAttribute("y", "10");
    t.setAttribute("text-anchor", anchor); t.setAttribute("class", cls);
    t.textContent = text;
    svg.append(t);
  };
  label("1 hit", 10, "start", "axis");
  label(`${maxLevel} hits`, 590, "end", "axis");
  label(`limit ${limit}`, x(limit + 0.5) + 4, "start", "limit");
  return svg;
}

async function showUsage() {
  const pick = document.getElementById("usage-rule").value;
  if (!pick) return;
  const [domain, rule] = pick.split("|");
  const typed = document.getElementById("usage-limit").value;
  const q = new URLSearchParams({ domain, rule });
  if (typed !== "") q.set("limit", typed);
  const res = await fetch(`/api/usage?${q}`, { cache: "no-store" });
  const answer = document.getElementById("usage-answer");
  if (!res.ok) { answer.textContent = (await res.text()).trim(); return; }
  const doc = await res.json();
  const u = doc.usage;
  answer.textContent = `a limit of ${doc.limit} would refuse ${doc.keys_refused} of ${u.keys} clients ` +
    `(${doc.requests_refused} requests) lately; current limit ${doc.current_limit}; p50 ${u.p50}, p99 ${u.p99}, max ${u.max}`;
  document.getElementById("usage-chart").replaceChildren(usageChart(doc, doc.limit));
}

async function loadUsageRules() {
  const res = await fetch("/api/usage", { cache: "no-store" });
  if (!res.ok) return;
  const doc = await res.json();
  const select = document.getElementById("usage-rule");
  const keep = select.value;
  select.replaceChildren(...doc.domains.flatMap(d => d.rules.map(r =>
    el("option", { value: `${d.domain}|${r.rule}` }, `${d.domain} ${r.rule} (limit ${r.limit}, ${r.usage.keys} keys)`))));
  if (keep) select.value = keep;
  showUsage();
}

document.getElementById("usage-rule").addEventListener("change", showUsage);
document.getElementById("usage-limit").addEventListener("input", showUsage);
loadUsageRules();
setInterval(loadUsageRules, 10 * REFRESH_MS);

refresh();
setInterval(refresh, REFRESH_MS);
