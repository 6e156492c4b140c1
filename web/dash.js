// dash.js: the dashboard's behaviour. Reads the fleet from gpuqd's event stream
// (GET /v1/fleet/events) with fetch() and a streaming reader, so that the key
// travels in the Authorization header (EventSource cannot send one). The key
// lives in a closure variable only: never in a URL, storage or cookie.
// Everything shown is built with textContent: no server text becomes markup.
"use strict";

(function () {
  const HISTORY = 120;          // queue samples kept per row (one a second)
  const DECISIONS = 12;         // recent decisions shown
  let key = null;               // the API key, in memory only
  let abort = null;             // AbortController of the live stream
  let latest = null;            // the last snapshot
  let retryMs = 1000;
  const history = new Map();    // "capability/lane" -> [queued...]
  const seenJobs = new Map();   // job id -> when the page first showed it (ms, for tests)
  window.gpuqSeenJobs = seenJobs;

  const $ = (id) => document.getElementById(id);

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function setStatus(text, kind) {
    const s = $("status");
    s.textContent = text;
    s.className = "status " + kind;
  }

  function fmtSeconds(s) {
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
    if (s < 3600) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  function fmtMb(mb) {
    return mb >= 1024 ? (mb / 1024).toFixed(1) + " GB" : mb + " MB";
  }

  // Temperature on a colour scale: green at 40 °C and below, red at 90 °C and above.
  function tempColor(c) {
    const t = Math.max(0, Math.min(1, (c - 40) / 50));
    return "hsl(" + Math.round(130 * (1 - t)) + ", 70%, 55%)";
  }

  // ---- the stream ----

  async function connect() {
    if (abort) abort.abort();
    const ctl = new AbortController();
    abort = ctl;
    setStatus("connecting…", "off");
    let resp;
    try {
      resp = await fetch("/v1/fleet/events", {
        headers: { Authorization: "Bearer " + key, Accept: "text/event-stream" },
        signal: ctl.signal, cache: "no-store",
      });
    } catch (e) {
      if (ctl.signal.aborted) return;
      return retryLater("cannot reach gpuqd");
    }
    if (resp.status === 401 || resp.status === 403) {
      let msg = "key refused";
      try { msg = (await resp.json()).error.message; } catch (e) { /* keep the default */ }
      setStatus(msg, "err");
      stop(false);
      return;
    }
    if (!resp.ok || !resp.body) return retryLater("gpuqd answered " + resp.status);
    setStatus("live", "live");
    $("main").hidden = false;
    $("hint").hidden = true;
    retryMs = 1000;
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let pending = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        pending += dec.decode(value, { stream: true });
        let cut;
        while ((cut = pending.indexOf("\n\n")) >= 0) {
          onEvent(pending.slice(0, cut));
          pending = pending.slice(cut + 2);
        }
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    if (!ctl.signal.aborted) retryLater("stream ended");
  }

  function retryLater(why) {
    setStatus(why + "; retrying", "err");
    const ctl = abort;
    setTimeout(() => { if (key && abort === ctl) connect(); }, retryMs);
    retryMs = Math.min(retryMs * 2, 10000);
  }

  function onEvent(block) {
    let type = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue;
      if (line.startsWith("event:")) type = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    if (type !== "fleet" || !data.length) return;
    let snap;
    try { snap = JSON.parse(data.join("\n")); } catch (e) { return; }
    latest = snap;
    render(snap);
  }

  function stop(clear) {
    if (abort) abort.abort();
    abort = null;
    key = null;
    if (clear) {
      setStatus("not connected", "off");
      $("main").hidden = true;
      $("hint").hidden = false;
    }
    $("connect").hidden = false;
    $("disconnect").hidden = true;
    $("key").disabled = false;
  }

  // ---- rendering ----

  function render(s) {
    renderSummary(s);
    renderGpus(s.gpus);
    renderQueues(s.queues);
    renderTenants(s.tenants);
    renderDecisions(s.decisions);
  }

  function renderSummary(s) {
    const box = $("summary");
    box.replaceChildren();
    const busy = s.gpus.filter((g) => g.jobs.length > 0).length;
    const items = [
      ["GPUs busy", busy + " / " + s.gpus.length],
      ["queued", s.totals.queued],
      ["running", s.totals.running],
      ["backlog", fmtSeconds(s.totals.backlog_s) + " GPU"],
      ["view", s.scope],
    ];
    for (const [label, value] of items) {
      const d = el("div");
      d.append(el("b", null, value), el("span", null, label));
      box.append(d);
    }
  }

  function gpuCard(g) {
    const card = el("div", "gpu");
    card.dataset.gpu = g.id;
    const top = el("div", "top");
    top.append(el("span", "id", g.id), el("span", "badge state"));
    card.append(top, el("div", "name"));
    const stats = el("div", "stats");
    stats.append(el("span", "temp"), el("span", "util"), el("span", "power"));
    card.append(stats, el("div", "bar vram"), el("div", "vram-label"), el("div", "models"),
      el("div", "jobs"));
    return card;
  }

  function fillCard(card, g) {
    card.dataset.state = g.state;
    const badge = card.querySelector(".state");
    badge.textContent = g.state;
    badge.className = "badge state " + g.state;
    badge.title = g.state_reason || "";
    card.querySelector(".name").textContent = g.name + " · " + g.host;
    const temp = card.querySelector(".temp");
    temp.textContent = g.temp_c.toFixed(0) + " °C";
    temp.style.color = tempColor(g.temp_c);
    temp.title = g.throttle ? "throttling: " + g.throttle : "";
    card.querySelector(".util").textContent = g.util_pct.toFixed(0) + "% util";
    card.querySelector(".power").textContent = g.power_w.toFixed(0) + " W";

    // VRAM: one segment per loaded model, the rest of the used memory grey.
    const bar = card.querySelector(".vram");
    bar.replaceChildren();
    const total = g.vram_total_mb || 1;
    let models = 0;
    for (const m of g.models) {
      const seg = el("div", "seg");
      seg.style.width = (100 * m.vram_mb / total).toFixed(2) + "%";
      seg.title = m.name + " " + fmtMb(m.vram_mb) + (m.pinned ? " (pinned)" : "");
      bar.append(seg);
      models += m.vram_mb;
    }
    if (g.vram_used_mb > models) {
      const rest = el("div", "seg other");
      rest.style.width = (100 * (g.vram_used_mb - models) / total).toFixed(2) + "%";
      rest.title = "other " + fmtMb(g.vram_used_mb - models);
      bar.append(rest);
    }
    card.querySelector(".vram-label").textContent =
      "VRAM " + fmtMb(g.vram_used_mb) + " / " + fmtMb(g.vram_total_mb);
    const ml = card.querySelector(".models");
    ml.replaceChildren();
    for (const m of g.models) ml.append(el("span", null, m.name + (m.pinned ? " (pinned)" : "")));
    if (!g.models.length) ml.append(el("span", "idle", "no model loaded"));

    const jobs = card.querySelector(".jobs");
    jobs.replaceChildren();
    for (const j of g.jobs) {
      const row = el("div", "job");
      const line = el("div", "line");
      const what = j.id ? "job " + j.id + " · " + j.capability + " / " + j.model
        : "another tenant's job";
      line.append(el("span", null, what),
        el("span", null, j.phase + " " + Math.round(j.progress * 100) + "%"));
      const prog = el("div", "progress");
      const fill = el("div");
      fill.style.width = (100 * Math.max(0, Math.min(1, j.progress))).toFixed(1) + "%";
      prog.append(fill);
      row.append(line, prog);
      if (j.id) {
        row.dataset.job = j.id;
        if (!seenJobs.has(j.id)) seenJobs.set(j.id, Date.now());
      }
      jobs.append(row);
    }
    if (!g.jobs.length) jobs.append(el("div", "idle", "idle"));
  }

  function renderGpus(gpus) {
    const box = $("gpus");
    const cards = new Map();
    for (const c of box.children) cards.set(c.dataset.gpu, c);
    const order = [];
    for (const g of gpus) {
      let card = cards.get(g.id);
      if (!card) card = gpuCard(g);
      cards.delete(g.id);
      fillCard(card, g);
      order.push(card);
    }
    for (const gone of cards.values()) gone.remove();
    order.forEach((card, i) => {
      if (box.children[i] !== card) box.insertBefore(card, box.children[i] || null);
    });
    $("gpu-count").textContent = "(" + gpus.length + ")";
  }

  function sparkline(values) {
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("class", "spark");
    svg.setAttribute("viewBox", "0 0 " + HISTORY + " 20");
    svg.setAttribute("preserveAspectRatio", "none");
    const max = Math.max(1, ...values);
    const off = HISTORY - values.length;
    const pts = values.map((v, i) => (off + i) + "," + (19 - 18 * v / max).toFixed(1));
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", pts.join(" "));
    svg.append(line);
    return svg;
  }

  function renderQueues(queues) {
    const body = $("queues").tBodies[0];
    body.replaceChildren();
    for (const q of queues) {
      const tr = el("tr");
      tr.dataset.queue = q.capability + "/" + q.lane;
      const spark = el("td");
      spark.append(sparkline(history.get(q.capability + "/" + q.lane) || [q.queued]));
      tr.append(el("td", null, q.capability), el("td", null, q.lane), el("td", null, q.queued),
        el("td", null, q.running), el("td", null, fmtSeconds(q.backlog_s)), spark);
      body.append(tr);
    }
    if (!queues.length) {
      const td = el("td", "empty", "nothing queued or running");
      td.colSpan = 6;
      const tr = el("tr");
      tr.append(td);
      body.append(tr);
    }
  }

  function renderTenants(tenants) {
    const body = $("tenants").tBodies[0];
    body.replaceChildren();
    for (const t of tenants) {
      const tr = el("tr");
      tr.append(el("td", null, t.name), el("td", null, t.queued), el("td", null, t.running),
        el("td", null, fmtSeconds(t.backlog_s)));
      body.append(tr);
    }
    if (!tenants.length) {
      const td = el("td", "empty", "no tenant has work in");
      td.colSpan = 4;
      const tr = el("tr");
      tr.append(td);
      body.append(tr);
    }
  }

  function renderDecisions(decisions) {
    const list = $("decisions");
    list.replaceChildren();
    for (const d of decisions.slice(0, DECISIONS)) {
      const li = el("li");
      const when = new Date(d.time_ms).toLocaleTimeString();
      li.append(el("span", "when", when),
        el("span", "where", "job " + d.job + " → " + d.worker),
        el("span", null, " · est. " + fmtSeconds(d.score_s) + (d.warm ? " · warm" : " · cold") +
          " · " + d.scored + " scored"),
        el("span", "why", d.reason));
      list.append(li);
    }
    if (!decisions.length) list.append(el("li", "idle", "no placement yet"));
  }

  // Queue history: sampled once a second from the latest snapshot, kept here only.
  function sample() {
    if (!latest) return;
    const live = new Set();
    for (const q of latest.queues) {
      const k = q.capability + "/" + q.lane;
      live.add(k);
      const h = history.get(k) || [];
      h.push(q.queued);
      if (h.length > HISTORY) h.shift();
      history.set(k, h);
    }
    for (const [k, h] of history) {
      if (live.has(k)) continue;
      h.push(0);
      if (h.length > HISTORY) h.shift();
      if (h.every((v) => v === 0)) history.delete(k);
    }
    renderQueues(latest.queues);
  }

  // ---- wiring ----

  document.addEventListener("DOMContentLoaded", () => {
    $("login").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const k = $("key").value.trim();
      $("key").value = "";
      if (!k) return;
      key = k;
      $("key").disabled = true;
      $("connect").hidden = true;
      $("disconnect").hidden = false;
      connect();
    });
    $("disconnect").addEventListener("click", () => stop(true));
    setInterval(sample, 1000);
  });
})();
