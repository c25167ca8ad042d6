/* Messages page: tabs switch search modes in place; a search streams its results
   (NDJSON from /messages/stream/) into the table with a progress bar and a final verdict. */
(function () {
  "use strict";
  var Cairn = window.Cairn;
  var config = JSON.parse(document.getElementById("search-config").textContent);
  var results = document.getElementById("results");
  var part = function (role) { return results.querySelector('[data-role="' + role + '"]'); };
  var tbody = results.querySelector("tbody");
  var controller = null;

  function esc(s) {
    return String(s == null ? "" : s).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function showMode(mode, focus) {
    document.querySelectorAll(".tab-link").forEach(function (a) { a.setAttribute("aria-selected", a.getAttribute("data-mode") === mode ? "true" : "false"); });
    document.querySelectorAll("form.search-form").forEach(function (f) {
      var on = f.getAttribute("data-mode") === mode;
      f.hidden = !on;
      f.querySelectorAll("[data-search-focus]").forEach(function (i) { i.removeAttribute("data-search-focus"); });
      if (on) {
        var first = f.querySelector("input[type=search], select, input[type=text]");
        if (first) { first.setAttribute("data-search-focus", ""); if (focus) first.focus(); }
      }
    });
  }
  document.querySelectorAll(".tab-link").forEach(function (a) {
    a.addEventListener("click", function (ev) {
      ev.preventDefault();
      showMode(a.getAttribute("data-mode"), true);
      history.replaceState(null, "", "?tab=" + a.getAttribute("data-mode"));
    });
  });

  function row(m) {
    var tr = document.createElement("tr");
    tr.className = "row-new";
    var keys = (m.keys || []).map(function (k) { return '<span class="tag">' + esc(k) + "</span>"; }).join("") || '<span class="muted">–</span>';
    tr.innerHTML =
      '<td class="nowrap"></td>' +
      '<td><a href="' + config.topic + encodeURIComponent(m.topic) + '/">' + esc(m.topic) + "</a></td>" +
      '<td class="num">' + m.queue_id + " · " + m.queue_offset + "</td>" +
      (m.archived
        ? '<td><span class="id">' + esc(m.msg_id) + '</span> <span class="badge muted" title="from the data pipeline\'s archive: cleanup deleted it from the CommitLog">archived</span></td>'
        : '<td><a class="id" href="' + config.message + encodeURIComponent(m.offset_msg_id) + '/">' + esc(m.msg_id) + "</a></td>") +
      '<td class="keys">' + keys + "</td>" +
      "<td>" + (m.tag ? '<span class="tag">' + esc(m.tag) + "</span>" : '<span class="muted">–</span>') + "</td>" +
      '<td class="body-cell" title="' + m.body_size + ' bytes">' + esc(m.body) + "</td>";
    tr.firstChild.appendChild(Cairn.timeElement(m.store_timestamp, "short"));
    return tr;
  }

  function setProgress(fraction, indeterminate) {
    var bar = part("progress");
    bar.hidden = false;
    bar.classList.toggle("indeterminate", !!indeterminate);
    bar.classList.toggle("done", fraction >= 1 && !indeterminate);
    bar.firstElementChild.style.width = Math.round((fraction || 0) * 100) + "%";
  }

  function verdict(done, limit, params) {
    var state = part("state"), foot = part("foot");
    var text = foot.querySelector('[data-role="foot-text"]');
    var next = foot.querySelector('[data-role="next"]');
    if (next) next.remove();
    foot.hidden = true;
    if (done.reason === "exhausted") {
      state.innerHTML = '<span class="badge ok">complete</span>';
    } else {
      state.innerHTML = '<span class="badge warn">' + (done.reason === "limit" ? "limit reached" : "scan budget used") + "</span>";
      foot.hidden = false;
      text.textContent = done.reason === "limit"
        ? "Stopped at the limit of " + limit + "; more messages may match."
        : "Scanned the most a search may scan without filling the limit.";
      if (done.next) {
        var a = document.createElement("a");
        a.className = "btn btn-sm";
        a.setAttribute("data-role", "next");
        a.textContent = "Next " + limit + " →";
        a.href = "?" + new URLSearchParams(done.next).toString();
        a.addEventListener("click", function (ev) { ev.preventDefault(); run(new URLSearchParams(done.next), true); });
        foot.insertBefore(a, text);
      }
    }
  }

  function run(params, push) {
    if (controller) controller.abort();
    controller = new AbortController();
    var limit = Number(params.get("limit") || 50);
    var found = 0;
    tbody.innerHTML = "";
    part("table").hidden = true;
    part("empty").hidden = true;
    part("foot").hidden = true;
    part("state").innerHTML = '<span class="badge info">searching…</span>';
    part("summary").textContent = "0 found · limit " + limit;
    part("detail").textContent = "";
    var err = part("error");
    if (err) err.parentNode.remove();
    setProgress(0, true);
    if (push) history.pushState(null, "", "?" + params.toString());
    var started = performance.now();
    var finish = function (done) {
      setProgress(1, false);
      part("detail").textContent = "in " + Math.round(performance.now() - started) + " ms";
      if (!found) part("empty").hidden = false;
      if (done) verdict(done, limit, params);
    };
    var handle = function (ev) {
      if (ev.type === "message") {
        found++;
        part("table").hidden = false;
        tbody.appendChild(row(ev.message));
        part("summary").textContent = found + " found · limit " + limit;
      } else if (ev.type === "progress") {
        setProgress(ev.fraction, false);
        if (ev.detail) part("detail").textContent = ev.detail;
      } else if (ev.type === "done") {
        finish(ev);
      } else if (ev.type === "error") {
        finish(null);
        part("state").innerHTML = '<span class="badge danger">failed</span>';
        part("empty").hidden = true;
        var box = document.createElement("div");
        box.className = "card-body";
        box.innerHTML = '<div class="notice danger" data-role="error"></div>';
        box.firstChild.textContent = ev.detail;
        part("progress").after(box);
      }
    };
    fetch(config.stream + "?" + params.toString(), { credentials: "same-origin", signal: controller.signal })
      .then(function (response) {
        if (!response.ok) {
          return response.json().then(function (body) {
            var errors = body.errors ? Object.keys(body.errors).map(function (k) { return k + ": " + body.errors[k]; }).join("; ") : "";
            handle({ type: "error", detail: (body.detail || "search failed") + (errors ? " (" + errors + ")" : "") });
          });
        }
        var reader = response.body.getReader();
        var decoder = new TextDecoder();
        var buffer = "";
        var pump = function () {
          return reader.read().then(function (chunk) {
            if (chunk.done) return;
            buffer += decoder.decode(chunk.value, { stream: true });
            var lines = buffer.split("\n");
            buffer = lines.pop();
            lines.forEach(function (line) { if (line) handle(JSON.parse(line)); });
            return pump();
          });
        };
        return pump();
      })
      .catch(function (e) {
        if (e.name !== "AbortError") handle({ type: "error", detail: "the connection failed: " + e.message });
      });
  }

  document.querySelectorAll("form.search-form").forEach(function (form) {
    form.addEventListener("submit", function (ev) {
      var mode = form.getAttribute("data-mode");
      Cairn.syncMs(form);
      var params = new URLSearchParams(new FormData(form));
      // The visible datetime-local values are in the browser's zone; the _ms fields carry them.
      params.delete("begin"); params.delete("end");
      if (mode === "id") return;  // a full page: the server opens the message directly
      ev.preventDefault();
      run(params, true);
    });
  });
  window.addEventListener("popstate", function () { location.reload(); });
})();
