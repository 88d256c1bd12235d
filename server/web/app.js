// The PKB web leaderboard: plain JS, no build step. Reads the coordinator's read-only JSON API
// (/api/v1/...) and draws three views, chosen by the URL's hash:
//   #/                 the suite: fast_p and geomean per model, best speedup per task, problems
//   #/problem/<id>     per board (world size, dtype, GPU class) the best result per user or model
//   #/job/<id>         one submission: verdict, timings, stages, events
// Filters and sort orders live in the hash's query (#/problem/1?by=model&sort=speedup&dir=asc),
// so every view can be linked. Data is written with textContent only: nothing from the API is
// parsed as HTML.
"use strict";

const app = () => document.getElementById("app");
// Replaces the view; arrays are spread and null/undefined/false skipped, as in el().
const show = (...children) =>
    app().replaceChildren(...children.flat(2).filter(c => c !== null && c !== undefined && c !== false));

function el(tag, attrs = {}, ...children) {
  const e = document.createElementNS(
      ["svg", "rect", "line", "text", "g", "title"].includes(tag) ? "http://www.w3.org/2000/svg"
                                                                   : "http://www.w3.org/1999/xhtml",
      tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

async function api(path, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== undefined && v !== null) q.set(k, v);
  const url = `/api/v1/${path}${q.toString() ? "?" + q : ""}`;
  const r = await fetch(url, {headers: {Accept: "application/json"}});
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error || `${r.status} ${r.statusText}`);
  return body;
}

function route() {
  const h = location.hash.replace(/^#/, "") || "/";
  const [path, query] = h.split("?");
  return {parts: path.split("/").filter(Boolean), params: new URLSearchParams(query || "")};
}

// Rewrites the hash's query without a new history entry or a reload.
function setParams(params) {
  const {parts} = route();
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== undefined && v !== null) q.set(k, v);
  const hash = "#/" + parts.join("/") + (q.toString() ? "?" + q : "");
  history.replaceState(null, "", hash);
}

const fmt = {
  x: v => (v ? Number(v).toFixed(3) + "×" : "–"),
  us: v => (v ? Number(v).toFixed(2) : "–"),
  pct: v => (Number(v || 0) * 100).toFixed(1) + "%",
  time: micros => (Number(micros) ? new Date(Number(micros) / 1000).toISOString().replace("T", " ").slice(0, 19) + "Z" : "–"),
};

// A table whose columns sort on a click of their header and whose rows can be narrowed by text.
// columns: [{key, label, num, value: row => sortable value, cell: row => text or Node}]
function sortableTable(columns, rows, {id, sort, dir, onChange} = {}) {
  const state = {sort: sort || "", dir: dir || "", filter: ""};
  const tbody = el("tbody");
  const heads = columns.map(c => el("th", {
    class: "sortable" + (c.num ? " num" : ""), "data-key": c.key,
    onclick: () => {
      if (state.sort === c.key) state.dir = state.dir === "asc" ? "desc" : "asc";
      else { state.sort = c.key; state.dir = c.num ? "desc" : "asc"; }
      render();
      if (onChange) onChange(state);
    }}, c.label));
  const table = el("table", {id}, el("thead", {}, el("tr", {}, heads)), tbody);
  function render() {
    let shown = rows.filter(r => !state.filter ||
        columns.some(c => String(c.value(r) ?? "").toLowerCase().includes(state.filter)));
    const col = columns.find(c => c.key === state.sort);
    if (col) {
      const sign = state.dir === "asc" ? 1 : -1;
      shown = [...shown].sort((a, b) => {
        const x = col.value(a), y = col.value(b);
        return sign * (col.num ? (Number(x) || 0) - (Number(y) || 0) : String(x).localeCompare(String(y)));
      });
    }
    for (const h of heads) {
      if (h.dataset.key === state.sort) h.dataset.dir = state.dir; else delete h.dataset.dir;
    }
    tbody.replaceChildren(...shown.map(r => el("tr", {},
        columns.map(c => el("td", {class: c.num ? "num" : ""}, c.cell ? c.cell(r) : c.value(r))))));
    if (!shown.length) tbody.append(el("tr", {}, el("td", {colspan: columns.length, class: "muted"}, "no rows")));
  }
  render();
  return {el: table, setFilter(text) { state.filter = text.toLowerCase(); render(); }};
}

