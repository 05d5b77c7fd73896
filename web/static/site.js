/* regress index filters: shape, mode, layout, stack, suite and a name search over the case table.
 * Rows carry data-* attributes; nothing is fetched. */
(function () {
  "use strict";
  function fmt(v, digits) {
    if (v === null || v === undefined) return "";
    var a = Math.abs(v);
    if (a === 0) return "0";
    if (Number.isInteger(v) && a < 1e7) return String(v);
    return a >= 100 ? v.toFixed(1) : a >= 1 ? v.toFixed(digits || 3) : v.toPrecision(digits || 4);
  }

  /* run pages: the results table is built from the embedded rows (textContent only). */
  function runTable() {
    var holder = document.getElementById("run-data");
    var table = document.getElementById("results");
    if (!holder || !table) return;
    var data = JSON.parse(holder.textContent), root = holder.getAttribute("data-root") || "";
    var body = table.tBodies[0], frag = document.createDocumentFragment(), trs = [];
    data.rows.forEach(function (r) {
      var c = data.cases[r[0]], tr = document.createElement("tr"), td;
      tr.dataset.suite = c[2];
      td = tr.insertCell(); var a = document.createElement("a");
      a.href = root + "case/" + c[0] + ".html"; a.textContent = c[1]; td.appendChild(a);
      tr.insertCell().textContent = c[2];
      td = tr.insertCell(); td.textContent = r[1]; td.className = "st-" + r[1];
      td = tr.insertCell(); td.textContent = fmt(r[2]); td.className = "n";
      tr.insertCell().textContent = data.units[c[2]] || "";
      td = tr.insertCell(); td.className = "n"; if (r[3] !== null) td.textContent = fmt(r[3]) + " – " + fmt(r[4]);
      td = tr.insertCell(); td.className = "n"; td.textContent = fmt(r[5]);
      td = tr.insertCell(); td.className = "n"; td.textContent = fmt(r[6]);
      tr.insertCell().textContent = r[7] || "";
      frag.appendChild(tr); trs.push(tr);
    });
    body.appendChild(frag);
    var controls = document.querySelectorAll("[data-run-filter]"), count = document.getElementById("result-count");
    function apply() {
      var q = "", suite = "", shown = 0;
      controls.forEach(function (c) {
        if (c.getAttribute("data-run-filter") === "q") q = c.value.trim().toLowerCase(); else suite = c.value;
      });
      trs.forEach(function (tr) {
        var ok = (!suite || tr.dataset.suite === suite) && (!q || tr.cells[0].textContent.toLowerCase().indexOf(q) >= 0);
        tr.hidden = !ok; if (ok) shown++;
      });
      if (count) count.textContent = shown + " of " + trs.length + " results";
    }
    controls.forEach(function (c) { c.addEventListener(c.tagName === "INPUT" ? "input" : "change", apply); });
    apply();
  }

  function boot() {
    runTable();
    var table = document.getElementById("cases");
    if (!table) return;
    var controls = document.querySelectorAll("[data-filter]");
    var rows = table.tBodies[0].rows;
    var count = document.getElementById("case-count");
    var params = new URLSearchParams(window.location.hash.slice(1));
    controls.forEach(function (c) { if (params.get(c.getAttribute("data-filter"))) c.value = params.get(c.getAttribute("data-filter")); });

    function apply() {
      var want = {}, hash = [];
      controls.forEach(function (c) {
        var v = c.value.trim();
        if (v) { want[c.getAttribute("data-filter")] = v; hash.push(c.getAttribute("data-filter") + "=" + encodeURIComponent(v)); }
      });
      var shown = 0, q = (want.q || "").toLowerCase();
      for (var i = 0; i < rows.length; i++) {
        var r = rows[i], d = r.dataset, ok = true;
        if (want.suite && d.suite !== want.suite) ok = false;
        if (want.shape && d.shape !== want.shape) ok = false;
        if (want.mode && d.mode !== want.mode) ok = false;
        if (want.layout && d.layout !== want.layout) ok = false;
        if (want.stack && (" " + d.stacks + " ").indexOf(" " + want.stack + " ") < 0) ok = false;
        if (want.flag && !d.flag) ok = false;
        if (q && r.cells[0].textContent.toLowerCase().indexOf(q) < 0) ok = false;
        r.hidden = !ok;
        if (ok) shown++;
      }
      // with one stack chosen, only its column stays
      table.querySelectorAll("[data-col]").forEach(function (cell) {
        cell.hidden = !!want.stack && cell.getAttribute("data-col") !== want.stack;
      });
      if (count) count.textContent = shown + " of " + rows.length + " cases";
      try { history.replaceState(null, "", hash.length ? "#" + hash.join("&") : window.location.pathname); }
      catch (e) { /* some file:// setups refuse; the filter still works */ }
    }
    controls.forEach(function (c) { c.addEventListener(c.tagName === "INPUT" ? "input" : "change", apply); });
    apply();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", boot);
  else boot();
})();
