// hami-py dashboard: polls /api/snapshot (ETag, 304 when unchanged) and draws only the GPU
// rows in view, so that a 6,000-GPU cluster paints as fast as a small one. Hand-written, no
// build step, no dependencies.
"use strict";

const POLL_MS = 1000;
const LIST_MAX = 300;          // pods listed at most (the search narrows them)
const $ = (id) => document.getElementById(id);
const dash = window.hamiDash = { firstPaint: null, updates: 0, snap: null };
let etag = null, rows = [], query = "", selected = null, lastOk = 0;

function esc(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;",
    '"': "&quot;", "'": "&#39;" })[c]);
}

function color(key) {               // a stable colour per pod
  let h = 0;
  for (let i = 0; i < key.length; i++) h = (h * 31 + key.charCodeAt(i)) | 0;
  return `hsl(${Math.abs(h) % 360} 60% 58%)`;
}

const mib = (v) => v >= 10240 ? `${(v / 1024).toFixed(0)} GiB` : `${v} MiB`;
const pct = (a, b) => b ? `${Math.round(100 * a / b)}%` : "–";

function matches(text) { return text.toLowerCase().includes(query); }

function buildRows(snap) {
  rows = [];
  let gpus = 0;
  for (const node of snap.nodes) {
    const hit = !query || matches(node.name) ||
      node.gpus.some((g) => g.pods.some((p) => matches(p[0])));
    if (!hit) continue;
    rows.push({ node });
    for (const gpu of node.gpus) { rows.push({ node, gpu }); gpus++; }
  }
  $("gpu-count").textContent = `${gpus} GPUs shown`;
  $("spacer").style.height = `${rows.length * rowHeight()}px`;
}

let rowPx = 0;
function rowHeight() {
  if (!rowPx) rowPx = parseFloat(getComputedStyle(document.documentElement)
    .getPropertyValue("--row")) || 30;
  return rowPx;
}

function bar(gpu, total, index) {   // index 1: MiB, 2: cores
  const parts = gpu.pods.map((p) => {
    const w = total ? (100 * p[index] / total) : 0;
    const hit = query && matches(p[0]) ? " hit" : "";
    return `<i class="seg${hit}" data-pod="${esc(p[0])}" title="${esc(p[0])}: ` +
      `${index === 1 ? mib(p[1]) : p[2] + "% cores"}" style="width:${w}%;background:${color(p[0])}"></i>`;
  }).join("");
  const used = index === 1 ? gpu.usedmem : gpu.usedcores;
  const label = index === 1 ? `${mib(used)} / ${mib(total)}` : `${used} / ${total}%`;
  return `<div class="bar">${parts}<em>${label}</em></div>`;
}

function gpuRow(node, g) {
  const bad = g.healthy ? "" : " unhealthy";
  const xid = g.xids ? `<span class="xid">XID ${g.xids.join(",")}</span>` : "";
  const state = g.healthy ? "Healthy" : "Unhealthy";
  let m = g.measured ? `in use ${mib(Math.round(g.measured.mem / 1048576))}, ` +
    `util ${Math.round(g.measured.util)}%` : "";
  if (g.mode === "mig") {
    // MIG instances: profile @ first memory slice; pending until the node agent made it
    const inst = (g.instances || []).map(i =>
      `${esc(i[1])}@${i[2]}${i[4] ? "" : " (pending)"}`).join(", ");
    m = `MIG ${g.instances ? g.instances.length : 0}/${g.slots}: ${inst || "no instances"}` +
      (m ? ` · ${m}` : "");
  }
  return `<div class="row gpu${bad}" data-node="${esc(node.name)}" data-uuid="${esc(g.uuid)}" ` +
    `data-health="${state}"><span class="name" title="${esc(g.uuid)}"><span class="dot"></span>` +
    `GPU ${g.index} ${esc(g.type)} <small>${esc(g.uuid.slice(0, 12))}…</small>${xid}</span>` +
    bar(g, g.mem, 1) + bar(g, g.cores, 2) + `<span class="measured">${m}</span></div>`;
}

function nodeRow(node) {
  const err = node.scrape_error ? " · metrics unavailable" : "";
  return `<div class="row node" data-node="${esc(node.name)}"><span>${esc(node.name)}` +
    ` <small>${node.gpus.length} GPUs${err}</small></span></div>`;
}

