/* regress trend charts: a small SVG chart written for this site (no library, no network).
 * One line per stack with an optional p5–p95 band, stack-change markers, change points and
 * regressions; hover shows the run, commit, stack digest and values; click opens the run page.
 * All text goes in through textContent, never innerHTML: names come from uploads. */
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = ["#2563eb", "#d97706", "#059669", "#7c3aed", "#db2777", "#0891b2", "#65a30d", "#4b5563"];
  var STATUS = ["pass", "fail", "error", "skip", "other"];
  var DAY = 86400;

  function svg(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) if (attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function html(tag, cls, parent, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function fmt(v, unit) {
    if (v === null || v === undefined || isNaN(v)) return "–";
    var a = Math.abs(v), s;
    if (a === 0) s = "0";
    else if (Number.isInteger(v) && a < 1e7) s = String(v);
    else if (a >= 100) s = v.toFixed(1);
    else if (a >= 1) s = v.toFixed(3);
    else s = v.toPrecision(4);
    return unit ? s + " " + unit : s;
  }
  function date(x) { return new Date(x * 1000).toISOString().slice(0, 16).replace("T", " "); }
  function niceStep(span, n) {
    var raw = span / Math.max(1, n), p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
  }
  function lowerBound(xs, x) {
    var lo = 0, hi = xs.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (xs[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
  }

  /* opts: {stacks, field, band, limit, markers, changes, regressions, unit, label, root, height, small} */
  function Chart(host, opts) {
    this.host = host;
    this.o = opts;
    this.hidden = {};
    this.days = 0; // 0: all
    host.classList.add("chart");
    this.controls = html("div", "chart-controls", host);
    this.box = html("div", "chart-box", host);
    this.tip = html("div", "tip", this.box);
    this.tip.hidden = true;
    this._controls();
    this.draw();
    var self = this, pending = null;
    window.addEventListener("resize", function () {
      if (pending) return;
      pending = setTimeout(function () { pending = null; self.draw(); }, 100);
    });
  }

  Chart.prototype._controls = function () {
    var self = this, o = this.o;
    if (!o.small) {
      [["all", 0], ["1y", 365], ["90d", 90], ["30d", 30]].forEach(function (r) {
        var b = html("button", "range" + (r[1] === 0 ? " on" : ""), self.controls, r[0]);
        b.type = "button";
        b.addEventListener("click", function () {
          self.days = r[1];
          self.controls.querySelectorAll(".range").forEach(function (x) { x.classList.remove("on"); });
          b.classList.add("on");
          self.draw();
        });
      });
    }
    o.stacks.forEach(function (s) {
      var b = html("button", "legend", self.controls);
      b.type = "button";
      var sw = html("span", "swatch", b);
      sw.style.background = COLORS[s.color % COLORS.length];
      html("span", "", b, s.name + " ");
      html("code", "", b, s.digest);
      b.title = "show or hide stack " + s.name;
      b.addEventListener("click", function () {
        self.hidden[s.id] = !self.hidden[s.id];
        b.classList.toggle("off", !!self.hidden[s.id]);
        self.draw();
      });
    });
  };

  Chart.prototype.draw = function () {
    var o = this.o, self = this, field = o.field || "y";
    var W = Math.max(320, this.box.clientWidth || 800), H = o.height || (o.small ? 170 : 320);
    var m = { l: 64, r: 16, t: o.small ? 10 : 26, b: 28 };
    var visible = o.stacks.filter(function (s) { return !self.hidden[s.id] && s.x.length; });
    var xmax = -Infinity, xmin = Infinity;
    o.stacks.forEach(function (s) {
      if (s.x.length) { xmax = Math.max(xmax, s.x[s.x.length - 1]); xmin = Math.min(xmin, s.x[0]); }
    });
    if (this.days) xmin = Math.max(xmin, xmax - this.days * DAY);
    if (!isFinite(xmin)) { xmin = 0; xmax = 1; }
    if (xmax - xmin < DAY) { xmin -= DAY / 2; xmax += DAY / 2; }
    var ymin = Infinity, ymax = -Infinity;
    visible.forEach(function (s) {
      var ys = s[field];
      for (var i = lowerBound(s.x, xmin); i < s.x.length; i++) {
        var v = ys[i];
        if (v === null) continue;
        ymin = Math.min(ymin, v); ymax = Math.max(ymax, v);
        if (o.band && s.lo && s.lo[i] !== null) ymin = Math.min(ymin, s.lo[i]);
        if (o.band && s.hi && s.hi[i] !== null) ymax = Math.max(ymax, s.hi[i]);
      }
    });
    if (o.limit !== null && o.limit !== undefined) { ymax = Math.max(ymax, o.limit); ymin = Math.min(ymin, o.limit); }
    if (!isFinite(ymin)) { ymin = 0; ymax = 1; }
    var pad = (ymax - ymin) * 0.08 || Math.abs(ymax) * 0.1 || 1;
    ymin -= pad; ymax += pad;
    if (field === "y" && o.unit === "distinct hashes") { ymin = 0; ymax = Math.max(ymax, 2.5); }
    var X = function (x) { return m.l + (x - xmin) / (xmax - xmin) * (W - m.l - m.r); };
    var Y = function (y) { return H - m.b - (y - ymin) / (ymax - ymin) * (H - m.t - m.b); };
    this.X = X; this.Y = Y; this.xmin = xmin; this.xmax = xmax;

    if (this.svg) this.svg.remove();
    var root = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img",
      "aria-label": (o.label || "") + " over time" });
    this.box.insertBefore(root, this.tip);
    this.svg = root;
    svg("rect", { x: m.l, y: m.t, width: W - m.l - m.r, height: H - m.t - m.b, class: "plot" }, root);

    // axes
    var ax = svg("g", { class: "axis" }, root), step = niceStep(ymax - ymin, o.small ? 3 : 6);
    var dec = Math.max(0, -Math.floor(Math.log10(step)));
    for (var k = Math.ceil(ymin / step); k * step <= ymax; k++) {
      var v = k * step;
      svg("line", { x1: m.l, x2: W - m.r, y1: Y(v), y2: Y(v), class: "grid" }, ax);
      svg("text", { x: m.l - 6, y: Y(v) + 4, "text-anchor": "end" }, ax).textContent = v.toFixed(dec);
    }
    var span = (xmax - xmin) / DAY, tstep = span > 400 ? 91 : span > 120 ? 30 : span > 40 ? 7 : span > 10 ? 2 : 1;
    var start = new Date(xmin * 1000); start.setUTCHours(0, 0, 0, 0);
    if (tstep >= 30) start.setUTCDate(1);
    var guard = 0;
    for (var d = new Date(start); d.getTime() / 1000 <= xmax && guard < 60; guard++) {
      var x = d.getTime() / 1000;
      if (x >= xmin) {
        svg("line", { x1: X(x), x2: X(x), y1: m.t, y2: H - m.b, class: "grid" }, ax);
        svg("text", { x: X(x), y: H - m.b + 16, "text-anchor": "middle" }, ax).textContent =
          d.toISOString().slice(0, tstep >= 30 ? 7 : 10);
      }
      if (tstep >= 30) d.setUTCMonth(d.getUTCMonth() + Math.round(tstep / 30));
      else d.setUTCDate(d.getUTCDate() + tstep);
    }
    if (o.label && !o.small) svg("text", { x: 8, y: 16, class: "ylabel" }, root).textContent = o.label;
    if (o.limit !== null && o.limit !== undefined) {
      svg("line", { x1: m.l, x2: W - m.r, y1: Y(o.limit), y2: Y(o.limit), class: "limit" }, root);
      svg("text", { x: W - m.r - 4, y: Y(o.limit) - 4, "text-anchor": "end", class: "limit-label" }, root)
        .textContent = "limit " + o.limit;
    }

    // stack changes
    (o.markers || []).forEach(function (mk) {
      if (mk.x < xmin || mk.x > xmax) return;
      var a = svg("a", { href: (o.root || "") + mk.href, class: "marker" }, root);
      svg("line", { x1: X(mk.x), x2: X(mk.x), y1: m.t, y2: H - m.b }, a);
      if (!o.small) svg("text", { x: X(mk.x) + 4, y: m.t + 12 }, a).textContent = "stack: " + mk.label;
      svg("title", {}, a).textContent = "stack change " + mk.label + " (open the diff)";
    });
    // regressions: a red rule from the first bad run
    (o.regressions || []).forEach(function (rg) {
      if (rg.x < xmin || rg.x > xmax || self.hidden[rg.stack]) return;
      var g = svg("g", { class: "regression " + rg.state }, root);
      svg("line", { x1: X(rg.x), x2: X(rg.x), y1: m.t, y2: H - m.b }, g);
      if (!o.small) svg("text", { x: X(rg.x) - 4, y: H - m.b - 6, "text-anchor": "end" }, g).textContent = rg.label;
      svg("title", {}, g).textContent = rg.label;
    });

    var clipId = "clip" + Math.random().toString(36).slice(2);
    var cp = svg("clipPath", { id: clipId }, root);
    svg("rect", { x: m.l, y: m.t, width: W - m.l - m.r, height: H - m.t - m.b }, cp);
    var plot = svg("g", { "clip-path": "url(#" + clipId + ")" }, root);
    visible.forEach(function (s) {
      var c = COLORS[s.color % COLORS.length], ys = s[field];
      var first = Math.max(0, lowerBound(s.x, xmin) - 1), i;
      if (o.band && s.lo && s.hi) {
        var top = [], bot = [];
        for (i = first; i < s.x.length; i++) {
          if (s.lo[i] === null || s.hi[i] === null) continue;
          top.push(X(s.x[i]).toFixed(1) + "," + Y(s.hi[i]).toFixed(1));
          bot.push(X(s.x[i]).toFixed(1) + "," + Y(s.lo[i]).toFixed(1));
        }
        if (top.length) svg("polygon", { points: top.concat(bot.reverse()).join(" "), fill: c, class: "band" }, plot);
      }
      var dpath = "", pen = false;
      for (i = first; i < s.x.length; i++) {
        if (ys[i] === null) { pen = false; continue; }
        dpath += (pen ? "L" : "M") + X(s.x[i]).toFixed(1) + "," + Y(ys[i]).toFixed(1);
        pen = true;
      }
      svg("path", { d: dpath, stroke: c, class: "line" }, plot);
      var pts = svg("g", { fill: c, class: "points", "data-stack": s.name }, plot);
      for (i = first; i < s.x.length; i++) {
        if (ys[i] === null) continue;
        svg("circle", { cx: X(s.x[i]).toFixed(1), cy: Y(ys[i]).toFixed(1), r: s.st[i] ? 3.2 : 1.8,
          class: s.st[i] ? "bad" : null }, pts);
      }
    });
    // change points (detector output): triangles, red when the value went up (slower / worse)
    if (field === "y") (o.changes || []).forEach(function (ch) {
      if (ch.x < xmin || ch.x > xmax || self.hidden[ch.stack]) return;
      var x = X(ch.x), y = Y(ch.y), up = ch.dir === "up";
      var g = svg("g", { class: "change " + (up ? "worse" : "better") }, root);
      svg("path", { d: up ? "M" + x + "," + (y - 14) + "l-6,10h12z" : "M" + x + "," + (y + 14) + "l-6,-10h12z" }, g);
      svg("title", {}, g).textContent = "change point " + (ch.mag !== null ? (ch.mag * 100).toFixed(1) + "%" : ch.dir) +
        (ch.p !== null ? " (p=" + ch.p.toPrecision(2) + ")" : "") + " at run " + ch.run;
    });

    // hover layer
    this.cross = svg("line", { y1: m.t, y2: H - m.b, class: "cross", visibility: "hidden" }, root);
    this.dot = svg("circle", { r: 5, class: "hover-dot", visibility: "hidden" }, root);
    var hit = svg("rect", { x: m.l, y: m.t, width: W - m.l - m.r, height: H - m.t - m.b, class: "hit" }, root);
    hit.addEventListener("mousemove", function (ev) { self.hover(ev); });
    hit.addEventListener("mouseleave", function () { self.unhover(); });
    hit.addEventListener("click", function () {
      if (self.cur) window.location.href = (o.root || "") + "run/" + self.cur.s.run[self.cur.i] + ".html";
    });
  };

  Chart.prototype.nearest = function (px, py) {
    var o = this.o, self = this, best = null, field = o.field || "y";
    var x = this.xmin + (px - this.X(this.xmin)) / (this.X(this.xmax) - this.X(this.xmin)) * (this.xmax - this.xmin);
    o.stacks.forEach(function (s) {
      if (self.hidden[s.id] || !s.x.length) return;
      var j = lowerBound(s.x, x);
      for (var i = Math.max(0, j - 2); i < Math.min(s.x.length, j + 2); i++) {
        var v = s[field][i];
        if (v === null) continue;
        var dx = self.X(s.x[i]) - px, dy = self.Y(v) - py, dist = dx * dx + dy * dy * 0.25;
        if (!best || dist < best.d) best = { s: s, i: i, d: dist };
      }
    });
    return best;
  };

  Chart.prototype.hover = function (ev) {
    var r = this.svg.getBoundingClientRect();
    var hit = this.nearest(ev.clientX - r.left, ev.clientY - r.top);
    if (!hit) return this.unhover();
    this.cur = hit;
    var s = hit.s, i = hit.i, o = this.o, field = o.field || "y", cx = this.X(s.x[i]), cy = this.Y(s[field][i]);
    this.cross.setAttribute("x1", cx); this.cross.setAttribute("x2", cx);
    this.cross.setAttribute("visibility", "visible");
    this.dot.setAttribute("cx", cx); this.dot.setAttribute("cy", cy);
    this.dot.setAttribute("stroke", COLORS[s.color % COLORS.length]);
    this.dot.setAttribute("visibility", "visible");
    var t = this.tip;
    t.textContent = "";
    html("div", "tip-title", t, date(s.x[i]) + " · " + STATUS[s.st[i]]);
    var rows = [
      ["stack", s.name],
      ["digest", s.digest],
      ["run", s.run[i]],
      ["commit", s.commit[i] || "–"],
      [o.label || "value", fmt(s[field][i], field === "y" ? o.unit : "")]
    ];
    if (o.band && s.lo) rows.push(["p5–p95", fmt(s.lo[i]) + " – " + fmt(s.hi[i], o.unit)]);
    if (field === "y" && s.sp && s.sp[i] !== null) rows.push(["speedup", fmt(s.sp[i]) + "×"]);
    var dl = html("dl", "", t);
    rows.forEach(function (row) { html("dt", "", dl, row[0]); html("dd", "", dl, row[1]); });
    html("div", "tip-hint", t, "click: open the run");
    t.hidden = false;
    var bw = this.box.clientWidth, left = cx + 14;
    if (left + 260 > bw) left = Math.max(0, cx - 274);
    t.style.left = left + "px";
    t.style.top = Math.max(0, cy - 40) + "px";
  };

  Chart.prototype.unhover = function () {
    this.cur = null;
    this.tip.hidden = true;
    if (this.cross) this.cross.setAttribute("visibility", "hidden");
    if (this.dot) this.dot.setAttribute("visibility", "hidden");
  };

  function boot() {
    var holder = document.getElementById("chart-data");
    if (!holder) return;
    var data = JSON.parse(holder.textContent), main = data.main, root = holder.getAttribute("data-root") || "";
    var runs = data.runs;
    // points refer to the page's run table: expand x, run id and commit per series once
    [main].concat(data.related || []).forEach(function (p) {
      p.stacks.forEach(function (s) {
        s.x = s.r.map(function (i) { return runs.x[i]; });
        s.run = s.r.map(function (i) { return runs.id[i]; });
        s.commit = s.r.map(function (i) { return runs.commit[i]; });
      });
    });
    var charts = [];
    var host = document.getElementById("chart-main");
    if (host) charts.push(new Chart(host, { stacks: main.stacks, field: "y", band: main.band, limit: main.limit,
      markers: main.markers, changes: main.changes, regressions: main.regressions, unit: main.unit,
      label: main.label, root: root }));
    var sp = document.getElementById("chart-speedup");
    if (sp && main.speedup) charts.push(new Chart(sp, { stacks: main.stacks, field: "sp", band: false,
      markers: main.markers, unit: "×", label: main.speedup_label, root: root, height: 220 }));
    (data.related || []).forEach(function (rel, k) {
      var h = document.getElementById("chart-related-" + k);
      if (h) charts.push(new Chart(h, { stacks: rel.stacks, field: "y", band: false, limit: rel.limit,
        markers: rel.markers, changes: rel.changes, regressions: rel.regressions, unit: rel.unit,
        label: rel.label, root: root, small: true }));
    });
    window.regressCharts = charts;
    window.regressReadyAt = performance.now(); // the benchmark's "interactive" mark
    document.documentElement.setAttribute("data-charts", String(charts.length));
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", boot);
  else boot();
})();
