// gradflow's run explorer: draws the data embedded in the page (no library,
// nothing fetched). A run: its loss curve with the stages shaded and a
// marker at the chosen time (with an ensemble beside the flow: the SDE's band
// and the SGD runs on it, and the crossing table), a time slider with a play
// button, the problem's views at that time, the stage and event tables. A
// sweep: the phase diagram, each member opening its own run view (#member=i).
"use strict";

const DATA = JSON.parse(document.getElementById("gradflow-data").textContent);
const SVG = "http://www.w3.org/2000/svg";
const FPS = 15;

function el(tag, attrs = {}, parent = null, ns = null) {
  const node = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  if (parent) parent.appendChild(node);
  return node;
}
const svg = (tag, attrs, parent) => el(tag, attrs, parent, SVG);

function fmt(x, digits = 4) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  if (typeof x !== "number") return String(x);
  if (x !== 0 && (Math.abs(x) >= 1e5 || Math.abs(x) < 1e-3)) return x.toExponential(digits - 1);
  return String(Number(x.toPrecision(digits)));
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

// -- the loss chart -------------------------------------------------------------

function lossChart(host, run) {
  clear(host);
  const W = 1000, H = 250, L = 62, R = 12, T = 10, B = 34;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", id: "loss-svg" }, host);
  const t = run.t, loss = run.loss, ens = run.ensemble || null;
  const lt0 = Math.log10(t[0]), lt1 = Math.log10(t[t.length - 1]);
  // the axis holds every curve drawn: the flow's and an ensemble's
  let lo = Infinity, hi = -Infinity;
  for (const curve of [loss, ...ensembleCurves(ens)]) {
    for (const v of curve) if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  }
  // a positive loss spanning more than two decades on a log axis (down to
  // 1e-16 of its top: float64's round-off), else a linear one; the axis
  // stays within the data (a loss that is never negative: not below 0)
  const logY = lo > 0 && hi / lo > 100;
  if (logY) lo = Math.max(lo, hi * 1e-16);
  const f = logY ? (v) => Math.log10(Math.max(v, lo)) : (v) => v;
  let flo = f(lo), fhi = f(hi);
  const pad = 0.06 * (fhi - flo || 1);
  flo = !logY && lo >= 0 ? Math.max(flo - pad, 0) : flo - pad;
  fhi += pad;
  const x = (v) => L + ((Math.log10(v) - lt0) / (lt1 - lt0 || 1)) * (W - L - R);
  const y = (v) => T + (1 - (f(v) - flo) / (fhi - flo)) * (H - T - B);
  const clipX = (v) => Math.min(Math.max(v, L), W - R);
  for (const s of run.stages) {
    const end = s.t_end === null ? t[t.length - 1] : s.t_end;
    const x0 = clipX(x(Math.max(s.t_start, t[0]))), x1 = clipX(x(end));
    const colour = DATA.stage_colors[s.name] || "#ccc";
    if (s.name === "rank") {
      svg("line", { x1: x0, x2: x0, y1: T, y2: H - B, stroke: colour, "stroke-width": 1 }, root);
      continue;
    }
    // a new direction overlaps the other stages: the lower part of the band
    const lower = s.name === "new_direction";
    const top = lower ? T + 0.62 * (H - T - B) : T;
    // (lighter under an ensemble: its band is drawn over the stages)
    const opacity = (lower ? 0.35 : 0.22) * (ens ? 0.5 : 1);
    svg("rect", { x: x0, y: top, width: Math.max(x1 - x0, 0.5), height: H - B - top,
                  fill: colour, "fill-opacity": opacity }, root);
  }
  for (let k = Math.ceil(lt0); k <= Math.floor(lt1); k++) {
    const xv = x(10 ** k);
    svg("line", { x1: xv, x2: xv, y1: H - B, y2: H - B + 4, stroke: "#444" }, root);
    svg("text", { x: xv, y: H - B + 16, "text-anchor": "middle", "font-size": 11,
                  text: `1e${k}` }, root);
  }
  const ticks = [];
  if (logY) {
    // decades within the data (not the padding)
    const top = Math.floor(f(hi)), bottom = Math.ceil(f(lo));
    const step = Math.max(1, Math.ceil((top - bottom) / 5));
    for (let k = top; k >= bottom; k -= step) ticks.push([10 ** k, `1e${k}`]);
  } else {
    for (let j = 0; j <= 4; j++) {
      const v = flo + ((fhi - flo) * j) / 4;
      ticks.push([v, fmt(v, 4)]);
    }
  }
  for (const [v, label] of ticks) {
    const yv = y(v);
    svg("line", { x1: L - 4, x2: L, y1: yv, y2: yv, stroke: "#444" }, root);
    svg("text", { x: L - 6, y: yv + 4, "text-anchor": "end", "font-size": 11, text: label }, root);
  }
  svg("rect", { x: L, y: T, width: W - L - R, height: H - T - B, fill: "none", stroke: "#888" }, root);
  svg("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", "font-size": 12,
                text: "time t (log scale)" }, root);
  svg("text", { x: 14, y: (T + H - B) / 2, "text-anchor": "middle", "font-size": 12,
                transform: `rotate(-90 14 ${(T + H - B) / 2})`,
                text: logY ? "population loss (log scale)" : "population loss" }, root);
  let d = "";
  for (let i = 0; i < t.length; i++) {
    if (loss[i] === null) continue;
    d += `${d ? "L" : "M"}${x(t[i]).toFixed(1)},${y(loss[i]).toFixed(1)}`;
  }
  if (ens) drawEnsemble(root, ens, x, y, d);
  else svg("path", { d, fill: "none", stroke: "#000", "stroke-width": 1.6 }, root);
  const cursor = svg("line", { id: "cursor", y1: T, y2: H - B, stroke: "#d62728" }, root);
  const marker = svg("circle", { id: "marker", r: 5, fill: "#d62728" }, root);
  root.addEventListener("click", (ev) => {
    const box = root.getBoundingClientRect();
    const xv = ((ev.clientX - box.left) / box.width) * W;
    const tv = 10 ** (lt0 + ((xv - L) / (W - L - R)) * (lt1 - lt0));
    STATE.goTo(nearestFrame(run.frames.t, tv));
  });
  return (i) => {
    const xv = x(run.frames.t[i]).toFixed(2);
    cursor.setAttribute("x1", xv); cursor.setAttribute("x2", xv);
    marker.setAttribute("cx", xv);
    marker.setAttribute("cy", y(run.frames.loss[i]).toFixed(2));
  };
}

