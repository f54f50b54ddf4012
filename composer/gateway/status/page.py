"""The status page served at `/gateway/ui`: one self-contained HTML document.

No CDN, no build step, no request anywhere but `status` beside it (the Content-Security-Policy
allows only this origin, and only this page's own script and style, by hash). The API key is
entered once and kept in the tab's `sessionStorage`; the page polls `/gateway/status` every
second while it is visible. It carries no data itself: without the key it shows nothing.
"""

from __future__ import annotations

import base64
import hashlib

STYLE = """
:root { --bg: #f6f7f9; --card: #fff; --fg: #1d2330; --dim: #5f6b7a; --line: #dde2e8;
  --accent: #2563eb; --ok: #15803d; --bad: #b91c1c; --warn: #b45309; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #12151b; --card: #1b2029; --fg: #e6e9ef; --dim: #9aa5b4; --line: #2c333f;
    --accent: #60a5fa; --ok: #4ade80; --bad: #f87171; --warn: #fbbf24; }
}
* { box-sizing: border-box; }
[hidden] { display: none !important; }
body { margin: 0; font: 16px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  background: var(--bg); color: var(--fg); }
header { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: center;
  padding: .8rem 1rem; border-bottom: 1px solid var(--line); background: var(--card); }
header h1 { font-size: 1.1rem; margin: 0; }
main { max-width: 68rem; margin: 0 auto; padding: 1rem; }
.pill { border-radius: 1rem; padding: .15rem .7rem; font-size: .9rem; background: var(--line); }
.pill.ok { background: var(--ok); color: #fff; } .pill.busy { background: var(--warn); color: #fff; }
.pill.bad { background: var(--bad); color: #fff; }
.grid { display: grid; gap: .8rem; grid-template-columns: repeat(auto-fit, minmax(15rem, 1fr)); }
.card { background: var(--card); border: 1px solid var(--line); border-radius: .6rem; padding: .8rem 1rem; }
.card h2 { font-size: .8rem; text-transform: uppercase; letter-spacing: .05em; color: var(--dim);
  margin: 0 0 .4rem; }
.big { font-size: 1.6rem; font-weight: 600; word-break: break-word; }
.dim { color: var(--dim); font-size: .9rem; }
.chips { display: flex; flex-wrap: wrap; gap: .3rem; margin-top: .4rem; padding: 0; list-style: none; }
.chips li { border: 1px solid var(--line); border-radius: .4rem; padding: 0 .4rem; font-size: .85rem; }
.chips li.now { border-color: var(--warn); color: var(--warn); font-weight: 600; }
section { margin-top: 1rem; }
section > h2 { font-size: 1rem; margin: 0 0 .5rem; }
.variant { display: grid; grid-template-columns: minmax(6rem, 1fr) auto; gap: .2rem 1rem;
  align-items: center; }
.variant .name { font-weight: 600; }
.spark { width: 100%; height: 2.4rem; grid-column: 1 / -1; }
.spark polyline { fill: none; stroke: var(--accent); stroke-width: 1.5; vector-effect: non-scaling-stroke; }
.badge { font-size: .75rem; border-radius: .3rem; padding: 0 .35rem; border: 1px solid currentColor; }
.serving { color: var(--ok); } .sleeping { color: var(--accent); } .stopped { color: var(--dim); }
.ok { color: var(--ok); } .failed, .abandoned { color: var(--bad); }
ol.history { list-style: none; margin: 0; padding: 0; }
ol.history > li { background: var(--card); border: 1px solid var(--line); border-radius: .6rem;
  padding: .5rem .8rem; margin-bottom: .4rem; }
form { display: flex; flex-wrap: wrap; gap: .5rem; margin-top: .6rem; }
input { flex: 1 1 14rem; font: inherit; padding: .45rem .6rem; border-radius: .4rem;
  border: 1px solid var(--line); background: var(--bg); color: var(--fg); }
button { font: inherit; padding: .45rem .9rem; border-radius: .4rem; border: 0; background: var(--accent);
  color: #fff; }
button.link { background: none; color: var(--accent); padding: 0; }
.error { color: var(--bad); font-weight: 600; margin: .6rem 0 0; }
footer { max-width: 68rem; margin: 0 auto; padding: 0 1rem 1.5rem; }
"""

