/* A small SVG line chart for the overview: messages in and out per second over the last hour.
   Cairn.drawThroughput(box, series) where series = {interval_s, window_s, points: [[t_ms, in, out]]}. */
(function () {
  "use strict";
  var Cairn = (window.Cairn = window.Cairn || {});
  var NS = "http://www.w3.org/2000/svg";
  var pad2 = function (n) { return (n < 10 ? "0" : "") + n; };

  function el(name, attrs, parent) {
    var node = document.createElementNS(NS, name);
    for (var k in attrs) node.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(node);
    return node;
  }
  function niceMax(v) {
    if (v <= 0) return 1;
    var exp = Math.pow(10, Math.floor(Math.log10(v)));
    var f = v / exp;
    var nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10;
    return nice * exp;
  }
  function fmtRate(v) {
    if (v >= 1000) return (v / 1000).toFixed(v >= 10000 ? 0 : 1) + "k";
    if (v >= 10 || v === 0) return String(Math.round(v));
    return v.toFixed(1);
  }

  Cairn.drawThroughput = function (box, series) {
    box.innerHTML = "";
    var points = (series && series.points) || [];
    var windowMs = ((series && series.window_s) || 3600) * 1000;
    if (points.length < 2) {
      var empty = document.createElement("div");
      empty.className = "chart-empty";
      empty.innerHTML = "<div><strong>Collecting data</strong><br>The chart fills in as the broker runs (a point every " +
        ((series && series.interval_s) || 5) + " s).</div>";
      box.appendChild(empty);
      return;
    }
    var W = Math.max(320, box.clientWidth), H = box.clientHeight || 220;
    var m = { l: 44, r: 12, t: 10, b: 24 };
    var now = points[points.length - 1][0];
    var x0 = now - windowMs, x1 = now;
    var maxY = 0;
    points.forEach(function (p) { maxY = Math.max(maxY, p[1], p[2]); });
    var yMax = niceMax(maxY * 1.1);
    var sx = function (t) { return m.l + (t - x0) / (x1 - x0) * (W - m.l - m.r); };
    var sy = function (v) { return H - m.b - v / yMax * (H - m.t - m.b); };
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "Messages in and out per second, last hour" }, box);

    for (var i = 0; i <= 4; i++) {
      var v = yMax * i / 4, y = sy(v);
      el("line", { x1: m.l, x2: W - m.r, y1: y, y2: y, "class": "grid-line" }, svg);
      var label = el("text", { x: m.l - 6, y: y + 4, "text-anchor": "end", "class": "axis-label" }, svg);
      label.textContent = fmtRate(v);
    }
    var step = 10 * 60 * 1000;
    for (var t = Math.ceil(x0 / step) * step; t <= x1; t += step) {
      var d = new Date(t);
      var tx = el("text", { x: sx(t), y: H - 6, "text-anchor": "middle", "class": "axis-label" }, svg);
      tx.textContent = pad2(d.getHours()) + ":" + pad2(d.getMinutes());
    }
    var visible = points.filter(function (p) { return p[0] >= x0; });
    var path = function (idx) {
      return visible.map(function (p, j) { return (j ? "L" : "M") + sx(p[0]).toFixed(1) + "," + sy(p[idx]).toFixed(1); }).join("");
    };
    if (visible.length) {
      var first = visible[0], last = visible[visible.length - 1];
      el("path", { d: path(1) + "L" + sx(last[0]).toFixed(1) + "," + sy(0) + "L" + sx(first[0]).toFixed(1) + "," + sy(0) + "Z", "class": "area in" }, svg);
      el("path", { d: path(1), "class": "line in" }, svg);
      el("path", { d: path(2), "class": "line out" }, svg);
      el("circle", { cx: sx(last[0]), cy: sy(last[1]), r: 3.5, "class": "point in" }, svg);
      el("circle", { cx: sx(last[0]), cy: sy(last[2]), r: 3.5, "class": "point out" }, svg);
    }
    var cursor = el("line", { y1: m.t, y2: H - m.b, "class": "cursor", visibility: "hidden" }, svg);
    var tip = document.createElement("div");
    tip.className = "tip";
    tip.hidden = true;
    box.appendChild(tip);
    svg.addEventListener("mousemove", function (ev) {
      var rect = svg.getBoundingClientRect();
      var px = (ev.clientX - rect.left) * (W / rect.width);
      var t = x0 + (px - m.l) / (W - m.l - m.r) * (x1 - x0);
      var best = null;
      visible.forEach(function (p) { if (!best || Math.abs(p[0] - t) < Math.abs(best[0] - t)) best = p; });
      if (!best) return;
      var cx = sx(best[0]);
      cursor.setAttribute("x1", cx); cursor.setAttribute("x2", cx); cursor.setAttribute("visibility", "visible");
      tip.hidden = false;
      tip.innerHTML = "<strong>" + Cairn.formatTime(best[0], "short") + "</strong><br>in " + best[1].toFixed(2) + "/s · out " + best[2].toFixed(2) + "/s";
      var left = cx / W * rect.width + 12;
      if (left > rect.width - 170) left -= 190;
      tip.style.left = left + "px";
      tip.style.top = "8px";
    });
    svg.addEventListener("mouseleave", function () { cursor.setAttribute("visibility", "hidden"); tip.hidden = true; });
  };

  function drawAll() {
    document.querySelectorAll("[data-chart]").forEach(function (box) {
      var source = document.getElementById(box.getAttribute("data-chart"));
      if (!source) return;
      try { Cairn.drawThroughput(box, JSON.parse(source.textContent)); } catch (e) { /* leave it empty */ }
    });
  }
  document.addEventListener("DOMContentLoaded", drawAll);
  document.addEventListener("cairn:refreshed", drawAll);
  var timer = null;
  window.addEventListener("resize", function () { clearTimeout(timer); timer = setTimeout(drawAll, 150); });
})();