// -- an ensemble around the flow (gradflow sgd --seeds N --sde) -----------------

const ENSEMBLE = { sde: "#1f77b4", sgd: "#ff7f0e" };

function ensembleCurves(ens) {
  if (!ens) return [];
  const out = [...ens.sgd.loss];
  if (ens.sde) out.push(ens.sde.lo, ens.sde.hi);
  if (ens.modified) out.push(ens.modified.loss);
  return out;
}

// a polyline through the points with a value (a gap where there is none)
function linePath(ts, values, x, y) {
  let d = "", pen = false;
  for (let i = 0; i < ts.length; i++) {
    if (values[i] === null) { pen = false; continue; }
    d += `${pen ? "L" : "M"}${x(ts[i]).toFixed(1)},${y(values[i]).toFixed(1)}`;
    pen = true;
  }
  return d;
}

// the band between lo and hi: one closed outline per run of points with both
function bandPath(ts, lo, hi, x, y) {
  let d = "", i = 0;
  while (i < ts.length) {
    if (lo[i] === null || hi[i] === null) { i++; continue; }
    let j = i;
    while (j + 1 < ts.length && lo[j + 1] !== null && hi[j + 1] !== null) j++;
    for (let k = i; k <= j; k++) d += `${k === i ? "M" : "L"}${x(ts[k]).toFixed(1)},${y(hi[k]).toFixed(1)}`;
    for (let k = j; k >= i; k--) d += `L${x(ts[k]).toFixed(1)},${y(lo[k]).toFixed(1)}`;
    d += "Z";
    i = j + 1;
  }
  return d;
}

