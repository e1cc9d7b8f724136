// Spool dashboard: polls GET /v1/overview once a second and renders it.
// Hand-written, no framework, no request leaves the broker's origin.
"use strict";

(() => {
  const PRIORITIES = ["critical", "high", "normal", "low", "idle"];
  const REASONS = ["error", "permanent", "timeout", "panic", "max_deliver", "bad_input", "no_handler", "unserved"];
  const REFRESH_MS = 1000;
  const WINDOW_MS = 5 * 60 * 1000; // charts keep the last 5 minutes
  const RATE_SPAN_MS = 5000; // processed/s is averaged over about 5 s
  const LATENCY_WINDOW_MS = 60 * 1000; // percentiles of the last minute
  const DLQ_PAGE = 50;
  const DLQ_REFRESH_MS = 2000;
  const TOKEN_KEY = "spool.token";
  const TERMINAL = ["completed", "dead", "cancelled"];

  const $ = (sel) => document.querySelector(sel);
  const el = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("data-")) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k ?? ""));
    return e;
  };

  // ---- API -----------------------------------------------------------------

  class APIError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = "Bearer " + token;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let resp;
    try {
      resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store" });
    } catch (e) {
      throw new APIError(0, "network", "the broker did not answer (" + e.message + ")");
    }
    let data = null;
    const text = await resp.text();
    if (text) {
      try { data = JSON.parse(text); } catch { data = { raw: text }; }
    }
    if (!resp.ok) {
      const err = (data && data.error) || {};
      if (resp.status === 401) askToken();
      throw new APIError(resp.status, err.code || "http_" + resp.status, err.message || resp.statusText);
    }
    return data;
  }

  function askToken() {
    $("#token-form").hidden = false;
    $("#token-input").focus();
  }

  $("#token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("#token-input").value);
    $("#token-input").value = "";
    $("#token-form").hidden = true;
    tick();
    loadDLQ();
    loadSchedules();
  });
  $("#token-change").addEventListener("click", askToken);

  // ---- formatting ----------------------------------------------------------

  const nf = new Intl.NumberFormat("en-US");
  const fmtInt = (n) => (n === undefined || n === null ? "—" : nf.format(n));
  function fmtDur(ns) {
    if (ns === undefined || ns === null) return "—";
    if (ns === 0) return "0";
    const ms = ns / 1e6;
    if (ms < 1) return (ns / 1e3).toFixed(0) + " µs";
    if (ms < 1000) return ms.toFixed(ms < 10 ? 2 : 0) + " ms";
    const s = ms / 1000;
    if (s < 120) return s.toFixed(1) + " s";
    if (s < 7200) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  }
  function fmtBytes(b) {
    if (b === undefined) return "—";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
    return (i ? b.toFixed(1) : b) + " " + units[i];
  }
  const fmtRate = (r) => (r === null || r === undefined ? "—" : r < 10 ? r.toFixed(1) : nf.format(Math.round(r)));
  const fmtTime = (s) => (s ? new Date(s).toLocaleTimeString() : "—");
  const fmtDateTime = (s) => (s ? new Date(s).toLocaleString() : "—");

  // ---- charts --------------------------------------------------------------

  const SVGNS = "http://www.w3.org/2000/svg";
  // spark draws points [{t, v}] of the last WINDOW_MS into svg as a line
  // over an area, scaled to the largest value. Until the page has watched
  // for WINDOW_MS, the x axis spans what it saw (at least MIN_SPAN_MS).
  const MIN_SPAN_MS = 10 * 1000;
  function spark(svg, points, now) {
    const vb = svg.viewBox.baseVal;
    const w = vb.width || 120, h = vb.height || 28;
    svg.replaceChildren();
    const pts = points.filter((p) => p.v !== null && p.v !== undefined && now - p.t <= WINDOW_MS);
    if (pts.length === 0) return;
    const span = Math.min(WINDOW_MS, Math.max(MIN_SPAN_MS, now - pts[0].t));
    const max = Math.max(1, ...pts.map((p) => p.v));
    const xy = pts.map((p) => [w - ((now - p.t) / span) * w, h - 1 - (p.v / max) * (h - 2)]);
    const line = xy.map(([x, y]) => x.toFixed(1) + "," + y.toFixed(1)).join(" ");
    const area = document.createElementNS(SVGNS, "polygon");
    area.setAttribute("points", xy[0][0].toFixed(1) + "," + h + " " + line + " " + xy[xy.length - 1][0].toFixed(1) + "," + h);
    area.setAttribute("class", "area");
    const pl = document.createElementNS(SVGNS, "polyline");
    pl.setAttribute("points", line);
    pl.setAttribute("class", "line");
    const title = document.createElementNS(SVGNS, "title");
    title.textContent = "max " + fmtRate(max) + " over the last " + Math.round(span / 1000) + " s";
    svg.append(title, area, pl);
  }

  // ---- overview ------------------------------------------------------------

  // samples are successive overviews, the last WINDOW_MS of them.
  const samples = [];
  let lastOK = null;

  function buildPriorityRows() {
    const tbody = $("#prio-table tbody");
    for (const p of PRIORITIES) {
      tbody.append(el("tr", { "data-prio": p, id: "prio-" + p },
        el("th", {}, p),
        el("td", { class: "pending num" }, "—"),
        el("td", { class: "inflight num" }, "—"),
        el("td", { class: "redelivered num" }, "—"),
        el("td", { class: "oldest num" }, "—"),
        el("td", { class: "rate num" }, "—"),
        el("td", {}, svgEl("backlog-chart")),
        el("td", {}, svgEl("rate-chart")),
        el("td", { class: "pause" },
          el("span", { class: "pause-state muted small" }, ""), " ",
          el("button", { type: "button", class: "pause-toggle", "data-prio": p, onclick: () => togglePause(p) }, "Pause…"))));
    }
  }

  // paused holds each priority's pause as the last overview showed it.
  const paused = {};

  // togglePause pauses priority p for the whole fleet (until resumed), or
  // resumes it, after a confirmation.
  async function togglePause(p) {
    const on = paused[p];
    const text = on
      ? "Resume priority " + p + "? Every consumer pulls it again at once."
      : "Pause priority " + p + " for the whole fleet, until resumed? Its tasks stay queued; running ones finish; other priorities go on.";
    if (!(await confirmAction(text))) return;
    try {
      await api("POST", "/v1/priorities/" + encodeURIComponent(p) + (on ? "/resume" : "/pause"));
      $("#pause-message").textContent = (on ? "Resumed " : "Paused ") + p + ".";
      tick();
    } catch (e) {
      $("#pause-message").textContent = (on ? "Resume" : "Pause") + " of " + p + " failed: " + e.message;
    }
  }
  // renderTypes shows the paused task types and their parked tasks.
  function renderTypes(types) {
    const tbody = $("#types-table tbody");
    tbody.replaceChildren(...types.map((x) => el("tr", { "data-type": x.type },
      el("th", {}, x.type),
      el("td", { class: "parked num" }, fmtInt(x.parked)),
      el("td", { class: "type-state" }, x.paused ? (x.pause && x.pause.until ? "until " + fmtDateTime(x.pause.until) : "until resumed") : "resumed: moving back"),
      el("td", {}, (x.pause && x.pause.by) || "—"),
      el("td", {}, (x.pause && x.pause.reason) || "—"),
      el("td", {}, x.paused ? el("button", { type: "button", class: "type-resume", onclick: () => resumeType(x.type) }, "Resume") : ""))));
    $("#types-empty").hidden = types.length > 0;
  }

  // renderUnserved shows, where workers pull by type, the queued task
  // types no worker serves, with their tasks and oldest wait.
  function renderUnserved(consumers, unserved) {
    $("#unserved").hidden = consumers !== "type";
    const tbody = $("#unserved-table tbody");
    tbody.replaceChildren(...unserved.map((x) => el("tr", { "data-type": x.type, "data-priority": x.priority, class: x.oldest_wait_ns > 60e9 ? "waiting" : "" },
      el("th", {}, x.type),
      el("td", {}, x.priority),
      el("td", { class: "queued num" }, fmtInt(x.queued)),
      el("td", { class: "oldest num" }, x.oldest_wait_ns ? fmtDur(x.oldest_wait_ns) : "—"))));
    $("#unserved-empty").hidden = unserved.length > 0;
  }

  async function resumeType(typ) {
    if (!(await confirmAction("Resume task type " + typ + "? The workers run its tasks again and move its parked tasks back."))) return;
    try {
      await api("POST", "/v1/types/" + encodeURIComponent(typ) + "/resume");
      $("#type-pause-message").textContent = "Resumed type " + typ + ".";
      tick();
    } catch (e) {
      $("#type-pause-message").textContent = "Resume of type " + typ + " failed: " + e.message;
    }
  }

  $("#type-pause-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const typ = $("#type-pause-type").value.trim();
    const reason = $("#type-pause-reason").value.trim();
    if (!(await confirmAction("Pause task type " + typ + " for the whole fleet, until resumed? Its tasks are parked without running; running ones finish; other types go on."))) return;
    try {
      await api("POST", "/v1/types/" + encodeURIComponent(typ) + "/pause" + (reason ? "?reason=" + encodeURIComponent(reason) : ""));
      $("#type-pause-message").textContent = "Paused type " + typ + ".";
      $("#type-pause-form").reset();
      tick();
    } catch (e) {
      $("#type-pause-message").textContent = "Pause of type " + typ + " failed: " + e.message;
    }
  });

  function svgEl(cls) {
    const s = document.createElementNS(SVGNS, "svg");
    s.setAttribute("viewBox", "0 0 220 28");
    s.setAttribute("preserveAspectRatio", "none");
    s.setAttribute("class", "spark " + cls);
    return s;
  }

  // sample turns an overview into the counters the charts and rates need.
  function sample(ov) {
    const s = { t: Date.parse(ov.time), prio: {}, processed: null, results: ov.results };
    for (const p of ov.priorities || []) {
      s.prio[p.priority] = { pending: p.pending, inflight: p.in_flight, processed: p.processed ?? null };
    }
    s.processed = ov.totals && ov.totals.processed !== undefined ? ov.totals.processed : null;
    s.hist = {};
    for (const k of ["pickup", "run"]) {
      const d = ov.totals && ov.totals[k];
      if (d && d.counts && d.bounds_ns) s.hist[k] = { bounds: d.bounds_ns, counts: d.counts };
    }
    return s;
  }

  // quantile estimates the q-quantile of a histogram as the consumer does:
  // linear inside the bucket holding the rank.
  function quantile(bounds, counts, q) {
    const total = counts.reduce((a, b) => a + b, 0);
    if (!total) return null;
    const rank = q * total;
    let seen = 0;
    for (let i = 0; i < counts.length; i++) {
      const c = counts[i];
      if (!c) continue;
      if (seen + c >= rank) {
        if (i === bounds.length) return bounds[i - 1];
        const lo = i > 0 ? bounds[i - 1] : 0;
        return lo + ((rank - seen) / c) * (bounds[i] - lo);
      }
      seen += c;
    }
    return bounds[bounds.length - 1];
  }

  // recentHist is the fleet histogram k of the last LATENCY_WINDOW_MS (or
  // of what the page saw, if less): the newest sample's counts minus an
  // older one's. null when a worker restarted in between or none is known.
  function recentHist(k) {
    const b = samples[samples.length - 1];
    if (!b || !b.hist[k]) return null;
    let a = null; // the oldest sample inside the window that has the histogram
    for (const x of samples) {
      if (x === b || !x.hist[k]) continue;
      a = x;
      if (b.t - x.t <= LATENCY_WINDOW_MS) break;
    }
    if (!a) return null;
    const ha = a.hist[k], hb = b.hist[k];
    if (ha.counts.length !== hb.counts.length) return null;
    const counts = hb.counts.map((c, i) => c - ha.counts[i]);
    if (counts.some((c) => c < 0)) return null;
    return { bounds: hb.bounds, counts, span: b.t - a.t };
  }

  // rate is the per-second increase of get(sample) between the newest sample
  // and the newest one at least RATE_SPAN_MS older than it (or the oldest).
  function rate(get, upto) {
    const end = upto ?? samples.length - 1;
    if (end < 1) return null;
    const b = samples[end];
    let i = end - 1;
    while (i > 0 && b.t - samples[i].t < RATE_SPAN_MS) i--;
    const a = samples[i];
    const va = get(a), vb = get(b);
    if (va === null || vb === null || va === undefined || vb === undefined || b.t <= a.t) return null;
    if (vb < va) return 0; // a worker restarted: its counters began again
    return ((vb - va) * 1000) / (b.t - a.t);
  }

  // totalProcessed is the fleet's processed counter (finished attempts),
  // null when no consumer reports one; processed/s then counts new result
  // documents instead.
  function totalProcessed(s) {
    return s.processed !== null ? s.processed : null;
  }

  function render(ov) {
    const s = sample(ov);
    const prev = samples[samples.length - 1];
    if (!prev || s.t > prev.t) samples.push(s);
    while (samples.length && s.t - samples[0].t > WINDOW_MS) samples.shift();
    // Rates for each kept sample, for the charts.
    for (let i = 0; i < samples.length; i++) {
      const x = samples[i];
      if (x.rates) continue;
      x.rates = {};
      for (const p of PRIORITIES) x.rates[p] = rate((y) => (y.prio[p] ? y.prio[p].processed : null), i);
      // A consumer reporting counters decides the source at once; its
      // first rate needs RATE_SPAN_MS of samples.
      x.rateFromFleet = totalProcessed(x) !== null;
      x.totalRate = x.rateFromFleet ? rate(totalProcessed, i) : rate((y) => y.results, i);
    }
    const now = s.t;
    const last = samples[samples.length - 1];
    let pending = 0, inflight = 0;
    for (const p of ov.priorities || []) {
      const row = $("#prio-" + p.priority);
      if (!row) continue;
      pending += p.pending;
      inflight += p.in_flight;
      row.querySelector(".pending").textContent = fmtInt(p.pending);
      row.querySelector(".inflight").textContent = fmtInt(p.in_flight) + (p.busy !== undefined ? " (" + p.busy + " running)" : "");
      row.querySelector(".redelivered").textContent = fmtInt(p.redelivered);
      row.querySelector(".oldest").textContent = p.oldest_wait_ns ? fmtDur(p.oldest_wait_ns) : "—";
      row.querySelector(".rate").textContent = fmtRate(last.rates[p.priority]);
      row.classList.toggle("waiting", p.oldest_wait_ns > 60e9);
      paused[p.priority] = !!p.paused;
      row.classList.toggle("paused", !!p.paused);
      const forever = p.paused_until && p.paused_until.startsWith("9999");
      row.querySelector(".pause-state").textContent = p.paused ? (forever || !p.paused_until ? "paused" : "paused until " + fmtDateTime(p.paused_until)) : "";
      row.querySelector(".pause-toggle").textContent = p.paused ? "Resume" : "Pause…";
      spark(row.querySelector(".backlog-chart"), samples.map((x) => ({ t: x.t, v: x.prio[p.priority] ? x.prio[p.priority].pending + x.prio[p.priority].inflight : null })), now);
      spark(row.querySelector(".rate-chart"), samples.map((x) => ({ t: x.t, v: x.rates[p.priority] })), now);
    }
    renderTypes(ov.types || []);
    renderUnserved(ov.consumers, ov.unserved || []);
    $("#total-rate").textContent = fmtRate(last.totalRate);
    spark($("#total-chart"), samples.map((x) => ({ t: x.t, v: x.totalRate })), now);
    $("#rate-source").textContent = !last.rateFromFleet
      ? "processed/s: new result documents per second (no consumer reports processed counters); per priority needs the consumers' figures."
      : last.totalRate === null
        ? "processed/s: finished attempts per second, from the consumers' processed counters (NATS service API); the first figure needs about 5 s of samples."
        : "processed/s: finished attempts per second, from the consumers' processed counters (NATS service API), averaged over 5 s.";
    $("#total-pending").textContent = fmtInt(pending);
    $("#total-inflight").textContent = fmtInt(inflight);
    $("#scheduled").textContent = fmtInt(ov.scheduled);
    $("#dead-letters").textContent = fmtInt(ov.dead_letters);
    $("#results-count").textContent = fmtInt(ov.results);
    $("#store-bytes").textContent = fmtBytes(ov.store_bytes);
    renderLatency(ov.totals || {});
    renderFleet(ov.fleet || [], ov.fleet_error);
    $("#updated").textContent = "updated " + fmtTime(ov.time);
    maybeRefreshDLQ(ov.dead_letters);
  }

  // renderLatency shows the fleet's percentiles of the last minute (from
  // histogram deltas) and, greyed, since each worker started.
  function renderLatency(t) {
    let span = 0;
    for (const [k, id, p] of [["pickup", "#lat-pickup", t.pickup], ["run", "#lat-run", t.run]]) {
      const row = $(id);
      const h = recentHist(k);
      const n = h ? h.counts.reduce((a, b) => a + b, 0) : 0;
      if (h) span = Math.max(span, h.span);
      for (const [cls, q] of [["p50", 0.5], ["p95", 0.95], ["p99", 0.99]]) {
        row.querySelector("." + cls).textContent = n ? fmtDur(quantile(h.bounds, h.counts, q)) : "—";
      }
      row.querySelector(".count").textContent = h ? fmtInt(n) : "—";
      row.querySelector(".total").textContent = p ? fmtDur(p.p50_ns) + " · " + fmtDur(p.p95_ns) + " · " + fmtDur(p.p99_ns) + " (" + fmtInt(p.count) + ")" : "—";
    }
    $("#lat-window").textContent = span >= 59000 ? "last minute" : span ? "last " + Math.round(span / 1000) + " s" : "last minute";
  }

  const openDetails = new Set(); // fleet members whose details are unfolded

  function renderFleet(fleet, fleetError) {
    $("#fleet-empty").hidden = fleet.length > 0;
    $("#fleet-table").hidden = fleet.length === 0;
    $("#fleet-count").textContent = fleet.length ? fleet.length + " process" + (fleet.length > 1 ? "es" : "") : fleetError ? "(" + fleetError + ")" : "";
    const tbody = $("#fleet-table tbody");
    const rows = fleet.map((m) => {
      const f = m.figures || {};
      const key = m.id;
      const details = el("details", { open: openDetails.has(key) }, el("summary", {}, "stats"), fleetDetails(m));
      details.addEventListener("toggle", () => (details.open ? openDetails.add(key) : openDetails.delete(key)));
      return el("tr", { "data-id": m.id, class: "member" },
        el("td", {}, el("strong", {}, f.worker || m.name), el("br"), el("span", { class: "muted small" }, m.name + " " + m.version + " · " + m.id)),
        el("td", { class: "state" }, f.state || "—"),
        el("td", { class: "slots" }, slotBar(f)),
        el("td", { class: "processed num" }, fmtInt(f.processed)),
        el("td", { class: "num" }, fmtInt(f.failed)),
        el("td", { class: "num" }, fmtInt(f.dead)),
        el("td", { class: "num", title: "result or dead-letter writes sent again through a leader election (not failures)" }, fmtInt(f.write_retries || 0)),
        el("td", { class: "num" }, f.pickup ? fmtDur(f.pickup.p99_ns) : "—"),
        el("td", { class: "num" }, f.run ? fmtDur(f.run.p99_ns) : "—"),
        el("td", { class: "small" }, fmtDateTime(m.started)),
        el("td", {}, details));
    });
    tbody.replaceChildren(...rows);
  }

  function slotBar(f) {
    const wrap = el("span", { class: "slotbar" });
    if (f.slots === undefined && f.busy === undefined) return el("span", { class: "muted" }, "—");
    const slots = f.slots ?? (f.busy ?? 0) + (f.idle ?? 0);
    const busy = f.busy ?? 0;
    const shown = Math.min(slots, 64);
    for (let i = 0; i < shown; i++) wrap.append(el("i", { class: i < busy ? "busy" : "idle" }));
    return el("span", {}, wrap, el("span", { class: "small slotcount" }, " " + busy + " busy / " + (f.idle ?? slots - busy) + " idle"));
  }

  // fleetDetails renders each endpoint's stats data generically: scalars as
  // key → value, objects and arrays as compact JSON.
  function fleetDetails(m) {
    const box = el("div", { class: "kv" });
    for (const e of m.endpoints || []) {
      box.append(el("h5", {}, e.name + " (" + e.subject + ") requests " + e.num_requests + ", errors " + e.num_errors));
      const data = e.data;
      if (data && typeof data === "object" && !Array.isArray(data)) {
        const dl = el("dl");
        for (const [k, v] of Object.entries(data)) {
          dl.append(el("dt", {}, k), el("dd", {}, v !== null && typeof v === "object" ? JSON.stringify(v).slice(0, 400) : String(v)));
        }
        box.append(dl);
      } else if (data !== undefined) {
        box.append(el("pre", {}, JSON.stringify(data, null, 1)));
      }
    }
    if (m.metadata) box.append(el("p", { class: "small muted" }, "metadata " + JSON.stringify(m.metadata)));
    return box;
  }

  function showBanner(msg) {
    const b = $("#banner");
    b.textContent = msg;
    b.hidden = false;
    document.body.classList.add("stale");
    $("#conn").textContent = "disconnected";
    $("#conn").className = "conn down";
  }
  function hideBanner() {
    $("#banner").hidden = true;
    document.body.classList.remove("stale");
    $("#conn").textContent = "live";
    $("#conn").className = "conn up";
  }

  let busy = false;
  async function tick() {
    if (busy) return;
    busy = true;
    try {
      const ov = await api("GET", "/v1/overview");
      lastOK = ov.time;
      hideBanner();
      render(ov);
    } catch (e) {
      if (e.status === 401) {
        showBanner("The broker needs a bearer token: enter it above.");
      } else {
        const since = lastOK ? " Showing the figures of " + fmtTime(lastOK) + "." : "";
        const what = e.code === "unavailable" ? "NATS is unreachable: " : e.code === "network" ? "The broker is unreachable: " : "Refresh failed: ";
        showBanner(what + e.message + "." + since);
      }
    } finally {
      busy = false;
    }
  }

  // ---- dead letters --------------------------------------------------------

  const dlq = { after: 0, next: 0, pages: [], filter: {}, count: null, stale: false, loadedAt: 0, selected: null, loading: false };

  function dlqQuery(extra) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries({ ...dlq.filter, ...extra })) if (v !== "" && v !== undefined && v !== 0) q.set(k, v);
    return q.toString();
  }

  async function loadDLQ() {
    if (dlq.loading) return;
    dlq.loading = true;
    const msg = $("#dlq-message");
    try {
      const page = await api("GET", "/v1/dlq?" + dlqQuery({ limit: DLQ_PAGE, after: dlq.after }));
      const letters = (page && (page.dead_letters || page.letters)) || [];
      dlq.next = (page && page.next) || 0;
      dlq.loadedAt = Date.now();
      $("#dlq-next").disabled = !dlq.next;
      $("#dlq-page").textContent = letters.length
        ? "seq " + letters[0].seq + "–" + letters[letters.length - 1].seq + (dlq.next ? ", more after" : ", last page")
        : "";
      msg.textContent = letters.length ? "" : dlq.after ? "No more dead letters." : "No dead letter matches.";
      $("#dlq-list tbody").replaceChildren(...letters.map(dlqRow));
    } catch (e) {
      msg.textContent = e.status === 404 && e.code === "not_found" && !dlq.filter.type
        ? "This broker serves no dead-letter API."
        : "Listing failed: " + e.message;
    } finally {
      dlq.loading = false;
    }
  }

  function dlqRow(l) {
    const tr = el("tr", { "data-seq": String(l.seq), class: "clickable" + (dlq.selected === l.seq ? " selected" : "") },
      el("td", { class: "num" }, String(l.seq)),
      el("td", { class: "small" }, fmtDateTime(l.failed_at || l.time)),
      el("td", { class: "mono" }, l.task_id || "—"),
      el("td", {}, l.type || "—"),
      el("td", {}, l.priority || "—"),
      el("td", {}, el("span", { class: "badge reason" }, l.reason || "—")),
      el("td", { class: "num" }, String(l.attempts ?? "—")),
      el("td", { class: "error-cell" }, (l.error || "").slice(0, 120)));
    tr.addEventListener("click", () => openLetter(l.seq));
    return tr;
  }

  // maybeRefreshDLQ reloads the list once the dead letters changed since
  // it was loaded: the count moved, or this page replayed or purged some.
  // A change is kept until the reload happens, at most every
  // DLQ_REFRESH_MS and only on the first page (a listing is a scan on the
  // server): the count may come back to the value last seen before then,
  // as when a replayed task dies again, and the list must still show the
  // new letter.
  function maybeRefreshDLQ(count) {
    if (dlq.count !== count) {
      dlq.count = count;
      dlq.stale = true;
    }
    $("#dlq-count").textContent = "(" + fmtInt(count) + " in the stream)";
    if (dlq.stale && !dlq.loading && dlq.after === 0 && Date.now() - dlq.loadedAt > DLQ_REFRESH_MS) {
      dlq.stale = false;
      loadDLQ();
    }
  }

  async function openLetter(seq) {
    dlq.selected = seq;
    for (const tr of document.querySelectorAll("#dlq-list tbody tr")) tr.classList.toggle("selected", tr.dataset.seq === String(seq));
    const box = $("#dlq-detail");
    try {
      const l = await api("GET", "/v1/dlq/" + encodeURIComponent(seq));
      $("#dlq-detail-seq").textContent = "#" + l.seq;
      const fields = [["task id", l.task_id], ["type", l.type], ["priority", l.priority], ["reason", l.reason],
        ["attempts", l.attempts], ["failed at", fmtDateTime(l.failed_at)], ["stored at", fmtDateTime(l.time)],
        ["original subject", l.original_subject], ["original seq", l.original_seq]];
      $("#dlq-detail-fields").replaceChildren(...fields.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v === undefined || v === null || v === "" ? "—" : String(v))]));
      $("#dlq-detail-error").textContent = l.error || "—";
      const hdrs = Object.entries(l.headers || {}).sort(([a], [b]) => a.localeCompare(b));
      $("#dlq-detail-headers tbody").replaceChildren(...hdrs.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", { class: "mono" }, Array.isArray(v) ? v.join(", ") : String(v)))));
      let preview = l.payload === undefined ? "(empty)" : l.payload_encoding === "base64" ? binaryPreview(l.payload) : l.payload_encoding === "text" ? l.payload : JSON.stringify(l.payload, null, 2);
      if (preview.length > 4000) preview = preview.slice(0, 4000) + "\n… (" + (preview.length - 4000) + " more characters)";
      $("#dlq-detail-payload").textContent = preview;
      $("#dlq-detail-size").textContent = l.size !== undefined ? "(" + fmtBytes(l.size) + ")" : "";
      box.dataset.seq = String(l.seq);
      box.dataset.task = l.task_id || "";
      box.hidden = false;
      $("#dlq-message").textContent = "";
    } catch (e) {
      box.hidden = true;
      $("#dlq-message").textContent = "Dead letter " + seq + ": " + e.message;
    }
  }

  // confirmAction asks in an in-page dialog (testable, unlike window.confirm).
  function confirmAction(text) {
    const d = $("#confirm");
    $("#confirm-text").textContent = text;
    d.returnValue = "";
    d.showModal();
    return new Promise((resolve) => d.addEventListener("close", () => resolve(d.returnValue === "ok"), { once: true }));
  }

  $("#dlq-replay").addEventListener("click", async () => {
    const box = $("#dlq-detail");
    const seq = box.dataset.seq;
    if (!(await confirmAction("Replay dead letter #" + seq + " (task " + (box.dataset.task || "?") + ")? It goes back to its queue and is removed from the DLQ."))) return;
    try {
      const res = await api("POST", "/v1/dlq/" + encodeURIComponent(seq) + "/replay");
      box.hidden = true;
      dlq.selected = null;
      await loadDLQ();
      // The replayed task may die again before the count shows a change.
      dlq.stale = true;
      $("#dlq-message").textContent = "Replayed #" + seq + (res && res.task_id ? ": task " + res.task_id + " is queued again on " + res.subject : "") + ".";
      if (box.dataset.task) {
        const note = "replayed from the DLQ by this page (dead letter #" + seq + (res && res.replays ? ", replay " + res.replays : "") + ")";
        lookup(box.dataset.task, { state: "replayed", note, at: new Date().toISOString() });
      }
    } catch (e) {
      $("#dlq-message").textContent = "Replay of #" + seq + " failed: " + e.message;
    }
  });

  $("#dlq-purge").addEventListener("click", async () => {
    readFilter();
    const q = dlqQuery({});
    const what = q ? "every dead letter matching " + decodeURIComponent(q).replaceAll("&", ", ") : "EVERY dead letter";
    if (!(await confirmAction("Purge " + what + "? This cannot be undone."))) return;
    try {
      const res = await api("DELETE", "/v1/dlq?" + (q || "all=true"));
      dlq.after = 0;
      dlq.pages = [];
      $("#dlq-detail").hidden = true;
      await loadDLQ();
      dlq.stale = true;
      $("#dlq-message").textContent = res && res.purged !== undefined ? "Purged " + res.purged + (res.purged === 1 ? " dead letter." : " dead letters.") : "Purged.";
    } catch (e) {
      $("#dlq-message").textContent = "Purge failed: " + e.message;
    }
  });

  $("#dlq-lookup").addEventListener("click", () => {
    const id = $("#dlq-detail").dataset.task;
    if (id) lookup(id);
  });
  $("#dlq-close").addEventListener("click", () => { $("#dlq-detail").hidden = true; dlq.selected = null; });

  function readFilter() {
    dlq.filter = { priority: $("#dlq-priority").value, type: $("#dlq-type").value.trim(), reason: $("#dlq-reason").value };
  }
  $("#dlq-filter").addEventListener("submit", (ev) => {
    ev.preventDefault();
    readFilter();
    dlq.after = 0;
    dlq.pages = [];
    loadDLQ();
  });
  $("#dlq-next").addEventListener("click", () => {
    if (!dlq.next) return;
    dlq.pages.push(dlq.after);
    dlq.after = dlq.next;
    loadDLQ();
  });
  $("#dlq-first").addEventListener("click", () => {
    dlq.after = 0;
    dlq.pages = [];
    loadDLQ();
  });

  // ---- periodic schedules --------------------------------------------------

  async function loadSchedules() {
    try {
      const res = await api("GET", "/v1/schedules");
      const list = (res && res.schedules) || [];
      $("#sched-count").textContent = "(" + list.length + ")";
      $("#sched-table tbody").replaceChildren(...list.map((x) => el("tr", { "data-name": x.name },
        el("th", {}, x.name),
        el("td", {}, el("code", {}, x.spec)),
        el("td", {}, x.time_zone || "UTC"),
        el("td", {}, x.priority + " · " + x.type),
        el("td", { class: "sched-state" }, x.paused ? "paused" : "active"),
        el("td", { class: "sched-next" }, x.next_run ? fmtDateTime(x.next_run) : "—"),
        el("td", {},
          el("button", { type: "button", class: "sched-toggle", onclick: () => scheduleAction(x.name, x.paused ? "resume" : "pause") }, x.paused ? "Resume" : "Pause"), " ",
          el("button", { type: "button", class: "sched-delete danger", onclick: () => scheduleAction(x.name, "delete") }, "Delete…")))));
    } catch (e) {
      $("#sched-message").textContent = "Schedules: " + e.message;
    }
  }

  async function scheduleAction(name, action) {
    if (action === "delete" && !(await confirmAction("Delete schedule " + name + "? It fires no more; tasks it already fired stay."))) return;
    try {
      if (action === "delete") await api("DELETE", "/v1/schedules/" + encodeURIComponent(name));
      else await api("POST", "/v1/schedules/" + encodeURIComponent(name) + "/" + action);
      $("#sched-message").textContent = "Schedule " + name + (action === "delete" ? " deleted." : action === "pause" ? " paused." : " resumed.");
    } catch (e) {
      $("#sched-message").textContent = "Schedule " + name + ": " + e.message;
    }
    loadSchedules();
  }

  $("#sched-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const name = $("#sched-name").value.trim();
    const body = { spec: $("#sched-spec").value.trim(), type: $("#sched-type").value.trim(), priority: $("#sched-priority").value };
    const tz = $("#sched-tz").value.trim();
    if (tz) body.time_zone = tz;
    try {
      const x = await api("PUT", "/v1/schedules/" + encodeURIComponent(name), body);
      $("#sched-message").textContent = "Schedule " + name + " saved; next run " + (x.next_run ? fmtDateTime(x.next_run) : "—") + ".";
    } catch (e) {
      $("#sched-message").textContent = "Schedule " + name + ": " + e.message;
    }
    loadSchedules();
  });

  // ---- task lookup ---------------------------------------------------------

  // look is the task the lookup panel shows: its id, the states seen while
  // polling it, and the poll timer.
  let look = { id: "", seen: [], timer: 0 };

  // lookup shows task id; note is an event this page caused (a replay).
  async function lookup(id, note) {
    clearTimeout(look.timer);
    look = { id, seen: note ? [note] : [], timer: 0 };
    $("#lookup-id").value = id;
    history.replaceState(null, "", "#task=" + encodeURIComponent(id)); // a link to this lookup
    document.getElementById("lookup").scrollIntoView({ block: "nearest" });
    await pollLookup();
  }

  async function pollLookup() {
    const id = look.id;
    const msg = $("#lookup-message");
    try {
      const doc = await api("GET", "/v1/tasks/" + encodeURIComponent(id));
      if (id !== look.id) return;
      msg.textContent = "";
      const lastSeen = look.seen.filter((x) => !x.note).pop();
      if (!lastSeen || lastSeen.state !== doc.state || lastSeen.attempts !== doc.attempts) {
        look.seen.push({ state: doc.state, attempts: doc.attempts, at: new Date().toISOString() });
      }
      renderLookup(doc);
      $("#cancel-form").hidden = TERMINAL.includes(doc.state);
      if (!TERMINAL.includes(doc.state)) {
        look.timer = setTimeout(pollLookup, REFRESH_MS);
      } else if (doc.state === "dead") {
        look.timer = setTimeout(pollLookup, 5 * REFRESH_MS); // a replay may bring it back
      }
    } catch (e) {
      if (id !== look.id) return;
      $("#lookup-result").hidden = true;
      $("#cancel-form").hidden = e.status !== 404; // a queued task has no document yet
      if (e.code === "result_discarded") {
        // Finished: the task completed and kept no result document.
        msg.textContent = "Task " + id + " completed; its result was discarded (Spool-Result: discard), so there is no document to show. Its events and the workers' counters saw it complete.";
        return;
      }
      msg.textContent = e.status === 404 ? "No task " + id + ": still queued (no worker picked it up yet), expired, or never enqueued." : "Lookup failed: " + e.message;
      if (e.status === 404 || e.status === 503 || e.status === 0) look.timer = setTimeout(pollLookup, 2 * REFRESH_MS);
    }
  }

  // binaryPreview shows base64 output (result_encoding / payload_encoding
  // "base64"): as text when it decodes to UTF-8, else as a hex dump.
  function binaryPreview(b64) {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    try {
      return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    } catch {
      const hex = Array.from(bytes.slice(0, 512), (b) => b.toString(16).padStart(2, "0")).join(" ");
      return "binary, " + fmtBytes(bytes.length) + ":\n" + hex + (bytes.length > 512 ? " …" : "");
    }
  }

  function renderLookup(doc) {
    $("#lookup-result").hidden = false;
    const st = $("#lookup-state");
    st.textContent = doc.state;
    st.className = "badge state-" + doc.state;
    const prog = doc.progress ? "progress " + (doc.progress.percent !== undefined ? doc.progress.percent + "%" : "") + (doc.progress.value !== undefined ? " " + JSON.stringify(doc.progress.value) : "") : "";
    $("#lookup-summary").textContent = [doc.type, doc.priority, "attempt " + doc.attempts, doc.snoozes ? doc.snoozes + " snoozes" : "", doc.worker ? "on " + doc.worker : "", prog].filter(Boolean).join(" · ");
    const cancelled = $("#lookup-cancelled");
    cancelled.hidden = doc.state !== "cancelled";
    cancelled.textContent = doc.state === "cancelled" ? "Cancelled by " + (doc.cancelled_by || "unknown") + (doc.cancel_reason ? ": " + doc.cancel_reason : "") : "";
    const events = [];
    const add = (at, text, cls) => at && events.push({ at, text, cls });
    add(doc.enqueued_at, "enqueued (" + doc.priority + ")", "enqueued");
    add(doc.started_at, "attempt " + doc.attempts + " started" + (doc.worker ? " on " + doc.worker : ""), "started");
    add(doc.next_attempt_at, (doc.state === "scheduled" ? "due" : "next attempt") + " at", "next");
    add(doc.replayed_at, "replayed from the DLQ" + (doc.replays ? " (" + doc.replays + "×)" : ""), "replayed");
    const why = doc.state === "cancelled" ? " by " + (doc.cancelled_by || "unknown") + (doc.cancel_reason ? ": " + doc.cancel_reason : "") : doc.error ? ": " + doc.error : "";
    add(doc.finished_at, doc.state + why, "finished state-" + doc.state);
    for (const s of look.seen) add(s.at, s.note || "seen " + s.state + " (attempt " + s.attempts + ")", s.note ? "replayed" : "seen");
    events.sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
    $("#lookup-timeline").replaceChildren(...events.map((e) => el("li", { class: e.cls }, el("time", {}, fmtDateTime(e.at)), " ", e.text)));
    $("#lookup-doc").textContent = JSON.stringify(doc, null, 2);
    // The output, byte for byte, from GET /v1/tasks/{id}/result.
    const out = $("#lookup-output");
    out.hidden = doc.state !== "completed" || doc.result === undefined;
    if (!out.hidden) {
      const enc = doc.result_encoding;
      $("#lookup-output-kind").textContent = enc === "base64" ? "binary output (stored as base64)" : enc === "text" ? "text output" : "JSON output";
      $("#lookup-output-preview").textContent = enc === "base64" ? binaryPreview(doc.result) : enc === "text" ? doc.result : JSON.stringify(doc.result, null, 2);
      const a = $("#lookup-output-download");
      a.dataset.id = doc.id;
      a.download = doc.id + (enc === "base64" ? ".bin" : enc === "text" ? ".txt" : ".json");
    }
  }

  $("#cancel-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const id = look.id;
    if (!id || !(await confirmAction("Cancel task " + id + "? A queued or delayed task never runs; a running one has its handler cancelled. It is not retried."))) return;
    const q = new URLSearchParams({ by: "dashboard" });
    const reason = $("#cancel-reason").value.trim();
    if (reason) q.set("reason", reason);
    try {
      await api("DELETE", "/v1/tasks/" + encodeURIComponent(id) + "?" + q.toString());
      $("#cancel-reason").value = "";
      $("#lookup-message").textContent = "Cancelled " + id + ".";
      clearTimeout(look.timer);
      await pollLookup();
    } catch (e) {
      $("#lookup-message").textContent = "Cancel of " + id + " failed: " + e.message;
    }
  });

  // The download fetches the raw output with the bearer token (a plain
  // link would not send it) and saves it as a file.
  $("#lookup-output-download").addEventListener("click", async (ev) => {
    const a = ev.currentTarget;
    if (a.href) return; // the object URL of this output is ready: let the browser save it
    ev.preventDefault();
    const headers = {};
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = "Bearer " + token;
    try {
      const resp = await fetch("/v1/tasks/" + encodeURIComponent(a.dataset.id) + "/result", { headers, cache: "no-store" });
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      a.href = URL.createObjectURL(await resp.blob());
      a.click();
      const url = a.href;
      setTimeout(() => { URL.revokeObjectURL(url); a.removeAttribute("href"); }, 10000);
    } catch (e) {
      $("#lookup-message").textContent = "Download failed: " + e.message;
    }
  });

  $("#lookup-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const id = $("#lookup-id").value.trim();
    if (id) lookup(id);
  });

  // ---- workflows -----------------------------------------------------------

  const WF_REFRESH_MS = 2000;
  const WF_MAX_NODES = 300; // larger workflows: the first steps of each layer, and a count
  const wf = { selected: null };

  async function loadWorkflows() {
    let res;
    try {
      res = await api("GET", "/v1/workflows");
    } catch (e) {
      $("#wf-count").textContent = "(" + e.message + ")";
      return;
    }
    const list = (res && res.workflows) || [];
    $("#wf-count").textContent = list.length ? "(" + fmtInt(list.length) + ")" : "";
    $("#wf-empty").hidden = list.length > 0;
    $("#wf-list").hidden = list.length === 0;
    $("#wf-list tbody").replaceChildren(...list.slice(0, 100).map((w) => {
      const tr = el("tr", { "data-id": w.id },
        el("td", {}, el("code", {}, w.id)),
        el("td", {}, el("span", { class: "badge state-" + w.state }, w.state)),
        el("td", { class: "num" }, fmtInt(w.done) + " / " + fmtInt(w.total)),
        el("td", {}, fmtDateTime(w.submitted_at)),
        el("td", {}, w.failure ? w.failure.step + ": " + (w.failure.error || "") : ""));
      tr.addEventListener("click", () => openWorkflow(w.id));
      return tr;
    }));
    if (wf.selected) openWorkflow(wf.selected, true);
  }

  async function openWorkflow(id, quiet) {
    wf.selected = id;
    let st;
    try {
      st = await api("GET", "/v1/workflows/" + encodeURIComponent(id));
    } catch (e) {
      if (!quiet) $("#wf-graph-note").textContent = "Could not read workflow " + id + ": " + e.message;
      return;
    }
    if (wf.selected !== id) return;
    $("#wf-detail").hidden = false;
    $("#wf-detail-id").textContent = st.id;
    const badge = $("#wf-detail-state");
    badge.textContent = st.state;
    badge.className = "badge state-" + st.state;
    $("#wf-detail-summary").textContent = fmtInt(st.done) + " of " + fmtInt(st.total) + " steps done · on_error " + st.on_error +
      (st.failure ? " · failed step " + st.failure.step : "") + (st.retries ? " · retried " + st.retries + "×" : "");
    renderGraph(st);
  }

  // renderGraph lays the steps out in layers (a step one layer right of
  // its deepest input) and draws an edge from each input to its step.
  function renderGraph(st) {
    const steps = st.steps || [];
    const byName = new Map(steps.map((s) => [s.name, s]));
    const layer = new Map();
    const depth = (s, seen) => {
      if (layer.has(s.name)) return layer.get(s.name);
      if (seen.has(s.name)) return 0;
      seen.add(s.name);
      let d = 0;
      for (const a of s.after || []) if (byName.has(a)) d = Math.max(d, depth(byName.get(a), seen) + 1);
      layer.set(s.name, d);
      return d;
    };
    let maxLayer = 0;
    for (const s of steps) if (!s.on_failure) maxLayer = Math.max(maxLayer, depth(s, new Set()));
    const layers = [];
    for (const s of steps) {
      const d = s.on_failure ? maxLayer + 1 : layer.get(s.name);
      (layers[d] = layers[d] || []).push(s);
    }
    const perLayer = Math.max(1, Math.floor(WF_MAX_NODES / Math.max(1, layers.length)));
    const W = 150, H = 34, GX = 50, GY = 12;
    const pos = new Map();
    let rows = 0, hidden = 0;
    layers.forEach((ls, i) => {
      (ls || []).forEach((s, j) => {
        if (j >= perLayer) { hidden++; return; }
        pos.set(s.name, { x: 10 + i * (W + GX), y: 10 + j * (H + GY) });
        rows = Math.max(rows, j + 1);
      });
    });
    const svg = $("#wf-graph");
    const NS = "http://www.w3.org/2000/svg";
    const mk = (tag, attrs) => {
      const e = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
      return e;
    };
    const width = 20 + layers.length * (W + GX), height = 20 + rows * (H + GY);
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    svg.style.height = Math.min(height, 600) + "px";
    const kids = [];
    for (const s of steps) {
      const to = pos.get(s.name);
      if (!to) continue;
      for (const a of s.after || []) {
        const from = pos.get(a);
        if (!from) continue;
        kids.push(mk("path", { class: "edge", "data-from": a, "data-to": s.name,
          d: "M" + (from.x + W) + " " + (from.y + H / 2) + " C" + (from.x + W + GX / 2) + " " + (from.y + H / 2) + " " + (to.x - GX / 2) + " " + (to.y + H / 2) + " " + to.x + " " + (to.y + H / 2) }));
      }
    }
    for (const s of steps) {
      const p = pos.get(s.name);
      if (!p) continue;
      const g = mk("g", { class: "node state-" + s.state, "data-step": s.name, "data-state": s.state, "data-task": s.task_id || "" });
      const title = mk("title", {});
      title.textContent = s.name + " (" + s.type + "): " + s.state + (s.task ? ", attempt " + s.task.attempts + ", task " + s.task.state : "") + (s.error ? " — " + s.error : "");
      g.append(title, mk("rect", { x: p.x, y: p.y, width: W, height: H }));
      const label = mk("text", { x: p.x + 6, y: p.y + 14 });
      label.textContent = (s.on_failure ? "⚠ " : "") + s.name;
      const sub = mk("text", { x: p.x + 6, y: p.y + 28, class: "muted" });
      sub.textContent = s.state + (s.task ? " · " + s.task.attempts + "×" : "");
      g.append(label, sub);
      if (s.task_id) g.addEventListener("click", () => lookup(s.task_id));
      kids.push(g);
    }
    svg.replaceChildren(...kids);
    $("#wf-graph-note").textContent = (hidden ? fmtInt(hidden) + " more steps not drawn. " : "") + "Click a step to look up its task.";
  }

  $("#wf-close").addEventListener("click", () => { $("#wf-detail").hidden = true; wf.selected = null; });
  // ---- flow-control limits -------------------------------------------------

  const LIMITS_REFRESH_MS = 2000;
  const fmtRateRule = (r) => (r ? r.limit + "/" + r.period + (r.burst > 1 ? " burst " + r.burst : "") : "—");

  // fmtRateNow tells whether a rate limit takes every start it allows now
  // and how many tasks it turned away are booked to come back.
  const fmtRateNow = (ru) => (!ru ? "—" : ru.next_start_ns > 0 || ru.waiting > 0 ? "at the limit, " + fmtInt(ru.waiting) + " waiting" : "below the limit");

  // parseRateInput reads "N/PERIOD" (100/1s); empty is no rate.
  function parseRateInput(v, what) {
    v = v.trim();
    if (!v) return undefined;
    const m = /^(\d+)\/(.+)$/.exec(v);
    if (!m) throw new Error(what + " \"" + v + "\": want N/PERIOD, such as 100/1s or 10/1m");
    return { limit: parseInt(m[1], 10), period: m[2] };
  }

  // parseKeyLimits reads "PATTERN=N[,N/PERIOD]; ..." (vip-*=5; free-*=,1/1m)
  // into a rule's keys; empty is none.
  function parseKeyLimits(v) {
    v = v.trim();
    if (!v) return undefined;
    const keys = {};
    for (const part of v.split(";").map((p) => p.trim()).filter(Boolean)) {
      const m = /^(.+?)=(\d*)(?:,(.+))?$/.exec(part);
      if (!m) throw new Error("key limit \"" + part + "\": want PATTERN=CONCURRENCY[,N/PERIOD], such as vip-*=5 or vip-*=5,100/1s");
      keys[m[1]] = { concurrency: m[2] === "" ? undefined : parseInt(m[2], 10), rate: parseRateInput(m[3] || "", "key limit rate") };
    }
    return keys;
  }

  // fmtKeyLimits lists a rule's key patterns and their limits.
  const fmtKeyLimits = (keys) =>
    Object.keys(keys || {}).sort().map((p) => p + ": concurrency " + (keys[p].concurrency || "—") + ", rate " + fmtRateRule(keys[p].rate)).join("; ") || "—";

  async function loadLimits() {
    const msg = $("#limits-state");
    try {
      const data = await api("GET", "/v1/limits");
      const rows = (data && data.limits) || [];
      msg.textContent = rows.length ? "" : "No limit is set: every type runs as fast as the workers allow.";
      $("#limits-list tbody").replaceChildren(...rows.map(limitRow));
    } catch (e) {
      msg.textContent = e.status === 404 ? "This broker serves no limits API." : "Reading the limits failed: " + e.message;
    }
  }

  function limitRow(u) {
    const r = u.rule;
    const pattern = !u.via && /(^|\.)[*>](\.|$)/.test(r.type);
    // A type a pattern rule governs has no rule of its own to remove.
    const del = u.via ? "" : el("button", { type: "button", class: "link" }, "remove");
    if (del) del.addEventListener("click", async () => {
      const after = pattern ? "The types it matches then fall to the next matching rule, or run unlimited." : "Its tasks then run unlimited (or under a pattern rule matching it).";
      if (!(await confirmAction("Remove every limit of " + r.type + "? " + after))) return;
      try {
        await api("DELETE", "/v1/limits/" + encodeURIComponent(r.type));
      } catch (e) {
        $("#limits-message").textContent = "Removing failed: " + e.message;
      }
      loadLimits();
    });
    const attrs = { "data-type": r.type };
    if (u.via) attrs["data-via"] = u.via;
    return el("tr", attrs,
      el("td", { class: "mono" }, u.via ? "\u2003" + r.type + " via " + u.via : pattern ? r.type + " (pattern: each type on its own)" : r.type),
      el("td", { class: "num" }, r.concurrency ? fmtInt(u.running) + " / " + fmtInt(r.concurrency) : "—"),
      el("td", { class: "num" }, r.key_concurrency ? fmtInt(u.keys_running) + " / " + fmtInt(r.key_concurrency) + " each" : "—"),
      el("td", { class: "num" }, r.key_concurrency ? fmtInt(u.keys_active) : "—"),
      el("td", { class: "num waiting" }, r.concurrency || r.key_concurrency || r.keys || u.waiting ? fmtInt(u.waiting || 0) : "—"),
      el("td", { class: "mono busiest" }, (u.busiest_keys || []).map((k) => k.key + " " + fmtInt(k.running)).join(", ") || "—"),
      el("td", {}, fmtRateRule(r.rate)),
      el("td", { class: "rate-now" }, fmtRateNow(u.rate_usage)),
      el("td", {}, fmtRateRule(r.key_rate)),
      el("td", { class: "mono key-limits" }, fmtKeyLimits(r.keys)),
      el("td", {}, r.ordered || (r.fair ? "fair, window " + (r.fair.window || 10) : "—")),
      el("td", {}, del));
  }

  $("#limits-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const msg = $("#limits-message");
    const type = $("#limits-type").value.trim();
    const num = (sel) => ($(sel).value === "" ? undefined : parseInt($(sel).value, 10));
    let rule;
    try {
      rule = {
        type,
        concurrency: num("#limits-concurrency"),
        key_concurrency: num("#limits-key-concurrency"),
        rate: parseRateInput($("#limits-rate").value, "rate"),
        key_rate: parseRateInput($("#limits-key-rate").value, "per-key rate"),
        keys: parseKeyLimits($("#limits-keys").value),
        ordered: ["hold", "skip"].includes($("#limits-ordered").value) ? $("#limits-ordered").value : undefined,
        fair: $("#limits-ordered").value === "fair" ? {} : undefined,
      };
    } catch (e) {
      msg.textContent = e.message;
      return;
    }
    try {
      await api("PUT", "/v1/limits/" + encodeURIComponent(type), rule);
      msg.textContent = "Limit of " + type + " set.";
      $("#limits-form").reset();
    } catch (e) {
      msg.textContent = "Setting the limit failed: " + e.message;
    }
    loadLimits();
  });

  // The explain form asks which rule governs a type (its own, else the most
  // precise pattern) and, with a key, the key's per-key limits.
  $("#limits-explain").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const out = $("#limits-explain-output");
    const type = $("#limits-explain-type").value.trim();
    const key = $("#limits-explain-key").value;
    try {
      const x = await api("GET", "/v1/limits/" + encodeURIComponent(type) + (key ? "?key=" + encodeURIComponent(key) : ""));
      let text = type + ": governed by " + (x.rule.type === type ? "its own rule" : "the pattern rule " + x.rule.type);
      if (x.key) {
        text += "; key " + x.key.key + ": concurrency " + (x.key.concurrency || "—") + ", rate " + fmtRateRule(x.key.rate) +
          " (" + (x.key.pattern ? "key pattern " + x.key.pattern : "the rule's per-key limits") + ")";
      }
      out.textContent = text;
    } catch (e) {
      out.textContent = e.code === "no_limit" ? type + ": no rule matches; its tasks run unlimited." : "Explaining failed: " + e.message;
    }
  });

  // ---- start ---------------------------------------------------------------

  for (const p of PRIORITIES) $("#dlq-priority").append(el("option", { value: p }, p));
  for (const r of REASONS) $("#dlq-reason").append(el("option", { value: r }, r));
  for (const p of PRIORITIES) $("#sched-priority").append(el("option", { value: p, selected: p === "normal" }, p));
  buildPriorityRows();
  const params = new URLSearchParams(location.hash.slice(1));
  if (params.get("task")) lookup(params.get("task"));
  tick();
  loadDLQ();
  loadWorkflows();
  loadLimits();
  setInterval(tick, REFRESH_MS);
  loadSchedules();
  setInterval(loadSchedules, 5 * REFRESH_MS);
  setInterval(loadWorkflows, WF_REFRESH_MS);
  setInterval(loadLimits, LIMITS_REFRESH_MS);
})();