// A result's shapes in words: "1024×1024 1.800×, 512×2048 1.200×, 768×1024 pending".
function shapesText(c) {
  return (c.shapes || []).map(f => {
    const figure = f.stage !== "DONE" ? "pending" : (f.status || "OK") !== "OK" ? f.status : fmt.x(f.speedup);
    return `${f.m}×${f.n} ${figure}`;
  }).join(", ");
}

// A result's confirmation run in words: "confirmed (2.000×, then 1.600×)", "pending", ...; with
// shape runs, the geometric mean and each shape's figure.
function confirmationText(c) {
  const shaped = c && (c.shapes || []).length;
  switch (c && c.state) {
    case "CONFIRMED":
      if (shaped) return `confirmed: geomean over ${c.shapes.length} shapes (${shapesText(c)})`;
      return `confirmed (${fmt.x(c.firstSpeedup)}, then ${fmt.x(c.confirmationSpeedup)})`;
    case "CONFIRMATION_PENDING": return shaped ? `pending (${shapesText(c)})` : "pending";
    case "CONFIRMATION_FAILED": return `not confirmed: ${c.reason || ""}`;
    case "UNCONFIRMED": return "unconfirmed (before confirmation runs)";
    default: return "";
  }
}

function speedCell(v) {
  return el("span", {class: v > 1 ? "fast" : v > 0 && v < 1 ? "slow" : ""}, fmt.x(v));
}

function select(name, label, options, value, onchange) {
  return el("label", {}, label, el("select", {name, id: `f-${name}`, onchange},
      options.map(([v, t]) => el("option", {value: v, selected: String(v) === String(value)}, t))));
}

// ---- #/ : the suite --------------------------------------------------------------------------

async function suiteView(params) {
  const f = {world_size: params.get("world_size") || "", gpu_class: params.get("gpu_class") || "",
             seeds: params.get("seeds") || "any"};
  const [catalog, suite, board] = await Promise.all([
    api("problems"), api("suite", f), api("leaderboard", f)]);
  const problems = catalog.problems || [];
  const sizes = [...new Set(problems.flatMap(p => (p.layouts || []).filter(l => l.supported).map(l => l.worldSize)))].sort((a, b) => a - b);
  const rerender = () => { setParams(f); render(); };
  const controls = el("div", {class: "controls"},
      select("world_size", "World size", [["", "every W"], ...sizes.map(w => [w, `W=${w}`])], f.world_size,
             e => { f.world_size = e.target.value; rerender(); }),
      el("label", {}, "GPU class", el("input", {id: "f-gpu_class", value: f.gpu_class, placeholder: "any",
          onchange: e => { f.gpu_class = e.target.value.trim(); rerender(); }})),
      select("seeds", "Seeds", [["any", "any"], ["public", "public"], ["secret", "secret (ranked)"]], f.seeds,
             e => { f.seeds = e.target.value; rerender(); }));

  const models = suite.models || [];
  const ps = models.length ? models[0].fastP.map(x => x.p) : [0, 1, 1.5, 2];
  const suiteTable = sortableTable([
    {key: "model", label: "Model", value: m => m.model || "(none)"},
    {key: "correct", label: "Tasks correct", num: true, value: m => m.tasksCorrect,
     cell: m => `${m.tasksCorrect} / ${m.tasks}`},
    ...ps.map((p, i) => ({key: `fast_${p}`, label: `fast_${p}`, num: true,
                          value: m => m.fastP[i].fastP, cell: m => fmt.pct(m.fastP[i].fastP)})),
    {key: "geomean", label: "Geomean speedup", num: true, value: m => m.geomeanSpeedup,
     cell: m => speedCell(m.geomeanSpeedup)},
  ], models, {id: "suite-table"});

  const best = new Map();  // problem id -> best entry over its boards
  for (const b of board.boards || []) {
    const top = (b.entries || [])[0];
    if (top && (!best.has(b.problemId) || top.speedup > best.get(b.problemId).speedup)) best.set(b.problemId, top);
  }
  const problemTable = sortableTable([
    {key: "id", label: "#", num: true, value: p => p.id},
    {key: "slug", label: "Problem", value: p => p.slug, cell: p => el("a", {href: `#/problem/${p.id}`}, p.slug)},
    {key: "category", label: "Category", value: p => p.category || ""},
    {key: "best", label: "Best speedup", num: true, value: p => best.get(p.id)?.speedup || 0,
     cell: p => speedCell(best.get(p.id)?.speedup || 0)},
    {key: "leader", label: "Leader", value: p => best.get(p.id) ? `${best.get(p.id).submitter} · ${best.get(p.id).model}` : ""},
  ], problems, {id: "problems-table", sort: "id", dir: "asc"});

  show(
      el("h1", {}, "Suite"), controls,
      el("p", {class: "muted"}, `${suite.tasks} tasks (problem × world size). fast_p: share of all tasks solved ` +
         `correctly with speedup > p (an unsolved task counts as not fast); geomean over the solved tasks only.`),
      models.length ? suiteTable.el : el("p", {class: "empty"}, "No ranking result yet."),
      el("div", {class: "downloads"}, "Download: ",
         el("a", {href: `/api/v1/suite?${new URLSearchParams({...f, format: "csv"})}`}, "CSV"), " · ",
         el("a", {href: `/api/v1/suite?${new URLSearchParams(f)}`}, "JSON")),
      el("h2", {}, "Best speedup per task"), speedupChart(models),
      el("h2", {}, "Problems"), problemTable.el);
}