// the SDE's band and median around the flow (drawn as flowPath), the
// modified flow dashed, the SGD runs on top
function drawEnsemble(root, ens, x, y, flowPath) {
  if (ens.sde) {
    const s = ens.sde;
    svg("path", { d: bandPath(s.t, s.lo, s.hi, x, y), fill: ENSEMBLE.sde, "fill-opacity": 0.3,
                  stroke: "none", class: "sde-band" }, root);
    svg("path", { d: linePath(s.t, s.median, x, y), fill: "none", stroke: ENSEMBLE.sde,
                  "stroke-width": 1, class: "sde-median" }, root);
  }
  svg("path", { d: flowPath, fill: "none", stroke: "#000", "stroke-width": 1.6, class: "flow" }, root);
  if (ens.modified) {
    svg("path", { d: linePath(ens.modified.t, ens.modified.loss, x, y), fill: "none",
                  stroke: "#000", "stroke-width": 1.2, "stroke-dasharray": "5 3",
                  class: "modified-flow" }, root);
  }
  for (const loss of ens.sgd.loss) {
    svg("path", { d: linePath(ens.sgd.t, loss, x, y), fill: "none", stroke: ENSEMBLE.sgd,
                  "stroke-width": 0.8, "stroke-opacity": 0.75, class: "sgd-run" }, root);
  }
}

function ensembleLegend(legend, ens) {
  const chip = (style, text) => {
    const span = el("span", { class: "ensemble-key" }, legend);
    el("i", { style }, span);
    span.appendChild(document.createTextNode(text));
  };
  const line = (colour, dash = "solid") =>
    `height:0;border-top:2px ${dash} ${colour};border-radius:0;vertical-align:3px`;
  chip(line("#000"), "flow");
  if (ens.modified) chip(line("#000", "dashed"), "modified flow (order 1)");
  if (ens.sde) {
    const [a, b] = ens.band;
    chip(`background:${ENSEMBLE.sde};opacity:0.4`,
         `SDE: ${a} %–${b} % of its ${ens.sde.members} paths at each time (band), median (line)`);
  }
  chip(line(ENSEMBLE.sgd), `SGD: ${ens.sgd.loss.length} runs (seeds ${ens.seeds.join(", ")})`);
}

function showEnsemble(ens) {
  const section = document.getElementById("ensemble");
  section.hidden = !ens;
  if (!ens) return;
  const sde = ens.sde ? ` and ${ens.sde.members} paths of the stochastic modified equation` : "";
  document.getElementById("ensemble-what").textContent =
    `The population loss of ${ens.sgd.loss.length} SGD runs${sde}, all from the flow's start; ` +
    "each level's crossing times, mean ± standard deviation over the members " +
    "(docs/sgd.md, Escape times).";
  table(document.getElementById("crossings"), ens.table.columns, ens.table.rows);
}

function nearestFrame(times, tv) {
  let best = 0;
  for (let i = 0; i < times.length; i++) {
    if (Math.abs(Math.log(times[i] / tv)) < Math.abs(Math.log(times[best] / tv))) best = i;
  }
  return best;
}

// -- the views ------------------------------------------------------------------

function decode(b64) {
  const raw = atob(b64), out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out;
}

function heatmapValue(v, q) {
  if (q >= 255) return NaN;
  const f = q / 254;
  return v.log ? Math.exp(Math.log(v.vmin) + f * (Math.log(v.vmax) - Math.log(v.vmin)))
               : v.vmin + f * (v.vmax - v.vmin);
}

