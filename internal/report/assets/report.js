// The report's interactive charts: each chart's spec (internal/report's
// spec type, in #headroom-charts) drawn with uPlot. Point to read values
// (the legend follows the cursor), click a legend entry to toggle its
// series, drag to zoom the x axis (double-click resets), click a worker
// count to open that step's timelines.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("headroom-charts").textContent);

  // si writes a number with an SI suffix and at most three significant
  // digits, as siNumber does for the PNGs: 100M, 2.5k, 0.25.
  function si(v) {
    if (v == null || !isFinite(v)) return "–";
    v = +v.toPrecision(3); // first: 999.6 is 1k, not 1000
    const a = Math.abs(v);
    for (const [scale, suffix] of [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]]) {
      if (a >= scale) return String(+(v / scale).toPrecision(3)) + suffix;
    }
    return v === 0 ? "0" : String(+v.toPrecision(3));
  }

  // axisLabel: a tick the axis leaves unlabelled (null) stays blank.
  function axisLabel(v) {
    return v == null ? "" : si(v);
  }

  // workerSplits: a tick at every worker count on an axis of at most 20.
  function workerSplits(u, axisIdx, min, max, incr) {
    const lo = Math.ceil(min), hi = Math.floor(max);
    const step = hi - lo + 1 <= 20 ? 1 : incr;
    const out = [];
    for (let v = Math.ceil(min / step) * step; v <= max; v += step) out.push(v);
    return out;
  }

  // Vertical marks (regime boundaries) over the series, bands (memory
  // states) under them.
  function drawMarks(u, spec) {
    const ctx = u.ctx, top = u.bbox.top, height = u.bbox.height;
    ctx.save();
    ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
    ctx.lineWidth = devicePixelRatio;
    for (const m of spec.marks || []) {
      const x = u.valToPos(m.x, "x", true);
      if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
      ctx.strokeStyle = m.color;
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
    }
    ctx.restore();
  }
  function drawBands(u, spec) {
    const ctx = u.ctx;
    for (const b of spec.bands || []) {
      const x0 = Math.max(u.valToPos(b.from, "x", true), u.bbox.left);
      const x1 = Math.min(u.valToPos(b.to, "x", true), u.bbox.left + u.bbox.width);
      if (x1 <= x0) continue;
      ctx.fillStyle = b.color;
      ctx.fillRect(x0, u.bbox.top, x1 - x0, u.bbox.height);
    }
  }

  // make draws one spec into el; onPick(x) is called with the x value
  // under a click (not a drag).
  function make(spec, el, height, onPick) {
    const series = [{ label: spec.x_label, value: (u, v) => si(v) }];
    const columns = [spec.xs];
    for (const s of spec.series) {
      series.push({
        label: s.label, stroke: s.color, width: s.width || 1.5, dash: s.dash || undefined,
        points: { show: s.dots, size: 5, fill: s.color },
        paths: s.line ? undefined : () => null,
        value: (u, v) => si(v),
      });
      // null: no point at this x, the line goes on (undefined to uPlot);
      // a gap breaks it (null to uPlot).
      const ys = s.ys.map((v) => (v === null ? undefined : v));
      for (const i of s.gaps || []) ys[i] = null;
      columns.push(ys);
    }
    const width = Math.max(320, Math.min(el.clientWidth || 1000, 1000));
    const opts = {
      title: spec.title, width, height,
      scales: { x: { time: false }, y: spec.log_y ? { distr: 3 } : {} },
      axes: [
        { label: spec.x_label, values: (u, vals) => vals.map(axisLabel), splits: spec.workers_x ? workerSplits : undefined },
        { label: spec.y_label, values: (u, vals) => vals.map(axisLabel), size: 60 },
      ],
      series,
      cursor: { drag: { x: true, y: false } },
      hooks: { drawClear: [(u) => drawBands(u, spec)], draw: [(u) => drawMarks(u, spec)] },
    };
    const u = new uPlot(opts, columns, el);
    if (onPick) {
      let downX = null;
      u.over.addEventListener("mousedown", (e) => { downX = e.clientX; });
      u.over.addEventListener("click", (e) => {
        if (downX === null || Math.abs(e.clientX - downX) > 3) return; // a drag: a zoom
        const x = u.posToVal(e.clientX - u.over.getBoundingClientRect().left, "x");
        onPick(Math.round(x));
      });
      u.over.style.cursor = "pointer";
    }
    return u;
  }

  const plots = {};
  const timelinePlots = [];

  // open shows one step's timelines of one run (or of every run with
  // a step of that worker count) below the summary charts.
  function open(picks) {
    const box = document.getElementById("timeline");
    const holder = document.getElementById("timeline-charts");
    while (timelinePlots.length) timelinePlots.pop().destroy();
    holder.textContent = "";
    const titles = [];
    for (const [run, step] of picks) {
      const rt = data.timelines[run];
      titles.push(`${rt.label}, step ${step.index} (${step.workers} workers${step.repeat ? ", repeat " + step.repeat : ""})`);
      for (const spec of step.charts) {
        const el = document.createElement("div");
        el.className = "chart";
        el.dataset.run = run;
        el.dataset.step = step.index;
        el.dataset.chart = spec.name;
        holder.appendChild(el);
        timelinePlots.push(make(Object.assign({}, spec, { title: `${spec.title}: ${rt.label}, step ${step.index} (${step.workers} workers)` }), el, 260, null));
      }
    }
    document.getElementById("timeline-title").textContent = "Step timelines: " + titles.join("; ");
    box.hidden = false;
    box.scrollIntoView({ block: "start" });
  }

  // openWorkers opens, for every run, the first step run with x workers.
  function openWorkers(x) {
    const picks = [];
    data.timelines.forEach((rt, run) => {
      const step = rt.steps.find((s) => s.workers === x);
      if (step) picks.push([run, step]);
    });
    if (picks.length) open(picks);
  }

  for (const spec of data.charts) {
    const el = document.getElementById("chart-" + spec.name);
    const anySteps = data.timelines.some((rt) => rt.steps.length > 0);
    if (el) plots[spec.name] = make(spec, el, 380, spec.workers_x && anySteps ? openWorkers : null);
  }
  document.querySelectorAll("button.open-timeline").forEach((b) => {
    const run = +b.dataset.run;
    const step = data.timelines[run].steps.find((s) => s.index === +b.dataset.step);
    if (!step) return;
    b.hidden = false;
    b.addEventListener("click", () => open([[run, step]]));
  });

  // For tests and the console: the charts by name, and the open timelines.
  window.headroom = { plots, timelinePlots, si };
})();