// Grouped bars: per task the best speedup of each model, on a log2 axis with 1× marked.
function speedupChart(models) {
  const tasks = new Map();
  for (const m of models) for (const t of m.best || []) tasks.set(`${t.problemId}/${t.worldSize}`, t);
  const keys = [...tasks.keys()].sort((a, b) => {
    const [pa, wa] = a.split("/").map(Number), [pb, wb] = b.split("/").map(Number);
    return pa - pb || wa - wb;
  });
  if (!keys.length) return el("p", {class: "empty", id: "speedup-chart"}, "Nothing to plot yet.");
  const colors = ["#3056d3", "#12805c", "#d97706", "#b42318", "#7c3aed", "#0891b2", "#be185d", "#4d7c0f"];
  const all = models.flatMap(m => (m.best || []).map(t => t.speedup)).filter(v => v > 0);
  const lo = Math.floor(Math.log2(Math.min(0.5, ...all))), hi = Math.ceil(Math.log2(Math.max(2, ...all)));
  const W = Math.max(640, keys.length * (models.length * 14 + 16) + 60), H = 260, L = 44, B = 70, T = 10;
  const y = v => T + (H - T - B) * (1 - (Math.log2(v) - lo) / (hi - lo));
  const band = (W - L - 10) / keys.length, bw = Math.min(24, (band - 8) / Math.max(1, models.length));
  const svg = el("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "best speedup per task"});
  for (let e = lo; e <= hi; ++e) {
    svg.append(el("line", {class: e === 0 ? "one" : "grid", x1: L, x2: W - 10, y1: y(2 ** e), y2: y(2 ** e)}),
               el("text", {x: L - 6, y: y(2 ** e) + 4, "text-anchor": "end"}, `${2 ** e}×`));
  }
  svg.append(el("line", {class: "axis", x1: L, x2: L, y1: T, y2: H - B}));
  keys.forEach((k, i) => {
    const x0 = L + i * band + (band - bw * models.length) / 2;
    models.forEach((m, j) => {
      const t = (m.best || []).find(b => `${b.problemId}/${b.worldSize}` === k);
      if (!t || !(t.speedup > 0)) return;
      const top = y(Math.max(t.speedup, 2 ** lo)), base = y(1);
      svg.append(el("rect", {class: "bar", x: x0 + j * bw, width: bw - 2, y: Math.min(top, base),
                             height: Math.max(1, Math.abs(base - top)), fill: colors[j % colors.length],
                             "data-task": k, "data-model": m.model},
                    el("title", {}, `${tasks.get(k).problemSlug} W=${t.worldSize}: ${m.model || "(none)"} ${fmt.x(t.speedup)}`)));
    });
    const lx = L + i * band + band / 2;
    svg.append(el("text", {x: lx, y: H - B + 14, "text-anchor": "end", transform: `rotate(-35 ${lx} ${H - B + 14})`},
                  `${tasks.get(k).problemSlug} W${tasks.get(k).worldSize}`));
  });
  const legend = el("div", {class: "legend"}, models.map((m, j) => {
    const sw = el("i");
    sw.style.background = colors[j % colors.length];
    return el("span", {}, sw, m.model || "(none)");
  }));
  return el("div", {class: "chart", id: "speedup-chart"}, legend, svg);
}

// ---- #/problem/<id> : its boards -------------------------------------------------------------

async function problemView(id, params) {
  const f = {problem: id, by: params.get("by") || "user", seeds: params.get("seeds") || "any",
             world_size: params.get("world_size") || ""};
  const ui = {q: params.get("q") || "", sort: params.get("sort") || "speedup", dir: params.get("dir") || "desc"};
  const [spec, board] = await Promise.all([
    api("problems").then(c => (c.problems || []).find(p => String(p.id) === String(id))),
    api("leaderboard", f)]);
  const save = () => setParams({by: f.by, seeds: f.seeds, world_size: f.world_size, q: ui.q,
                                sort: ui.sort, dir: ui.dir});
  const reload = () => { save(); render(); };
  const tables = [];
  const filter = el("input", {id: "filter", type: "search", value: ui.q, placeholder: "user, model, agent, tag",
      oninput: e => { ui.q = e.target.value; tables.forEach(t => t.setFilter(ui.q)); save(); }});
  const controls = el("div", {class: "controls"},
      select("by", "Best per", [["user", "user"], ["model", "model"]], f.by, e => { f.by = e.target.value; reload(); }),
      select("seeds", "Seeds", [["any", "any"], ["public", "public"], ["secret", "secret (ranked)"]], f.seeds,
             e => { f.seeds = e.target.value; reload(); }),
      el("label", {}, "Filter", filter));
  const columns = [
    {key: "rank", label: "#", num: true, value: e => e.rank},
    {key: "submitter", label: "User", value: e => e.submitter},
    {key: "model", label: "Model", value: e => e.model},
    {key: "agent", label: "Agent", value: e => e.agent},
    {key: "speedup", label: "Speedup", num: true, value: e => e.speedup, cell: e => speedCell(e.speedup)},
    {key: "confirmed", label: "Confirmation", value: e => confirmationText(e.confirmation)},
    {key: "cand", label: "Candidate µs", num: true, value: e => e.candidateMedianUs, cell: e => fmt.us(e.candidateMedianUs)},
    {key: "base", label: "Baseline µs", num: true, value: e => e.baselineMedianUs, cell: e => fmt.us(e.baselineMedianUs)},
    {key: "seed", label: "Seed", value: e => (e.ranked ? "secret" : "public")},
    {key: "results", label: "Results", num: true, value: e => e.results},
    {key: "tags", label: "Tags", value: e => (e.tags || []).join(" ")},
    {key: "finished", label: "Finished (UTC)", num: true, value: e => Number(e.finishedUnixMicros), cell: e => fmt.time(e.finishedUnixMicros)},
    {key: "job", label: "Job", value: e => e.jobId, cell: e => el("a", {href: `#/job/${e.jobId}`}, e.jobId)},
  ];
  const onChange = s => { ui.sort = s.sort; ui.dir = s.dir; save(); };
  const sections = (board.boards || []).map((b, i) => {
    const t = sortableTable(columns, b.entries || [], {id: `board-${i}`, sort: ui.sort, dir: ui.dir, onChange});
    t.setFilter(ui.q);
    tables.push(t);
    // Results awaiting their confirmation run: shown, never ranked.
    let pending = null;
    if ((b.pending || []).length) {
      const p = sortableTable(columns.filter(c => c.key !== "rank"), b.pending,
                              {id: `pending-${i}`, sort: ui.sort, dir: ui.dir, onChange});
      p.setFilter(ui.q);
      tables.push(p);
      pending = [el("h3", {class: "muted"}, "Pending confirmation (not ranked yet)"), p.el];
    }
    return el("section", {class: "board"},
        el("h2", {}, `W=${b.worldSize} · ${b.dtype} · ${b.gpuClass}`),
        (b.entries || []).length ? t.el : el("p", {class: "empty"}, "No confirmed result yet."), pending);
  });
  const q = new URLSearchParams({...f});
  show(
      el("p", {}, el("a", {href: "#/"}, "← suite")),
      el("h1", {}, spec ? `${spec.id} ${spec.slug}` : `Problem ${id}`),
      spec && spec.category ? el("p", {class: "muted"}, `${spec.category} · ${spec.origin || ""}`) : null,
      controls,
      el("div", {class: "downloads"}, "Download: ",
         el("a", {href: `/api/v1/leaderboard?${q}&format=csv`}, "CSV"), " · ",
         el("a", {href: `/api/v1/leaderboard?${q}`}, "JSON")),
      sections.length ? sections : el("p", {class: "empty"}, "No ranking result for this problem yet."),
      el("p", {class: "muted"}, `${board.rankingResults || 0} ranking results; ${board.disqualifiedResults || 0} ` +
         "correct results left out because their source was rejected or failed a secret-seed run; " +
         `${board.pendingResults || 0} awaiting their confirmation run; ${board.unconfirmedResults || 0} ` +
         "whose confirmation or shape run failed. A result ranks once the service has timed it a second " +
         "time, with the lower of the two speedups; a ranked result also at two shapes drawn from its " +
         "problem's declared range, with the geometric mean over its shapes."));
}

// ---- #/job/<id> : one submission -------------------------------------------------------------

// Rank 0's profile pass: one call of the candidate above one of the reference, each record a bar
// on one shared time axis, a row per stream (kernels blue, copies green, memsets amber).
function profileChart(profile) {
  const sides = [["candidate", profile.candidate || {}], ["reference", profile.reference || {}]];
  const span = Math.max(1e-3, ...sides.map(([, c]) => c.spanUs || 0));
  const W = 760, L = 90, R = 10, row = 14, gap = 18;
  const x = us => L + (W - L - R) * us / span;
  const color = {KERNEL: "#3056d3", MEMCPY: "#12805c", MEMSET: "#d97706"};
  const lanes = sides.map(([name, c]) => {
    const streams = [...new Set((c.records || []).map(r => r.stream || 0))];
    return {name, c, streams, height: Math.max(1, streams.length) * row};
  });
  const H = lanes.reduce((h, l) => h + l.height + gap, 30);
  const svg = el("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "profile timeline"});
  let top = 8;
  for (const {name, c, streams, height} of lanes) {
    svg.append(el("text", {x: 4, y: top + 11}, name),
               el("line", {class: "grid", x1: L, x2: W - R, y1: top + height + 2, y2: top + height + 2}));
    if (!(c.records || []).length) {
      svg.append(el("text", {x: L + 4, y: top + 11}, c.note || "no activity recorded"));
    }
    for (const r of c.records || []) {
      const y = top + streams.indexOf(r.stream || 0) * row;
      const grid = r.grid ? ` grid ${r.grid.join("×")} block ${(r.block || []).join("×")}` : "";
      svg.append(el("rect", {class: "bar", x: x(r.startUs || 0), y, height: row - 3,
                             width: Math.max(1, x((r.startUs || 0) + (r.durationUs || 0)) - x(r.startUs || 0)),
                             fill: color[r.kind] || "#667085"},
                    el("title", {}, `${r.name}: ${fmt.us(r.durationUs)} µs at ${fmt.us(r.startUs)} µs${grid}` +
                                    (r.bytes ? `, ${r.bytes} B` : ""))));
    }
    top += height + gap;
  }
  for (let i = 0; i <= 4; ++i) {
    const us = span * i / 4;
    svg.append(el("text", {x: x(us), y: H - 6, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle"},
                  `${us.toFixed(2)} µs`));
  }
  const summary = ([name, c]) => `${name}: ${fmt.us(c.spanUs)} µs, busy ${fmt.us(c.busyUs)} µs, ` +
                                 `${(c.records || []).length} records`;
  return el("div", {class: "chart", id: "profile"},
            el("p", {class: "muted"}, `Rank ${profile.rank || 0}, one call of each side after the timed window ` +
                                     "(untimed; the candidate's is its own process's account). " +
                                     sides.map(summary).join("; ")),
            svg);
}

async function jobView(id) {
  const sub = await api(`submissions/${encodeURIComponent(id)}`);
  const job = sub.job || {}, r = job.request || {}, res = job.result || {};
  const done = job.stage === "DONE";
  const status = done ? res.status : job.stage;
  const kv = (pairs) => el("dl", {class: "kv"}, pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  const timing = [["median", "medianUs"], ["mean", "meanUs"], ["stddev", "stddevUs"], ["p10", "p10Us"],
                  ["p90", "p90Us"], ["min", "minUs"], ["max", "maxUs"], ["samples", "samples"]];
  const stages = Object.entries(res.stageSeconds || {});
  show(
      el("p", {}, el("a", {href: `#/problem/${r.problemId}`}, `← problem ${r.problemId}`)),
      el("h1", {}, `Job ${job.jobId}`),
      el("p", {}, el("span", {id: "verdict", class: `badge ${status === "OK" ? "OK" : done ? "bad" : ""}`}, status),
         " ", res.message || "", res.cached ? " (cached)" : ""),
      done ? el("p", {class: sub.ranks ? "fast" : "muted", id: "ranks"},
                sub.ranks ? "Ranks on the leaderboard." : `Does not rank: ${sub.notRankedReason}`) : null,
      sub.confirmation && sub.confirmation.state && sub.confirmation.state !== "CONFIRMATION_NONE" ?
          el("p", {id: "confirmation"}, "Confirmation: ", confirmationText(sub.confirmation), " ",
             sub.confirmation.jobId ? el("a", {href: `#/job/${sub.confirmation.jobId}`}, sub.confirmation.jobId) : "") : null,
      sub.confirmation && (sub.confirmation.shapes || []).length ?
          el("table", {id: "shapes"},
             el("thead", {}, el("tr", {}, el("th", {}, "Shape (m × n)"), el("th", {}, "Run"),
                                el("th", {}, "Verdict"), el("th", {class: "num"}, "Speedup"))),
             el("tbody", {}, sub.confirmation.shapes.map(f => el("tr", {},
                 el("td", {}, `${f.m} × ${f.n}`),
                 el("td", {}, el("a", {href: `#/job/${f.jobId}`}, f.jobId)),
                 el("td", {}, f.stage !== "DONE" ? "pending" : (f.status || "OK")),
                 el("td", {class: "num"}, f.stage === "DONE" && (f.status || "OK") === "OK" ? fmt.x(f.speedup) : "–"))))) : null,
      job.confirmsJobId ? el("p", {id: "confirms"}, job.shapeRun ? `A shape run (${r.m} × ${r.n}) of ` : "A confirmation run of ",
                             el("a", {href: `#/job/${job.confirmsJobId}`}, job.confirmsJobId), ".") : null,
      kv([["Problem", `${r.problemId} ${res.problemSlug || ""}`], ["World size", r.worldSize],
          ["dtype", r.dtype], ["GPU", `${job.gpuClass || r.gpuClass}${res.gpu ? " · " + res.gpu : ""}`],
          ["User", r.submitter], ["Model", r.model], ["Agent", r.agent], ["Tags", (r.tags || []).join(", ")],
          ["Seed", r.ranked ? "secret (ranked run)" : r.practice ? "public (practice run: never ranks)" : "public"], ["Attempts", job.attempts],
          ["Submitted (UTC)", fmt.time(job.createdUnixMicros)], ["Updated (UTC)", fmt.time(job.updatedUnixMicros)],
          ["Speedup", speedCell(res.speedup)]]),
      done && res.status === "OK" ? [el("h2", {}, "Timings (µs per iteration, slowest rank)"),
        el("table", {id: "timings"}, el("thead", {}, el("tr", {}, el("th", {}, ""), timing.map(([n]) => el("th", {class: "num"}, n)))),
           el("tbody", {}, [["candidate", res.candidate || {}], ["baseline", res.baseline || {}]].map(([n, t]) =>
               el("tr", {}, el("td", {}, n), timing.map(([, k]) => el("td", {class: "num"}, k === "samples" ? (t[k] || 0) : fmt.us(t[k])))))))] : null,
      (res.profiles || []).length ? [el("h2", {}, "Profile"), profileChart(res.profiles[0])] : null,
      stages.length ? [el("h2", {}, "Stages"), kv(stages.map(([k, v]) => [k, `${Number(v).toFixed(2)} s`]))] : null,
      el("h2", {}, "Events"),
      sortableTable([
        {key: "seq", label: "#", num: true, value: e => Number(e.sequence)},
        {key: "time", label: "Time (UTC)", num: true, value: e => Number(e.unixMicros), cell: e => fmt.time(e.unixMicros)},
        {key: "stage", label: "Stage", value: e => e.stage},
        {key: "message", label: "Message", value: e => e.message || (e.stage === "VERIFYING" ? `trial ${e.trial} ${e.trialOk ? "ok" : "FAILED"}` : "")},
      ], sub.events || [], {id: "events", sort: "seq", dir: "asc"}).el,
      el("div", {class: "downloads"}, "Download: ",
         el("a", {href: `/api/v1/submissions/${encodeURIComponent(id)}?format=csv`}, "CSV"), " · ",
         el("a", {href: `/api/v1/submissions/${encodeURIComponent(id)}`}, "JSON")));
}

async function render() {
  const {parts, params} = route();
  try {
    if (parts[0] === "problem" && parts[1]) await problemView(parts[1], params);
    else if (parts[0] === "job" && parts[1]) await jobView(parts[1]);
    else await suiteView(params);
    document.body.dataset.ready = "1";
  } catch (e) {
    show(el("p", {class: "error", id: "error"}, `Cannot load: ${e.message}`));
    document.body.dataset.ready = "1";
  }
}

window.addEventListener("hashchange", () => { document.body.dataset.ready = ""; render(); });
render();