function heatmapPanel(panel, v, index) {
  const [, R, C] = v.shape, bytes = decode(v.data);
  const cell = Math.max(6, Math.min(56, Math.floor(300 / Math.max(R, C))));
  const labels = C <= 17 && R <= 17, left = labels ? 64 : 6, top = 4, bottom = labels ? 60 : 6;
  const width = left + C * cell + 6, height = top + R * cell + bottom;
  const wrap = el("div", { style: `position:relative;width:${width + 110}px;height:${height}px` }, panel);
  const canvas = el("canvas", { width: C * cell, height: R * cell, class: "heatmap",
                                id: `view-${index}`,
                                style: `position:absolute;left:${left}px;top:${top}px` }, wrap);
  const axes = svg("svg", { width: width + 110, height, style: "position:absolute;left:0;top:0;pointer-events:none" }, wrap);
  if (labels) {
    v.rows.forEach((name, r) => svg("text", { x: left - 4, y: top + (r + 0.5) * cell + 4,
      "text-anchor": "end", "font-size": 10, text: name }, axes));
    v.cols.forEach((name, c) => {
      const xc = left + (c + 0.5) * cell, yc = top + R * cell + 6;
      svg("text", { x: xc, y: yc, "font-size": 10, transform: `rotate(90 ${xc} ${yc})`, text: name }, axes);
    });
  }
  // the colour bar
  const bx = left + C * cell + 14, bh = R * cell;
  v.colors.forEach((colour, k) => {
    if (k % 5) return;
    svg("rect", { x: bx, y: top + bh * (1 - (k + 5) / v.colors.length), width: 10,
                  height: (bh * 5) / v.colors.length + 0.5, fill: colour }, axes);
  });
  svg("text", { x: bx + 13, y: top + 9, "font-size": 10, text: fmt(v.vmax, 3) }, axes);
  svg("text", { x: bx + 13, y: top + bh, "font-size": 10, text: fmt(v.vmin, 3) + (v.log ? " (log)" : "") }, axes);
  const readout = el("div", { class: "readout", text: `row: ${v.ylabel}, column: ${v.xlabel}` }, panel);
  const ctx = canvas.getContext("2d");
  let frame = 0;
  canvas.addEventListener("mousemove", (ev) => {
    const box = canvas.getBoundingClientRect();
    const c = Math.floor(((ev.clientX - box.left) / box.width) * C);
    const r = Math.floor(((ev.clientY - box.top) / box.height) * R);
    if (r < 0 || c < 0 || r >= R || c >= C) return;
    const q = bytes[frame * R * C + r * C + c];
    readout.textContent = `${v.ylabel} ${v.rows[r]}, ${v.xlabel} ${v.cols[c]}: ${fmt(heatmapValue(v, q), 3)}`;
  });
  return (i) => {
    frame = i;
    canvas.dataset.frame = String(i);
    for (let r = 0; r < R; r++) {
      for (let c = 0; c < C; c++) {
        const q = bytes[i * R * C + r * C + c];
        ctx.fillStyle = q >= 255 ? "#eee" : v.colors[q];
        ctx.fillRect(c * cell, r * cell, cell, cell);
      }
    }
  };
}

function scatterPanel(panel, v, index) {
  const S = 300, pad = 30, lim = v.limit;
  const root = svg("svg", { width: S + pad, height: S + pad, id: `view-${index}` }, panel);
  const p = (a) => pad + ((a + lim) / (2 * lim)) * S;
  const q = (b) => ((lim - b) / (2 * lim)) * S;
  svg("rect", { x: pad, y: 0, width: S, height: S, fill: "none", stroke: "#888" }, root);
  svg("line", { x1: p(0) - 5, x2: p(0) + 5, y1: q(0), y2: q(0), stroke: "#000" }, root);
  svg("line", { x1: p(0), x2: p(0), y1: q(0) - 5, y2: q(0) + 5, stroke: "#000" }, root);
  svg("text", { x: pad + S / 2, y: S + 20, "text-anchor": "middle", "font-size": 11, text: v.xlabel }, root);
  svg("text", { x: 12, y: S / 2, "text-anchor": "middle", "font-size": 11,
                transform: `rotate(-90 12 ${S / 2})`, text: v.ylabel }, root);
  const n = v.labels.length, trail = 12;
  const paths = [], dots = [], names = {};
  for (let k = 0; k < n; k++) {
    paths.push(svg("polyline", { fill: "none", stroke: v.colors[k], "stroke-opacity": 0.6 }, root));
  }
  for (let k = 0; k < n; k++) dots.push(svg("circle", { r: 4.5, fill: v.colors[k] }, root));
  for (const k of v.named) names[k] = svg("text", { "font-size": 10, text: " " + v.labels[k] }, root);
  const caption = el("div", { class: "readout" }, panel);
  return (i) => {
    root.dataset.frame = String(i);
    for (let k = 0; k < n; k++) {
      const pts = [];
      for (let j = Math.max(0, i - trail); j <= i; j++) {
        pts.push(`${p(v.points[j][k][0]).toFixed(1)},${q(v.points[j][k][1]).toFixed(1)}`);
      }
      paths[k].setAttribute("points", pts.join(" "));
      dots[k].setAttribute("cx", p(v.points[i][k][0]).toFixed(1));
      dots[k].setAttribute("cy", q(v.points[i][k][1]).toFixed(1));
      if (names[k]) {
        names[k].setAttribute("x", p(v.points[i][k][0]).toFixed(1));
        names[k].setAttribute("y", (q(v.points[i][k][1]) - 4).toFixed(1));
      }
    }
    caption.textContent = v.captions[i];
  };
}