function drawRows() {
  const box = $("rows"), h = rowHeight();
  const first = Math.max(0, Math.floor(box.scrollTop / h) - 5);
  const last = Math.min(rows.length, first + Math.ceil(box.clientHeight / h) + 10);
  let html = "";
  for (let i = first; i < last; i++) {
    const r = rows[i];
    html += (r.gpu ? gpuRow(r.node, r.gpu) : nodeRow(r.node))
      .replace("<div class=\"row", `<div style="top:${i * h}px" class="row`);
  }
  $("spacer").innerHTML = html;
}

function card(value, label) { return `<div class="card"><b>${value}</b><span>${label}</span></div>`; }

function drawOverview(o) {
  $("overview").innerHTML = [
    card(`${o.gpus - (o.free || 0)} / ${o.gpus || 0}`, "GPUs allocated (any share)"),
    card(`${o.free || 0}`, "GPUs free"),
    card(`${pct(o.usedmem || 0, o.mem)}`, `memory allocated (${mib(o.usedmem || 0)})`),
    card(`${pct(o.usedcores || 0, o.cores)}`, "cores allocated"),
    card(`${o.fragmented || 0}`, `fragmented GPUs (partly used, fit no pending pod; ` +
      `${mib(o.fragmentedmem || 0)} free)`),
    card(`${o.unhealthy || 0}`, "GPUs unhealthy"),
    card(`${o.nodes}`, "nodes"), card(`${o.pods}`, "GPU pods"), card(`${o.pending}`, "pending"),
    card(`${o.claims || 0}`, `DRA claims (${mib(o.claimmem || 0)} on ${o.claimgpus || 0} GPUs)`),
  ].join("");
}

function listItem(key, title, sub) {
  const sel = key === selected ? " class=\"sel\"" : "";
  return `<li${sel} data-pod="${esc(key)}">${esc(title)}<small>${esc(sub)}</small></li>`;
}

function drawLists(snap) {
  const pending = snap.pending.filter((p) => !query || matches(p.key));
  $("pending-count").textContent = `${snap.pending.length}`;
  $("pending").innerHTML = pending.slice(0, LIST_MAX)
    .map((p) => listItem(p.key, p.key, p.reason)).join("");
  const pods = snap.pods.filter((p) => !query || matches(p.key) || matches(p.node));
  $("pod-count").textContent = `${pods.length} of ${snap.pods.length}` +
    (pods.length > LIST_MAX ? ` (first ${LIST_MAX}; search to narrow)` : "");
  $("pods").innerHTML = pods.slice(0, LIST_MAX).map((p) => listItem(p.key, p.key,
    `${p.phase || "?"} on ${p.node || "no node yet"}` +
    (p.gpus.length ? ` · ${p.gpus.map((g) => g[0].slice(0, 12)).join(", ")}` : ""))).join("");
  drawPreemption(snap.preemption || { holds: [], nominated: {}, recent: [] });
  drawClaims(snap.claims || []);
  $("events").innerHTML = snap.events.slice(-40).reverse().map((e) =>
    `<li>${esc(new Date(e.at * 1000).toLocaleTimeString())} ${esc(e.text)}</li>`).join("");
}

// Holds (slices kept for a preemptor until its victims are gone), nominated pods, and the
// recent decisions with the reason each set of victims was chosen.
function drawPreemption(pre) {
  const holds = pre.holds.map((h) => listItem(h.preemptor, `${h.preemptor} → ${h.node}`,
    `victims ${h.victims.join(", ")}` +
    (h.waiting_for.length ? ` · waiting for ${h.waiting_for.join(", ")}` : " · slices held") +
    ` · ${h.why}` + (h.pdb_violations ? ` · ${h.pdb_violations} budget violation(s)` : "")));
  const held = new Set(pre.holds.map((h) => h.preemptor));
  const nominated = Object.entries(pre.nominated).filter(([k]) => !held.has(k))
    .map(([k, n]) => listItem(k, `${k} nominated to ${n}`, "by kube-scheduler"));
  const recent = pre.recent.slice(-10).reverse().map((r) => `<li>` +
    `${esc(new Date(r.at * 1000).toLocaleTimeString())} ${esc(r.event)} ${esc(r.preemptor)} ` +
    `on ${esc(r.node)} (${esc(r.by)})<small>${esc(r.victims.join(", "))}: ${esc(r.why)}</small></li>`);
  $("preempt-count").textContent = `${pre.holds.length} held`;
  $("preemption").innerHTML = holds.concat(nominated, recent).join("");
}

