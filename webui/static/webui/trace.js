/* Live trace page: speaks the /ws/trace/ protocol (README "Live trace protocol").
   Subscribes with {topic, key, begin, end, limit}; renders message frames as cards (newest
   first, updated in place by offset_msg_id); shows progress; reconnects with backoff when
   the socket closes before a "done" frame. window.cairnTrace exposes state for tests. */
(function () {
  "use strict";
  var Cairn = window.Cairn;
  var config = JSON.parse(document.getElementById("trace-config").textContent);
  var form = document.getElementById("trace-form");
  var list = document.getElementById("trace-list");
  var statusBox = document.getElementById("trace-status");
  var part = function (role) { return document.querySelector('[data-role="' + role + '"]'); };
  var MAX_ITEMS = 500;

  var state = (window.cairnTrace = {
    socket: null, subscription: null, running: false, done: false, attempt: 0, timer: null,
    items: {}, matched: 0, received: {}, phase: "idle", connects: 0, errors: []
  });

  function esc(s) {
    return String(s == null ? "" : s).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function setPill(kind, text) {
    var pill = part("pill");
    pill.className = "pill " + (kind || "");
    pill.querySelector(".dot").className = "dot " + (kind === "live" ? "ok" : kind === "danger" ? "danger" : kind === "warn" ? "warn" : "off");
    part("pill-text").textContent = text;
  }
  function setCounts() {
    var n = Object.keys(state.items).length;
    part("counts").textContent = n + " message" + (n === 1 ? "" : "s") + (state.subscription ? " with key “" + state.subscription.key + "”" : "");
    part("empty").hidden = n > 0 || !state.subscription;
  }
  function notice(text) {
    part("notice").hidden = !text;
    part("notice-text").textContent = text || "";
  }
  function progress(fraction) {
    var bar = part("progress");
    if (fraction === null) { bar.hidden = true; return; }
    bar.hidden = false;
    bar.firstElementChild.style.width = Math.round(fraction * 100) + "%";
  }
  var stateClass = { CONSUMED: "ok", PENDING: "info", RETRYING: "warn", DLQ: "danger" };

  function card(frame) {
    var m = frame.message, t = m.trace;
    var el = document.createElement("article");
    el.className = "trace-item";
    el.setAttribute("data-offset-msg-id", m.offset_msg_id);
    el.setAttribute("data-store-ts", m.store_timestamp);
    var keys = (m.keys || []).map(function (k) { return '<span class="tag">' + esc(k) + "</span>"; }).join("");
    var groups = (t.groups || []).map(function (g) {
      return '<div class="g"><a href="' + config.group + encodeURIComponent(g.group) + '/">' + esc(g.group) + '</a><span class="badge ' +
        (stateClass[g.state] || "") + '" title="committed offset ' + (g.committed_offset == null ? "none" : g.committed_offset) +
        (g.reconsume_times ? ", " + g.reconsume_times + " failed deliveries" : "") + '">' + esc(g.state.toLowerCase()) + "</span></div>";
    }).join("") || '<span class="muted">no group consumes this topic yet</span>';
    var source = frame.source === "stored" ? '<span class="badge">stored</span>' : "";
    if (frame.source === "live" || (frame.source === "update" && state.items[m.offset_msg_id] && state.items[m.offset_msg_id].live)) {
      var lag = state.received[m.offset_msg_id] - m.store_timestamp;
      source = '<span class="badge ok" title="shown this long after the broker stored it">live · +' + Math.max(0, lag) + " ms</span>";
    }
    var took = t.stored.store_timestamp - t.born.timestamp;
    el.innerHTML =
      '<div class="trace-top">' +
        '<span data-slot="time"></span>' +
        '<a class="tag" href="' + config.topic + encodeURIComponent(m.topic) + '/">' + esc(m.topic) + "</a>" +
        '<a class="id" href="' + config.message + encodeURIComponent(m.offset_msg_id) + '/">' + esc(m.msg_id) + "</a>" +
        '<span class="keys">' + keys + "</span>" +
        (m.tag ? '<span class="badge muted">tag ' + esc(m.tag) + "</span>" : "") +
        '<span class="grow"></span>' + source +
      "</div>" +
      '<div class="trace-body">' +
        '<div class="trace-preview" title="' + m.body_size + ' bytes">' + esc(m.body) + "</div>" +
        '<div class="timeline">' +
          '<div class="step"><div class="step-title">Born</div>' +
            '<div class="line"><span class="k">producer</span><span class="mono">' + esc(t.born.host) + "</span></div>" +
            '<div class="line"><span class="k">at</span><span data-slot="born"></span></div></div>' +
          '<div class="step"><div class="step-title">Stored</div>' +
            '<div class="line"><span class="k">queue · offset</span><span>' + t.stored.queue_id + " · " + t.stored.queue_offset + "</span></div>" +
            '<div class="line"><span class="k">at</span><span data-slot="stored"></span></div>' +
            '<div class="line"><span class="k">after born</span><span>' + (took >= 0 ? took + " ms" : "–") + "</span></div></div>" +
          '<div class="step consume"><div class="step-title">Consumed</div><div class="groups-list">' + groups + "</div></div>" +
        "</div>" +
      "</div>";
    el.querySelector('[data-slot="time"]').appendChild(Cairn.timeElement(m.store_timestamp, "short"));
    el.querySelector('[data-slot="born"]').appendChild(Cairn.timeElement(t.born.timestamp, "short"));
    el.querySelector('[data-slot="stored"]').appendChild(Cairn.timeElement(t.stored.store_timestamp, "short"));
    return el;
  }

  function place(frame) {
    var m = frame.message;
    var id = m.offset_msg_id;
    if (frame.source === "live" && !state.received[id]) state.received[id] = Date.now();
    var known = state.items[id];
    var el = card(frame);
    if (known) {
      known.el.replaceWith(el);
      known.el = el;
      if (frame.source === "live") known.live = true;
      return;
    }
    state.items[id] = { el: el, ts: m.store_timestamp, live: frame.source === "live" };
    if (frame.source === "live") el.classList.add("fresh");
    // newest first
    var before = null;
    var children = list.children;
    for (var i = 0; i < children.length; i++) {
      if (Number(children[i].getAttribute("data-store-ts")) < m.store_timestamp) { before = children[i]; break; }
    }
    list.insertBefore(el, before);
    var ids = Object.keys(state.items);
    if (ids.length > MAX_ITEMS) {
      var last = list.lastElementChild;
      if (last) { delete state.items[last.getAttribute("data-offset-msg-id")]; last.remove(); }
    }
    setCounts();
  }

  function onFrame(frame) {
    if (frame.type === "message") {
      place(frame);
    } else if (frame.type === "progress") {
      state.phase = frame.phase;
      if (frame.phase === "backfill") {
        var total = frame.topics_total || 0;
        setPill("", "Loading stored matches" + (total ? " · " + (frame.topics_done || 0) + "/" + total + " topic" + (total === 1 ? "" : "s") : ""));
        progress(total ? (frame.topics_done || 0) / total : 0);
      } else {
        state.attempt = 0;
        progress(null);
        setPill("live", "Live");
        var sub = state.subscription;
        part("detail").textContent = "following new messages" + (sub && sub.end ? " until " + Cairn.formatTime(sub.end) : "") +
          (frame.truncated ? " · stored matches cut at the limit of " + frame.limit : "");
      }
    } else if (frame.type === "done") {
      state.done = true;
      state.phase = "done";
      setPill("done", "Done");
      part("detail").textContent = "the range has ended: every message stored in it is shown" + (frame.truncated ? " (stored matches cut at the limit)" : "");
      progress(null);
      finish();
    } else if (frame.type === "error") {
      state.errors.push(frame);
      notice(frame.detail + (frame.code === "broker_error" ? " (still following)" : ""));
      if (frame.code === "unavailable") {
        setPill("warn", "Broker unavailable");
        retryLater();
      } else if (frame.code === "bad_request" || frame.code === "not_found") {
        setPill("danger", "Refused");
        finish();
      }
    }
  }

  function url() {
    var proto = location.protocol === "https:" ? "wss:" : "ws:";
    return proto + "//" + location.host + config.ws;
  }

  function connect() {
    clearTimeout(state.timer);
    var sub = state.subscription;
    if (!sub) return;
    setPill("", state.connects ? "Reconnecting…" : "Connecting…");
    var ws = new WebSocket(url());
    state.socket = ws;
    ws.onopen = function () {
      state.connects++;
      notice("");
      ws.send(JSON.stringify(sub));
    };
    ws.onmessage = function (ev) {
      var frame;
      try { frame = JSON.parse(ev.data); } catch (e) { return; }
      onFrame(frame);
    };
    ws.onclose = function (ev) {
      if (state.socket !== ws) return;
      state.socket = null;
      if (!state.running || state.done) return;
      if (ev.code === 4401 || ev.code === 4403) {
        setPill("danger", "Not allowed");
        notice(ev.code === 4401 ? "Your session has ended: log in again." : "Your account has no console role.");
        finish();
        return;
      }
      retryLater();
    };
  }

  function retryLater() {
    if (!state.running) return;
    var delay = Math.min(10000, 1000 * Math.pow(2, state.attempt));
    state.attempt++;
    var until = Date.now() + delay;
    var tick = function () {
      var left = Math.ceil((until - Date.now()) / 1000);
      if (left > 0 && state.running && !state.socket) {
        setPill("warn", "Disconnected · retrying in " + left + " s");
        state.timer = setTimeout(tick, 250);
      } else if (state.running && !state.socket) {
        connect();
      }
    };
    if (state.socket) { try { state.socket.close(); } catch (e) { /* ignore */ } state.socket = null; }
    tick();
  }

  function finish() {
    state.running = false;
    clearTimeout(state.timer);
    part("stop").hidden = true;
    part("start").textContent = "Start trace";
  }

  function start() {
    Cairn.syncMs(form);
    var data = new FormData(form);
    var key = (data.get("key") || "").trim();
    if (!key) { notice("Enter a key to trace."); form.querySelector("[name=key]").focus(); return; }
    var begin = Number(data.get("begin_ms")) || Date.now() - 3600000;
    var end = data.get("end_ms") ? Number(data.get("end_ms")) : null;
    stop(true);
    list.innerHTML = "";
    state.items = {};
    state.received = {};
    state.done = false;
    state.attempt = 0;
    state.connects = 0;
    state.subscription = {
      topic: data.get("topic") || null, key: key, begin: begin, end: end, limit: Number(data.get("limit")) || 100
    };
    state.running = true;
    notice("");
    part("detail").textContent = "";
    part("stop").hidden = false;
    part("start").textContent = "Restart";
    setCounts();
    var params = new URLSearchParams({ key: key, begin_ms: String(begin), limit: String(state.subscription.limit) });
    if (state.subscription.topic) params.set("topic", state.subscription.topic);
    if (end !== null) params.set("end_ms", String(end));
    history.replaceState(null, "", "?" + params.toString());
    connect();
  }

  function stop(silent) {
    state.running = false;
    clearTimeout(state.timer);
    var ws = state.socket;
    state.socket = null;
    if (ws) try { ws.close(1000); } catch (e) { /* ignore */ }
    part("stop").hidden = true;
    part("start").textContent = "Start trace";
    if (!silent) { setPill("", "Stopped"); progress(null); part("detail").textContent = ""; }
  }

  form.addEventListener("submit", function (ev) { ev.preventDefault(); start(); });
  part("stop").addEventListener("click", function () { stop(false); });
  window.addEventListener("beforeunload", function () { state.running = false; if (state.socket) state.socket.close(1000); });
  if (config.autostart) document.addEventListener("DOMContentLoaded", function () { setTimeout(start, 0); });
  statusBox.hidden = false;
})();