function barsPanel(panel, v, index) {
  const n = v.labels.length, bw = Math.max(8, Math.min(36, Math.floor(300 / n)));
  const longest = Math.max(...v.labels.map((name) => name.length));
  const L = 48, T = 6, Hp = 220, B = n <= 17 ? Math.min(130, 12 + 6 * longest) : 10;
  const W = L + n * bw + 10;
  const root = svg("svg", { width: W, height: T + Hp + B, id: `view-${index}` }, panel);
  const [lo, hi] = v.ylim;
  const f = v.log ? (a) => Math.log10(Math.max(a, lo)) : (a) => a;
  const y = (a) => T + (1 - (f(Math.min(Math.max(a, lo), hi)) - f(lo)) / (f(hi) - f(lo))) * Hp;
  svg("rect", { x: L, y: T, width: n * bw, height: Hp, fill: "none", stroke: "#888" }, root);
  for (const a of v.log ? [lo, Math.sqrt(lo * hi), hi] : [lo, (lo + hi) / 2, hi]) {
    svg("text", { x: L - 4, y: y(a) + 4, "text-anchor": "end", "font-size": 10, text: fmt(a, 2) }, root);
  }
  if (v.reference !== null) {
    svg("line", { x1: L, x2: L + n * bw, y1: y(v.reference), y2: y(v.reference),
                  stroke: "#000", "stroke-dasharray": "4 3" }, root);
  }
  const base = y(v.log ? lo : Math.max(lo, Math.min(0, hi)));
  const bars = v.labels.map((name, k) => {
    if (n <= 17) {
      const xc = L + (k + 0.5) * bw, yc = T + Hp + 6;
      svg("text", { x: xc, y: yc, "font-size": 10, transform: `rotate(90 ${xc} ${yc})`, text: name }, root);
    }
    return svg("rect", { x: L + k * bw + 1, width: bw - 2, fill: v.colors[k] }, root);
  });
  el("div", { class: "readout", text: v.ylabel }, panel);
  return (i) => {
    root.dataset.frame = String(i);
    bars.forEach((bar, k) => {
      const value = v.values[i][k], top = value === null ? base : y(value);
      bar.setAttribute("y", Math.min(top, base).toFixed(1));
      bar.setAttribute("height", Math.abs(base - top).toFixed(1));
    });
  };
}

const PANELS = { heatmap: heatmapPanel, scatter: scatterPanel, bars: barsPanel };

// -- tables ---------------------------------------------------------------------

function table(host, columns, rows, onClick) {
  clear(host);
  const head = el("tr", {}, el("thead", {}, host));
  for (const c of columns) el("th", { text: c.replace("_", " ") }, head);
  const body = el("tbody", {}, host);
  return rows.map((row, j) => {
    const tr = el("tr", { class: onClick ? "stage-row" : "" }, body);
    for (const c of columns) el("td", { text: typeof row[c] === "number" ? fmt(row[c], 5) : (row[c] ?? "") }, tr);
    if (onClick) tr.addEventListener("click", () => onClick(j));
    return tr;
  });
}