// DRA claims kube-scheduler allocated on our driver's GPUs: where, how much, for which pods.
function drawClaims(claims) {
  const shown = claims.filter((c) => !query || matches(c.key) || matches(c.node) ||
    c.pods.some(matches));
  $("claim-count").textContent = `${claims.length}`;
  $("claims").innerHTML = shown.slice(0, LIST_MAX).map((c) => `<li>${esc(c.key)} on ` +
    `${esc(c.node)}<small>${esc(c.devices.map((d) => `${d[0].slice(0, 12)} ${mib(d[1])} ` +
    `${d[2]}%`).join(", "))} · ${esc(c.pods.join(", ") || "no pod")}</small></li>`).join("");
}

function drawDetail(snap) {
  const pod = selected && snap.pods.find((p) => p.key === selected);
  $("detail-hint").textContent = pod ? "" : "click a pod";
  if (!pod) { $("detail").innerHTML = ""; return; }
  const gpus = pod.gpus.map((g) => `<tr><td><span class="swatch" style="background:` +
    `${color(pod.key)}"></span>${esc(g[0])}</td><td>${mib(g[1])}</td><td>${g[2]}%</td></tr>`);
  const limits = Object.entries(pod.limits).map(([c, l]) => `<tr><td>${esc(c)}</td><td colspan=2>` +
    `${esc(Object.entries(l).map(([k, v]) => `${k}=${v}`).join(" "))}</td></tr>`);
  const use = pod.use.map((u) => `<tr class="use"><td>${esc(u[0])} on ${esc(u[1].slice(0, 12))}…</td><td>` +
    `${u[2] == null ? "–" : mib(Math.round(u[2] / 1048576))}</td><td>` +
    `${u[3] == null ? "–" : Math.round(u[3]) + "%"}</td></tr>`);
  const events = snap.events.filter((e) => e.pod === pod.key).slice(-10)
    .map((e) => `<tr><td colspan=3>${esc(e.text)}</td></tr>`);
  const pend = snap.pending.find((p) => p.key === pod.key);
  $("detail").innerHTML = `<b id="detail-key">${esc(pod.key)}</b> · ${esc(pod.phase)} on ` +
    `${esc(pod.node || "no node yet")}` + (pend ? `<p>Pending: ${esc(pend.reason)}</p>` : "") +
    `<table><tr><th>GPU</th><th>memory</th><th>cores</th></tr>${gpus.join("")}` +
    `<tr><th colspan=3>limits</th></tr>${limits.join("")}` +
    `<tr><th>measured use</th><th>in use</th><th>compute</th></tr>${use.join("")}` +
    `<tr><th colspan=3>events</th></tr>${events.join("")}</table>`;
}

function draw() {
  const snap = dash.snap;
  if (!snap) return;
  drawOverview(snap.overview);
  buildRows(snap);
  drawRows();
  drawLists(snap);
  drawDetail(snap);
  if (dash.firstPaint === null) dash.firstPaint = performance.now();
}

async function poll() {
  try {
    const resp = await fetch("api/snapshot", { headers: etag ? { "If-None-Match": etag } : {} });
    if (resp.status === 200) {
      dash.snap = await resp.json();
      etag = resp.headers.get("ETag");
      dash.updates++;
      draw();
    } else if (resp.status !== 304) {
      throw new Error(`HTTP ${resp.status}`);
    }
    lastOk = Date.now();
    $("live").textContent = `live · ${new Date(lastOk).toLocaleTimeString()}`;
    $("live").className = "live";
  } catch (e) {
    $("live").textContent = `not updating: ${e.message}`;
    $("live").className = "live stale";
  }
  setTimeout(poll, POLL_MS);
}

function select(key) { selected = key; if (dash.snap) { drawLists(dash.snap); drawDetail(dash.snap); } }

$("rows").addEventListener("scroll", () => requestAnimationFrame(drawRows), { passive: true });
$("search").addEventListener("input", (e) => {
  query = e.target.value.trim().toLowerCase();
  $("rows").scrollTop = 0;
  draw();
});
document.addEventListener("click", (e) => {
  const el = e.target.closest("[data-pod]");
  if (el) select(el.dataset.pod);
});
poll();