SCRIPT = """
"use strict";
(function () {
  var STORE = "vllm-composer-gateway-key", POLL_MS = 1000, timer = null;
  var $ = function (id) { return document.getElementById(id); };
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function secs(s) {
    if (s === null || s === undefined) { return "-"; }
    if (s < 60) { return s.toFixed(s < 10 ? 1 : 0) + " s"; }
    return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  }
  function clock(t) { return new Date(t * 1000).toLocaleTimeString(); }
  function num(v, digits) { return v === null || v === undefined ? "-" : v.toFixed(digits); }
  function pct(v) { return v === null || v === undefined ? "-" : (100 * v).toFixed(0) + " %"; }
  function hasKey() { return sessionStorage.getItem(STORE) !== null; }

  function showLogin(message) {
    $("data").hidden = true;
    $("login").hidden = false;
    $("error").textContent = message || "";
    $("error").hidden = !message;
    $("state").textContent = "not connected";
    $("state").className = "pill";
  }
  function fail(message) {
    $("error").textContent = message;
    $("error").hidden = false;
    $("state").textContent = "no answer";
    $("state").className = "pill bad";
  }
  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(poll, POLL_MS);
  }

  function sparkline(points) {
    var ns = "http://www.w3.org/2000/svg", svg = document.createElementNS(ns, "svg");
    var w = 300, h = 40, vals = [], t0 = null, t1 = null;
    svg.setAttribute("class", "spark");
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("role", "img");
    points.forEach(function (p) {
      if (p[1] !== null) { vals.push(p[1]); }
      t0 = t0 === null ? p[0] : Math.min(t0, p[0]);
      t1 = t1 === null ? p[0] : Math.max(t1, p[0]);
    });
    var top = 1.2 * Math.max.apply(null, vals.concat([1])), span = Math.max(1, t1 - t0);
    svg.setAttribute("aria-label", "tokens per second, up to " + (top / 1.2).toFixed(1));
    var run = [];
    function flush() {
      if (run.length) {
        var line = document.createElementNS(ns, "polyline");
        line.setAttribute("points", (run.length === 1 ? [run[0], run[0]] : run).join(" "));
        svg.appendChild(line);
      }
      run = [];
    }
    points.forEach(function (p) {
      if (p[1] === null) { flush(); return; }
      var x = ((p[0] - t0) / span) * w, y = h - 2 - (p[1] / top) * (h - 4);
      run.push(x.toFixed(1) + "," + y.toFixed(1));
    });
    flush();
    return svg;
  }

  function stages(list, current) {
    var ul = el("ul", "chips");
    list.forEach(function (s, i) {
      var li = el("li", current && i === list.length - 1 ? "now" : "", s.stage + " " + secs(s.seconds));
      ul.appendChild(li);
    });
    return ul;
  }

  function render(st) {
    $("login").hidden = true;
    $("error").hidden = true;
    $("data").hidden = false;
    $("model").textContent = st.served_name || "";
    var sw = st.switch, serving = st.serving.length ? st.serving.join(", ") : "-";
    $("serving").textContent = serving;
    $("backend").textContent = st.backend.waking ? "waking" : st.backend.ready ? "ready" : (
      "not ready" + (st.backend.error ? ": " + st.backend.error : ""));
    $("sleeping").textContent = st.sleeping.length ? st.sleeping.join(", ") : "none";
    if (sw) {
      $("state").textContent = "switching " + (sw.from || "-") + " \\u2192 " + sw.to;
      $("state").className = "pill busy";
      $("switch-route").textContent = (sw.from || "-") + " \\u2192 " + sw.to;
      $("switch-stage").textContent = sw.stage;
      $("switch-time").textContent = secs(sw.stage_elapsed_s) + " in this stage, " +
        secs(sw.elapsed_s) + " in all";
      $("switch-stages").replaceChildren(stages(sw.stages, true));
    } else {
      $("state").textContent = st.serving.length ? "serving " + serving : "no variant serving";
      $("state").className = st.backend.ready ? "pill ok" : "pill bad";
      $("switch-route").textContent = st.demand ? "requested: " + st.demand.variant : "none under way";
      $("switch-stage").textContent = st.demand ? st.demand.reason : "";
      $("switch-time").textContent = st.residency_left_s > 0 ?
        "next switch possible in " + secs(st.residency_left_s) : "";
      $("switch-stages").replaceChildren();
    }
    var rq = st.requests;
    $("held").textContent = rq.held;
    $("inflight").textContent = rq.inflight;
    $("holds").textContent = rq.holds.length ? "holds: " + rq.holds.map(function (h) {
      return (h.owner || "control") + " (" + secs(h.expires_in_s) + " left)";
    }).join(", ") : (rq.open ? "open" : "held: no backend ready");

    var box = $("variants");
    box.replaceChildren();
    Object.keys(st.variants).forEach(function (name) {
      var v = st.variants[name], card = el("div", "card variant");
      card.dataset.variant = name;
      var title = el("div");
      title.appendChild(el("span", "name", name + " "));
      title.appendChild(el("span", "badge " + v.state, v.state));
      card.appendChild(title);
      card.appendChild(el("div", "big tps", num(v.tokens_per_s, 1) + " tok/s"));
      if (v.share !== null && v.share !== undefined) {
        card.appendChild(el("div", "share", pct(v.share) + " of the requests"));
      }
      var facts = "acceptance " + pct(v.acceptance) + " \\u00b7 mean accepted length " +
        num(v.mean_accepted_length, 2) + " \\u00b7 KV cache " + pct(v.kv_cache_usage) +
        " \\u00b7 running " + (v.running === null ? "-" : v.running);
      card.appendChild(el("div", "dim", facts + " (last " + secs(v.window_s) + ")"));
      card.appendChild(sparkline(v.sparkline));
      box.appendChild(card);
    });
    if (!box.children.length) { box.appendChild(el("p", "dim", "No throughput sampled yet.")); }

    var hist = $("history");
    hist.replaceChildren();
    st.switches.forEach(function (s) {
      var li = el("li");
      var head = el("div");
      head.appendChild(el("strong", "", s.gateway_only ? "gateway settings updated (" + s.to + " serves) " :
        (s.from || "-") + " \\u2192 " + s.to + " "));
      head.appendChild(el("span", "badge " + s.outcome, s.outcome));
      head.appendChild(el("span", "dim", " " + clock(s.started_at) + ", " + secs(s.elapsed_s) +
        (s.drained !== null ? ", drained " + s.drained + ", cut " + s.cut : "") +
        (s.continued ? ", continued " + s.continued : "") +
        (s.refused ? ", not continued " + s.refused : "")));
      if (s.probation) {
        var pb = s.probation, running = pb.state === "running";
        head.appendChild(el("span", "", " "));
        head.appendChild(el("span", "badge",
          running ? "on probation until " + clock(pb.until) : "probation " + pb.state));
      }
      li.appendChild(head);
      if (!s.gateway_only) { li.appendChild(stages(s.stages, false)); }
      if (s.detail) { li.appendChild(el("div", "dim", s.detail)); }
      hist.appendChild(li);
    });
    if (!st.switches.length) { hist.appendChild(el("li", "dim", "No switch since the gateway started.")); }
    $("updated").textContent = "updated " + clock(st.time);
  }

  async function poll() {
    if (!hasKey()) { showLogin(); return; }
    if (document.hidden) { schedule(); return; }
    var key = sessionStorage.getItem(STORE), headers = {}, reply;
    if (key) { headers.Authorization = "Bearer " + key; }
    try {
      reply = await fetch("status", {
        headers: headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer"
      });
    } catch (err) {
      fail("The gateway does not answer (" + err.message + ").");
      schedule();
      return;
    }
    if (reply.status === 401) {
      sessionStorage.removeItem(STORE);
      $("variants").replaceChildren();
      $("history").replaceChildren();
      showLogin("Wrong key: the gateway answered 401 Unauthorized.");
      return;
    }
    if (!reply.ok) { fail("The gateway answered " + reply.status + "."); schedule(); return; }
    try { render(await reply.json()); } catch (err) { fail("Unexpected answer: " + err.message); }
    schedule();
  }

  $("login").addEventListener("submit", function (ev) {
    ev.preventDefault();
    sessionStorage.setItem(STORE, $("key").value);
    $("key").value = "";
    poll();
  });
  $("forget").addEventListener("click", function () {
    sessionStorage.removeItem(STORE);
    clearTimeout(timer);
    showLogin();
  });
  document.addEventListener("visibilitychange", function () { if (!document.hidden) { poll(); } });
  poll();
})();
"""