// -- one run --------------------------------------------------------------------

const STATE = { frame: 0, timer: null, updates: [], goTo: () => {} };

function showRun(run) {
  stop();
  document.getElementById("run").hidden = false;
  // (a run's title is the page's; a sweep member's names the member)
  document.getElementById("run-title").textContent = DATA.kind === "sweep" ? run.title : "";
  const status = document.getElementById("run-status");
  status.textContent = run.ok ? `${run.problem}: solved` : `${run.problem}: FAILED: ${run.message}`;
  status.className = run.ok ? "" : "failed";
  const legend = document.getElementById("legend");
  clear(legend);
  for (const name of [...new Set(run.stages.map((s) => s.name))]) {
    const chip = el("span", {}, legend);
    el("i", { style: `background:${DATA.stage_colors[name] || "#ccc"}` }, chip);
    chip.appendChild(document.createTextNode(name.replace("_", " ")));
  }
  if (run.ensemble) ensembleLegend(legend, run.ensemble);
  showEnsemble(run.ensemble);
  const updates = [lossChart(document.getElementById("loss-chart"), run)];
  const views = document.getElementById("views");
  clear(views);
  run.views.forEach((v, k) => {
    const panel = el("div", { class: "panel" }, views);
    el("h4", { text: v.title }, panel);
    updates.push(PANELS[v.type](panel, v, k));
  });
  // only the columns that apply: tokens (the paper's model), the leaf and
  // rank of the generic rank records
  const columns = ["name", "cycle", "t_start", "t_end", "loss_start", "loss_end"];
  for (const extra of ["tokens", "rank"]) {
    if (run.stages.some((s) => s[extra])) columns.push(extra);
  }
  const rows = table(document.getElementById("stages"), columns, run.stages,
    (j) => STATE.goTo(firstFrameFrom(run.frames.t, run.stages[j].t_start)));
  const eventColumns = ["name", "t", "loss"];
  if (run.events.some((e) => e.token !== null)) eventColumns.push("token");
  table(document.getElementById("events"), [...eventColumns, "located"], run.events);
  const slider = document.getElementById("slider");
  slider.max = String(run.frames.t.length - 1);
  const now = document.getElementById("now");
  STATE.goTo = (i) => {
    i = Math.max(0, Math.min(run.frames.t.length - 1, i | 0));
    STATE.frame = i;
    slider.value = String(i);
    const tv = run.frames.t[i];
    now.textContent = `t = ${fmt(tv, 5)}   ${run.frames.caption[i]}`;
    for (const update of updates) update(i);
    run.stages.forEach((s, j) => {
      const end = s.t_end === null ? Infinity : s.t_end;
      rows[j].classList.toggle("active", s.t_start <= tv && tv <= end && s.name !== "rank");
    });
  };
  slider.oninput = () => STATE.goTo(Number(slider.value));
  STATE.goTo(0);
  setAbout(run.settings, run.stats);
}

function firstFrameFrom(times, t0) {
  for (let i = 0; i < times.length; i++) if (times[i] >= t0) return i;
  return times.length - 1;
}

function stop() {
  if (STATE.timer !== null) clearInterval(STATE.timer);
  STATE.timer = null;
  document.getElementById("play").textContent = "Play";
}

function togglePlay() {
  if (STATE.timer !== null) return stop();
  const last = Number(document.getElementById("slider").max);
  if (STATE.frame >= last) STATE.goTo(0);
  document.getElementById("play").textContent = "Pause";
  STATE.timer = setInterval(() => {
    if (STATE.frame >= last) return stop();
    STATE.goTo(STATE.frame + 1);
  }, 1000 / FPS);
}

function setAbout(settings, stats) {
  document.getElementById("command").textContent = DATA.command || "(not recorded: made from Python)";
  document.getElementById("settings").textContent = JSON.stringify(settings, null, 1);
  document.getElementById("stats").textContent = JSON.stringify(stats, null, 1);
}

