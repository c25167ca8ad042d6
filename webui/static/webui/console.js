/* Cairn console: progressive enhancement shared by every page.
   - theme toggle (auto → the other scheme than the system's → the system's), saved in
     localStorage: every click from "auto" changes what is shown
   - a form error or a send result ([data-autofocus]) is focused, so it is in view
   - the send form refuses a body over the broker's limit before posting it (input kept)
   - <time data-ms> shown in the browser's zone, epoch ms on hover
   - datetime-local inputs: epoch ms in the browser's zone posted as <name>_ms
   - quick time ranges, confirm prompts, copy buttons, tabs, "/" focuses search
   - a client-side filter for tables (data-filter-table)
   Every page works without it; it only makes them nicer. */
(function () {
  "use strict";
  var Cairn = (window.Cairn = window.Cairn || {});

  // ---- times --------------------------------------------------------------------------
  var pad = function (n, w) { n = String(n); while (n.length < (w || 2)) n = "0" + n; return n; };
  Cairn.formatTime = function (ms, style) {
    var d = new Date(Number(ms));
    var today = new Date();
    var time = pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + "." + pad(d.getMilliseconds(), 3);
    var date = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate());
    if (style === "short" && d.toDateString() === today.toDateString()) return time;
    return date + " " + time;
  };
  Cairn.ago = function (ms) {
    var s = Math.round((Date.now() - Number(ms)) / 1000);
    if (s < 0) return "in " + Cairn.span(-s * 1000);
    if (s < 5) return "just now";
    return Cairn.span(s * 1000) + " ago";
  };
  Cairn.span = function (ms) {
    var s = Math.round(ms / 1000);
    if (s < 60) return s + " s";
    var m = Math.floor(s / 60);
    if (m < 60) return m + " min";
    var h = Math.floor(m / 60);
    if (h < 48) return h + " h " + (m % 60) + " min";
    return Math.floor(h / 24) + " d " + (h % 24) + " h";
  };
  var zone = (function () {
    try { return Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { return ""; }
  })();
  Cairn.timeElement = function (ms, style) {
    var t = document.createElement("time");
    t.setAttribute("data-ms", ms);
    if (style) t.setAttribute("data-style", style);
    Cairn.localizeTime(t);
    return t;
  };
  Cairn.localizeTime = function (el) {
    var ms = el.getAttribute("data-ms");
    if (!ms) return;
    var style = el.getAttribute("data-style") || "";
    el.textContent = style === "relative" ? Cairn.ago(ms) : Cairn.formatTime(ms, style);
    el.dateTime = new Date(Number(ms)).toISOString();
    el.title = (style === "relative" ? Cairn.formatTime(ms) + " · " : "") + "epoch ms " + ms + " · " + new Date(Number(ms)).toISOString() + (zone ? " · shown in " + zone : "");
  };
  Cairn.localizeTimes = function (root) {
    (root || document).querySelectorAll("time[data-ms]").forEach(Cairn.localizeTime);
  };

  // ---- datetime-local helpers ---------------------------------------------------------
  Cairn.toLocalInput = function (ms) {
    var d = new Date(ms);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" + pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  };
  Cairn.fromLocalInput = function (value) {
    if (!value) return null;
    var ms = new Date(value).getTime();  // a datetime-local value parses in the browser's zone
    return isNaN(ms) ? null : ms;
  };
  function syncMs(form) {
    form.querySelectorAll("input[type=datetime-local][name]").forEach(function (input) {
      var hidden = form.querySelector('input[type=hidden][name="' + input.name + '_ms"]');
      if (!hidden) {
        hidden = document.createElement("input");
        hidden.type = "hidden";
        hidden.name = input.name + "_ms";
        form.appendChild(hidden);
      }
      var ms = Cairn.fromLocalInput(input.value);
      hidden.value = ms === null ? "" : String(ms);
      hidden.disabled = ms === null;
    });
  }
  Cairn.syncMs = syncMs;
  function initTimeInputs() {
    // Server-rendered values are UTC (data-ms carries the instant): show them in local time.
    document.querySelectorAll("input[type=datetime-local][data-ms]").forEach(function (input) {
      var ms = input.getAttribute("data-ms");
      if (ms) input.value = Cairn.toLocalInput(Number(ms));
    });
    document.querySelectorAll("form").forEach(function (form) {
      if (!form.querySelector("input[type=datetime-local]")) return;
      form.addEventListener("submit", function () { syncMs(form); });
      form.querySelectorAll("input[type=datetime-local]").forEach(function (i) {
        var hint = form.querySelector('[data-zone-for="' + i.name + '"]');
        if (hint && zone) hint.textContent = "in your zone (" + zone + ")";
      });
    });
    document.querySelectorAll("[data-range]").forEach(function (btn) {
      btn.addEventListener("click", function (ev) {
        ev.preventDefault();
        var form = btn.closest("form");
        var minutes = Number(btn.getAttribute("data-range"));
        var now = Date.now();
        var begin = form.querySelector("input[name=begin]");
        var end = form.querySelector("input[name=end]");
        if (begin) begin.value = Cairn.toLocalInput(now - minutes * 60000);
        if (end) end.value = btn.hasAttribute("data-open-end") ? "" : Cairn.toLocalInput(now);
      });
    });
  }

  // ---- theme --------------------------------------------------------------------------
  function initTheme() {
    var btn = document.getElementById("theme-toggle");
    if (!btn) return;
    var prefersDark = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
    // "auto" looks like the system's scheme, so the first click goes to the other one (a
    // fixed auto → light → dark showed nothing new on a light system).
    var order = function () {
      return prefersDark && prefersDark.matches ? ["auto", "light", "dark"] : ["auto", "dark", "light"];
    };
    var labels = { auto: "Theme: follows the system", light: "Theme: light", dark: "Theme: dark" };
    var root = document.documentElement;
    var show = function () { btn.title = labels[root.getAttribute("data-theme")] || labels.auto; };
    show();
    btn.addEventListener("click", function () {
      var cur = root.getAttribute("data-theme") || "auto";
      var cycle = order();
      var next = cycle[(cycle.indexOf(cur) + 1) % cycle.length];
      root.setAttribute("data-theme", next);
      try { localStorage.setItem("cairn-theme", next); } catch (e) { /* ignore */ }
      show();
      document.dispatchEvent(new CustomEvent("cairn:theme"));
    });
  }

  // ---- send form: a body over the broker's limit is refused here, with the input kept ----
  function utf8Length(text) {
    return new TextEncoder().encode(text).length;
  }
  function bodyBytes(form) {
    var text = form.elements.body ? form.elements.body.value : "";
    var encoding = (form.querySelector("input[name=body_encoding]:checked") || {}).value || "text";
    if (encoding === "base64") {
      var clean = text.replace(/\s+/g, "");
      return Math.floor(clean.length * 3 / 4) - (clean.endsWith("==") ? 2 : clean.endsWith("=") ? 1 : 0);
    }
    if (encoding === "json") {
      try { return utf8Length(JSON.stringify(JSON.parse(text))); } catch (e) { return utf8Length(text); }
    }
    return utf8Length(text);
  }
  function initBodyLimit() {
    document.querySelectorAll("form[data-max-body-bytes]").forEach(function (form) {
      var limit = Number(form.getAttribute("data-max-body-bytes"));
      if (!limit || !form.elements.body) return;
      form.addEventListener("submit", function (ev) {
        var size = bodyBytes(form);
        var field = form.elements.body.closest(".field");
        var shown = field.querySelector(".error[data-role=size]");
        if (size <= limit) {
          if (shown) { shown.remove(); field.classList.remove("invalid"); }
          return;
        }
        ev.preventDefault();
        if (!shown) {
          shown = document.createElement("div");
          shown.className = "error";
          shown.setAttribute("data-role", "size");
          shown.setAttribute("role", "alert");
          field.appendChild(shown);
        }
        field.classList.add("invalid");
        shown.textContent = "body: the message body is " + Cairn.bytes(size) + " (" + size +
          " bytes); the broker takes at most " + Cairn.bytes(limit) + " (" + limit + " bytes)";
        form.elements.body.focus();
      });
    });
  }
  Cairn.bytes = function (n) {
    if (n < 1024) return n + " B";
    if (n < 1048576) return (n / 1024).toFixed(1) + " KiB";
    return (n / 1048576).toFixed(2) + " MiB";
  };

  function initAutofocus() {
    var target = document.querySelector("[data-autofocus]");
    if (!target) return;
    if (!target.hasAttribute("tabindex")) target.setAttribute("tabindex", "-1");
    target.focus({ preventScroll: true });
    target.scrollIntoView({ block: "center" });
  }

  // ---- small behaviours -----------------------------------------------------------------
  function initConfirm() {
    document.addEventListener("submit", function (ev) {
      var form = ev.target;
      var question = form.getAttribute("data-confirm");
      if (question && !window.confirm(question)) ev.preventDefault();
    });
  }
  function initCopy() {
    document.addEventListener("click", function (ev) {
      var btn = ev.target.closest("[data-copy]");
      if (!btn) return;
      ev.preventDefault();
      var text = btn.getAttribute("data-copy");
      var done = function () { var old = btn.textContent; btn.textContent = "copied"; setTimeout(function () { btn.textContent = old; }, 1200); };
      if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done);
      else {
        var ta = document.createElement("textarea"); ta.value = text; document.body.appendChild(ta); ta.select();
        try { document.execCommand("copy"); done(); } catch (e) { /* ignore */ }
        ta.remove();
      }
    });
  }
  function initTabs() {
    document.querySelectorAll("[data-tabs]").forEach(function (box) {
      var buttons = box.querySelectorAll("[role=tab]");
      var select = function (btn) {
        buttons.forEach(function (b) {
          var on = b === btn;
          b.setAttribute("aria-selected", on ? "true" : "false");
          b.tabIndex = on ? 0 : -1;
          var pane = document.getElementById(b.getAttribute("aria-controls"));
          if (pane) pane.classList.toggle("active", on);
        });
        try { localStorage.setItem("cairn-tab-" + box.getAttribute("data-tabs"), btn.getAttribute("data-tab")); } catch (e) { /* ignore */ }
      };
      buttons.forEach(function (b, i) {
        b.addEventListener("click", function () { select(b); });
        b.addEventListener("keydown", function (ev) {
          var dir = ev.key === "ArrowRight" ? 1 : ev.key === "ArrowLeft" ? -1 : 0;
          if (!dir) return;
          var list = Array.prototype.filter.call(buttons, function (x) { return !x.disabled; });
          var next = list[(list.indexOf(b) + dir + list.length) % list.length];
          next.focus(); select(next);
        });
      });
      var preferred = null;
      try { preferred = localStorage.getItem("cairn-tab-" + box.getAttribute("data-tabs")); } catch (e) { /* ignore */ }
      var initial = box.querySelector('[role=tab][data-tab="' + preferred + '"]:not([disabled])') || box.querySelector("[role=tab][data-default]") || buttons[0];
      if (initial) select(initial);
    });
  }
  function initShortcuts() {
    document.addEventListener("keydown", function (ev) {
      if (ev.key !== "/" || ev.ctrlKey || ev.metaKey || ev.altKey) return;
      var tag = (document.activeElement && document.activeElement.tagName) || "";
      if (/INPUT|TEXTAREA|SELECT/.test(tag)) return;
      var target = document.querySelector("[data-search-focus]");
      if (target) { ev.preventDefault(); target.focus(); if (target.select) target.select(); }
    });
  }
  function initTableFilter() {
    document.querySelectorAll("input[data-filter-table]").forEach(function (input) {
      var table = document.getElementById(input.getAttribute("data-filter-table"));
      if (!table) return;
      var counter = document.querySelector('[data-filter-count="' + table.id + '"]');
      var empty = document.querySelector('[data-filter-empty="' + table.id + '"]');
      var apply = function () {
        var q = input.value.trim().toLowerCase();
        var stored = q.replace(/\./g, "|"); // Kafka's shop.orders is the store's shop|orders
        var shown = 0;
        table.querySelectorAll("tbody tr").forEach(function (tr) {
          var text = (tr.getAttribute("data-search") || tr.textContent).toLowerCase();
          var hit = !q || text.indexOf(q) >= 0 || text.indexOf(stored) >= 0;
          tr.hidden = !hit;
          if (hit) shown++;
        });
        if (counter) counter.textContent = shown;
        if (empty) empty.hidden = shown !== 0;
      };
      input.addEventListener("input", apply);
      apply();
    });
  }
  function initAutoRefresh() {
    // <div data-refresh="url" data-refresh-every="5000">: its HTML is replaced periodically.
    document.querySelectorAll("[data-refresh]").forEach(function (box) {
      var every = Number(box.getAttribute("data-refresh-every") || 5000);
      var busy = false;
      var tick = function () {
        if (document.hidden || busy) return;
        busy = true;
        fetch(box.getAttribute("data-refresh"), { headers: { "X-Requested-With": "fetch" }, credentials: "same-origin" })
          .then(function (r) {
            if (r.redirected && r.url.indexOf("/login/") >= 0) { location.reload(); throw new Error("logged out"); }
            if (!r.ok) throw new Error(r.status);
            return r.text();
          })
          .then(function (html) {
            // What the reader opened or focused survives the new HTML (elements with an id).
            var opened = Array.prototype.map.call(box.querySelectorAll("details[id][open]"), function (d) { return d.id; });
            var focused = box.contains(document.activeElement) ? document.activeElement.id : "";
            box.innerHTML = html;
            opened.forEach(function (id) {
              var d = document.getElementById(id);
              if (d && box.contains(d)) d.open = true;
            });
            var again = focused && document.getElementById(focused);
            if (again && box.contains(again)) again.focus();
            Cairn.localizeTimes(box);
            box.dispatchEvent(new CustomEvent("cairn:refreshed", { bubbles: true }));
            box.removeAttribute("data-stale");
          })
          .catch(function () { box.setAttribute("data-stale", "true"); })
          .then(function () { busy = false; });
      };
      setInterval(tick, every);
    });
  }
  function initAutoSubmit() {
    // <input data-autosubmit>: changing it submits its form (no inline handlers: the CSP).
    document.addEventListener("change", function (ev) {
      var input = ev.target.closest && ev.target.closest("[data-autosubmit]");
      if (input && input.form) input.form.submit();
    });
  }
  function initBack() {
    document.addEventListener("click", function (ev) {
      if (!ev.target.closest || !ev.target.closest("[data-back]")) return;
      ev.preventDefault();
      history.back();
    });
  }
  function initCheckAll() {
    document.querySelectorAll("input[data-check-all]").forEach(function (box) {
      var name = box.getAttribute("data-check-all");
      var form = box.closest("form");
      box.addEventListener("change", function () {
        form.querySelectorAll('input[type=checkbox][name="' + name + '"]').forEach(function (c) { c.checked = box.checked; });
      });
    });
  }
  function initTickingAgo() {
    setInterval(function () {
      document.querySelectorAll('time[data-style="relative"]').forEach(Cairn.localizeTime);
    }, 15000);
  }

  function initNav() {
    var current = document.querySelector('.mainnav [aria-current="page"]');
    var nav = current && current.parentElement;
    if (nav && nav.scrollWidth > nav.clientWidth) nav.scrollLeft = current.offsetLeft - (nav.clientWidth - current.offsetWidth) / 2;
  }

  document.addEventListener("DOMContentLoaded", function () {
    initTheme();
    initNav();
    Cairn.localizeTimes();
    initTimeInputs();
    initConfirm();
    initCopy();
    initTabs();
    initShortcuts();
    initTableFilter();
    initAutoRefresh();
    initCheckAll();
    initAutoSubmit();
    initBack();
    initTickingAgo();
    initBodyLimit();
    initAutofocus();
  });
})();