BODY = """
<header>
  <h1>vLLM gateway <span id="model" class="dim"></span></h1>
  <span id="state" class="pill">not connected</span>
</header>
<main>
  <form id="login" hidden>
    <label for="key" class="dim">API key: the stack's VLLM_API_KEY, from its env file (.env, or the
      file --env-file names) or the environment; kept in this tab only</label>
    <input id="key" type="password" autocomplete="off" placeholder="VLLM_API_KEY">
    <button type="submit">Connect</button>
  </form>
  <p id="error" class="error" role="alert" hidden></p>
  <div id="data" hidden>
    <div class="grid">
      <div class="card"><h2>Serving</h2><div id="serving" class="big"></div>
        <div class="dim">backend <span id="backend"></span></div>
        <div class="dim">sleeping: <span id="sleeping"></span></div></div>
      <div class="card"><h2>Switch</h2><div id="switch-route" class="big"></div>
        <div id="switch-stage"></div><div id="switch-time" class="dim"></div>
        <div id="switch-stages"></div></div>
      <div class="card"><h2>Requests</h2>
        <div><span id="held" class="big"></span> held \u00b7
          <span id="inflight" class="big"></span> in flight</div>
        <div id="holds" class="dim"></div></div>
    </div>
    <section><h2>Variants (tokens/s over the last minute)</h2><div id="variants" class="grid"></div></section>
    <section><h2>Last switches</h2><ol id="history" class="history"></ol></section>
  </div>
</main>
<footer class="dim"><span id="updated"></span> \u00b7
  <button id="forget" class="link" type="button">forget key</button></footer>
"""


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


PAGE = (
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
    '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
    '<meta name="referrer" content="no-referrer">\n'
    '<link rel="icon" href="data:,">\n'
    "<title>vLLM gateway status</title>\n"
    f"<style>{STYLE}</style>\n</head><body>{BODY}<script>{SCRIPT}</script>\n</body></html>\n"
).encode()

CSP = "; ".join(
    [
        "default-src 'self'",
        f"script-src {_sha256(SCRIPT)}",
        f"style-src {_sha256(STYLE)}",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}