// -- a sweep --------------------------------------------------------------------

function phaseDiagram() {
  const phase = DATA.sweep.phase;
  document.getElementById("phase").hidden = false;
  const select = document.getElementById("phase-value");
  for (const name of Object.keys(phase.values)) el("option", { value: name, text: name }, select);
  select.onchange = () => drawPhase(select.value);
  drawPhase(select.value);
}

function drawPhase(name) {
  const phase = DATA.sweep.phase, host = document.getElementById("phase-plot");
  clear(host);
  const values = phase.values[name] || [];
  const xs = [...new Set(phase.x)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const ys = [...new Set(phase.y)];
  const cw = Math.max(40, Math.min(90, Math.floor(700 / xs.length))), ch = 28;
  const L = 160, T = 8, B = 44;
  const root = svg("svg", { width: L + xs.length * cw + 120, height: T + ys.length * ch + B, id: "phase-svg" }, host);
  const finite = values.filter((v) => v !== null);
  const lo = Math.min(...finite), hi = Math.max(...finite);
  const colour = (v) => v === null ? "#fff"
    : phase.colors[Math.round(((v - lo) / (hi - lo || 1)) * (phase.colors.length - 1))];
  phase.x.forEach((xv, m) => {
    const c = xs.indexOf(xv), r = ys.indexOf(phase.y[m]), v = values[m];
    const rect = svg("rect", { x: L + c * cw, y: T + r * ch, width: cw - 1, height: ch - 1,
                               fill: colour(v), class: "cell", "data-member": m,
                               stroke: phase.members[m].ok ? "none" : "#b00020" }, root);
    svg("title", { text: `member ${m}: ${fmt(v, 4)}` }, rect);
    const light = v !== null && (v - lo) / (hi - lo || 1) > 0.6;
    svg("text", { x: L + (c + 0.5) * cw, y: T + (r + 0.5) * ch + 4, "text-anchor": "middle",
                  "font-size": 10, fill: light ? "#000" : "#fff", "pointer-events": "none",
                  text: fmt(v, 3) }, root);
    rect.addEventListener("click", () => { location.hash = `member=${m}`; });
  });
  xs.forEach((xv, c) => svg("text", { x: L + (c + 0.5) * cw, y: T + ys.length * ch + 14,
    "text-anchor": "middle", "font-size": 10, text: fmt(xv, 3) }, root));
  ys.forEach((yv, r) => svg("text", { x: L - 6, y: T + (r + 0.5) * ch + 4, "text-anchor": "end",
    "font-size": 10, text: yv }, root));
  svg("text", { x: L + (xs.length * cw) / 2, y: T + ys.length * ch + 32, "text-anchor": "middle",
                "font-size": 12, text: phase.x_name }, root);
  svg("text", { x: L + xs.length * cw + 8, y: T + 12, "font-size": 11,
                text: `${fmt(lo, 3)} … ${fmt(hi, 3)}` }, root);
}

function route() {
  if (DATA.kind !== "sweep") return;
  const m = /member=(\d+)/.exec(location.hash);
  const run = m ? DATA.sweep.members[Number(m[1])] : null;
  document.getElementById("phase").hidden = run !== null && run !== undefined;
  document.getElementById("back").hidden = !run;
  if (run) showRun(run);
  else {
    stop();
    document.getElementById("run").hidden = true;
    setAbout(DATA.sweep.settings, DATA.sweep.stats);
  }
}

function main() {
  document.getElementById("title").textContent = DATA.title;
  document.getElementById("subtitle").textContent = DATA.subtitle;
  document.getElementById("play").addEventListener("click", togglePlay);
  document.getElementById("back").addEventListener("click", (ev) => {
    ev.preventDefault();
    location.hash = "";
  });
  if (DATA.kind === "sweep") {
    phaseDiagram();
    window.addEventListener("hashchange", route);
    route();
  } else {
    showRun(DATA.run);
  }
}

main();
