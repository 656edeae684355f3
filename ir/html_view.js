/* html_view.js: lays out and draws the graph of `fusionc dump --format html`.
 *
 * Input: the JSON in #graph (its fields are described at the top of
 * ir/html.c).  What is drawn: a box per visible op, per collapsed group (a
 * repeated block's ops of one phase and device, or its sources of one
 * role), per source read by a visible op; an edge per pair of boxes that a
 * value connects (several values: one thicker edge, counted).
 *
 * Layout, redone whenever a block is expanded or collapsed:
 *   rank  = the longest path from the sources, boxes taken in topological
 *           order (a send's edge to its recv included); where collapsing a
 *           block made a cycle, the box holding the earliest op goes first
 *           and the edges that close the cycle are drawn dashed, unranked.
 *           Sources, and ops that read nothing computed (fill,
 *           lr_schedule), sit one rank above their first consumer.
 *   order = a few barycentre sweeps, down then up.
 *   x     = each box pulled towards its neighbours' mean, then packed
 *           without overlap (the mean of a left and a right packing).
 * Drawn as SVG into one <g> whose transform pans and zooms.
 *
 * Not a general graph viewer: it knows this JSON, and it stays quick by
 * drawing few boxes (blocks collapsed), not by clever rendering.
 */
'use strict';

const G = JSON.parse(document.getElementById('graph').textContent);

/* ---- the graph, as objects ---------------------------------------------- */

const ops = G.ops.map((a, i) => ({
  id: i, name: a[0], kind: a[1], phase: a[2], device: a[3], stage: a[4], group: a[5],
  ins: a[6], outs: a[7], flops: a[8], bytes: a[9], file: a[10], line: a[11], madeBy: a[12], tensor: a[13],
}));
const values = G.values.map((a, i) => ({
  id: i, name: a[0], dtype: a[1], shape: a[2], role: a[3], producer: a[4], group: a[5], fromStage: a[6],
  consumers: [],
}));
const groups = G.groups.map((a, i) => ({
  id: i, prefix: a[0], isSource: !!a[1], what: a[2], device: a[3], lo: a[4], hi: a[5], members: a[6], ops: [], values: [],
}));
const devices = new Map(G.devices.map(d => [d[0], { name: d[1], colour: d[2], stage: d[3] }]));
for (const op of ops) {
  for (const v of op.ins) if (values[v]) values[v].consumers.push(op.id);
  if (op.group >= 0) groups[op.group].ops.push(op.id);
}
for (const v of values) if (v.group >= 0) groups[v.group].values.push(v.id);

const STAGE_COLOURS = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];
const PHASE_COLOURS = { forward: '#a6cee3', backward: '#fdbf6f', update: '#b2df8a', none: '#eeeeee' };
const PASS_COLOURS = { frontend: '#a6cee3', autodiff: '#fdbf6f', optimizer: '#b2df8a', comm: '#cab2d6', 'comm, compress': '#fb9a99' };
const ROLE_COLOURS = { param: '#d3d3d3', input: '#add8e6', state: '#ffffe0' };
const ROLE_PLURAL = { param: 'params', input: 'inputs', state: 'state' };

const stageColour = s => (s >= 0 ? STAGE_COLOURS[s % STAGE_COLOURS.length] : '#555');
const deviceName = d => (d < 0 ? 'not placed' : devices.has(d) ? devices.get(d).name : 'device ' + d);
const deviceColour = d => (devices.has(d) ? devices.get(d).colour : '#ffffff');
const placed = ops.some(op => op.stage >= 0);

function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}

/* 1234567 -> "1.23 M" (decimal prefixes, for FLOPs); bytes get binary ones. */
function fmtCount(x, unit) {
  if (x === null || x === undefined) return 'unknown (shapes not inferred)';
  const p = ['', 'k', 'M', 'G', 'T', 'P'];
  let i = 0;
  while (Math.abs(x) >= 1000 && i < p.length - 1) { x /= 1000; i++; }
  return (i ? x.toFixed(2) : String(Math.round(x))) + ' ' + p[i] + unit;
}
function fmtBytes(x) {
  if (x === null || x === undefined) return 'unknown (shapes not inferred)';
  const p = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0, y = x;
  while (y >= 1024 && i < p.length - 1) { y /= 1024; i++; }
  return (i ? y.toFixed(2) : String(y)) + ' ' + p[i] + (i ? ' (' + x.toLocaleString('en') + ' B)' : '');
}

function groupTitle(g) {
  const span = g.lo === g.hi ? g.prefix + '.' + g.lo : g.prefix + '.' + g.lo + '-' + g.hi;
  return span + ' ' + (g.isSource ? ROLE_PLURAL[g.what] || g.what : g.what === 'none' ? 'ops' : g.what);
}
function groupCounts(g) {
  return g.isSource ? g.members + ' tensors' : (g.hi - g.lo + 1) + ' blocks, ' + g.members + ' ops';
}

/* ---- state ----------------------------------------------------------------- */

const expanded = new Set(G.expand ? groups.map(g => g.id) : []);
let view = null;          // the boxes and edges drawn now (buildView)
let selected = null;      // { type: 'op' | 'group' | 'value', id }
let colourBy = 'device';
let search = { query: '', matches: [], at: -1 };
let transform = { x: 0, y: 0, k: 1 };

const svg = document.getElementById('svg');
const viewport = document.getElementById('viewport');
const measure = document.createElement('canvas').getContext('2d');
measure.font = '11px Helvetica, Arial, sans-serif';
const widthCache = new Map();
function textWidth(s) {
  let w = widthCache.get(s);
  if (w === undefined) { w = measure.measureText(s).width; widthCache.set(s, w); }
  return w;
}

/* ---- the boxes and edges of what is expanded -------------------------------- */

const BOX_H = 34, GROUP_H = 40, SOURCE_H = 30, RANK_GAP = 36, BOX_GAP = 18, PAD_X = 10;

function buildView() {
  const boxes = [];
  const opBox = new Int32Array(ops.length).fill(-1);
  const sourceBox = new Int32Array(values.length).fill(-1);
  const groupBox = new Int32Array(groups.length).fill(-1);
  const add = (box) => {
    box.index = boxes.length;
    box.w = Math.max(textWidth(box.l1), textWidth(box.l2 || '')) + 2 * PAD_X;
    boxes.push(box);
    return box.index;
  };
  for (const op of ops) {
    const g = op.group;
    if (g >= 0 && !expanded.has(g)) {
      if (groupBox[g] < 0)
        groupBox[g] = add({ type: 'group', id: g, key: op.id, h: GROUP_H, l1: groupTitle(groups[g]), l2: groupCounts(groups[g]) });
      opBox[op.id] = groupBox[g];
    } else {
      opBox[op.id] = add({ type: 'op', id: op.id, key: op.id, h: BOX_H, l1: op.name, l2: op.kind });
    }
  }
  const edges = new Map();   // from * n + to -> edge; filled once every box is known
  const edgeList = [];
  for (const op of ops) {
    const to = opBox[op.id];
    for (const v of op.ins) {
      const val = values[v];
      if (!val) continue;
      let from;
      if (val.producer >= 0) {
        from = opBox[val.producer];
      } else if (val.group >= 0 && !expanded.has(val.group)) {
        const g = val.group;
        if (groupBox[g] < 0)
          groupBox[g] = add({ type: 'group', id: g, key: -1, h: GROUP_H, l1: groupTitle(groups[g]), l2: groupCounts(groups[g]), source: true });
        from = groupBox[g];
      } else {
        if (sourceBox[v] < 0)
          sourceBox[v] = add({
            type: 'value', id: v, key: -1, h: SOURCE_H, l1: val.name,
            l2: val.fromStage >= 0 ? 'from stage ' + val.fromStage : val.shape, source: true, foreign: val.fromStage >= 0,
          });
        from = sourceBox[v];
      }
      if (from === to) continue;   // inside one collapsed block
      const key = from * 1e6 + to;
      let e = edges.get(key);
      if (!e) { e = { from, to, count: 0, value: v }; edges.set(key, e); edgeList.push(e); }
      e.count++;
    }
  }
  // a send and its recv (same message id): an edge too, so that the stages line up
  const sends = new Map();
  for (const op of ops) if (op.kind === 'send' && op.tensor >= 0) sends.set(op.tensor, op.id);
  for (const op of ops) {
    if (op.kind !== 'recv' || !sends.has(op.tensor)) continue;
    const from = opBox[sends.get(op.tensor)], to = opBox[op.id];
    if (from === to) continue;
    const key = 'm' + from + ',' + to;
    let e = edges.get(key);
    if (!e) { e = { from, to, count: 0, value: -1, message: true }; edges.set(key, e); edgeList.push(e); }
    e.count++;
  }
  return { boxes, edges: edgeList, opBox, sourceBox, groupBox };
}

/* ---- layout ------------------------------------------------------------------ */

function layout(v) {
  const { boxes, edges } = v;
  const n = boxes.length;
  const preds = Array.from({ length: n }, () => []);
  const succs = Array.from({ length: n }, () => []);
  const into = Array.from({ length: n }, () => []), outOf = Array.from({ length: n }, () => []);
  for (const e of edges) { into[e.to].push(e); outOf[e.from].push(e); }
  // rank: longest path, boxes taken in topological order (the first op's
  // index breaks ties); where collapsing made a cycle, the box with the
  // first op goes next and the edges still waiting into it are "back"
  const opBoxes = boxes.filter(b => !b.source).sort((a, b) => a.key - b.key);
  const waiting = new Int32Array(n);
  for (const e of edges) if (!boxes[e.from].source) waiting[e.to]++;
  const done = new Uint8Array(n), rank = new Int32Array(n);
  const order = [];
  let ready = opBoxes.filter(b => waiting[b.index] === 0), next = 0;
  while (order.length < opBoxes.length) {
    let b;
    if (ready.length) {
      let best = 0;
      for (let i = 1; i < ready.length; i++) if (ready[i].key < ready[best].key) best = i;
      b = ready[best];
      ready[best] = ready[ready.length - 1];
      ready.pop();
    } else {
      while (done[opBoxes[next].index]) next++;
      b = opBoxes[next];
    }
    done[b.index] = 1;
    order.push(b);
    let r = 0;
    for (const e of into[b.index]) {
      if (boxes[e.from].source) { preds[b.index].push(e.from); succs[e.from].push(b.index); continue; }
      e.back = !done[e.from];
      if (e.back) continue;
      preds[b.index].push(e.from);
      succs[e.from].push(b.index);
      r = Math.max(r, rank[e.from] + 1);
    }
    rank[b.index] = r;
    for (const e of outOf[b.index]) if (!done[e.to] && --waiting[e.to] === 0) ready.push(boxes[e.to]);
  }
  // what nothing computed feeds (recv, fill, lr_schedule, positions), then
  // sources: one rank above their first consumer, not all on the top rank
  const above = b => {
    let r = Infinity;
    for (const s of succs[b.index]) r = Math.min(r, rank[s]);
    if (r !== Infinity) rank[b.index] = r - 1;
  };
  for (let i = order.length - 1; i >= 0; i--)
    if (!preds[order[i].index].some(p => !boxes[p].source)) above(order[i]);
  let minRank = 0;
  for (const b of boxes) {
    if (b.source) above(b);
    minRank = Math.min(minRank, rank[b.index]);
  }
  let nRanks = 0;
  for (let i = 0; i < n; i++) { rank[i] -= minRank; nRanks = Math.max(nRanks, rank[i] + 1); }
  const layers = Array.from({ length: nRanks }, () => []);
  // first order: ops by key, sources beside their first consumer
  const firstKey = b => (b.source ? Math.min(...succs[b.index].map(s => boxes[s].key), 1e9) - 0.5 : b.key);
  boxes.slice().sort((a, b) => firstKey(a) - firstKey(b)).forEach(b => layers[rank[b.index]].push(b.index));
  const pos = new Float64Array(n);
  const number = () => layers.forEach(l => l.forEach((b, i) => { pos[b] = (i + 0.5) / l.length; }));
  number();
  // barycentre sweeps: down (by predecessors), up (by successors)
  const sweep = (r, nbrs) => {
    const l = layers[r];
    const bary = new Map();
    for (const b of l) {
      const ns = nbrs[b];
      bary.set(b, ns.length ? ns.reduce((s, x) => s + pos[x], 0) / ns.length : pos[b]);
    }
    l.sort((a, b) => bary.get(a) - bary.get(b));
    l.forEach((b, i) => { pos[b] = (i + 0.5) / l.length; });
  };
  for (let it = 0; it < 2; it++) {
    for (let r = 1; r < nRanks; r++) sweep(r, preds);
    for (let r = nRanks - 2; r >= 0; r--) sweep(r, succs);
  }
  // x: start packed and centred, then pull towards the neighbours
  const x = new Float64Array(n);
  for (const l of layers) {
    let total = -BOX_GAP;
    for (const b of l) total += boxes[b].w + BOX_GAP;
    let at = -total / 2;
    for (const b of l) { x[b] = at + boxes[b].w / 2; at += boxes[b].w + BOX_GAP; }
  }
  const place = (r, nbrs) => {
    const l = layers[r];
    if (!l.length) return;
    const want = l.map(b => (nbrs[b].length ? nbrs[b].reduce((s, o) => s + x[o], 0) / nbrs[b].length : x[b]));
    const left = new Float64Array(l.length), right = new Float64Array(l.length);
    for (let i = 0; i < l.length; i++) {
      const sep = i ? (boxes[l[i - 1]].w + boxes[l[i]].w) / 2 + BOX_GAP : 0;
      left[i] = i ? Math.max(want[i], left[i - 1] + sep) : want[i];
    }
    for (let i = l.length - 1; i >= 0; i--) {
      const sep = i < l.length - 1 ? (boxes[l[i + 1]].w + boxes[l[i]].w) / 2 + BOX_GAP : 0;
      right[i] = i < l.length - 1 ? Math.min(want[i], right[i + 1] - sep) : want[i];
    }
    // the mean of two packings, each without overlap, has none either
    l.forEach((b, i) => { x[b] = (left[i] + right[i]) / 2; });
  };
  for (let it = 0; it < 3; it++) {
    for (let r = 1; r < nRanks; r++) place(r, preds);
    for (let r = nRanks - 2; r >= 0; r--) place(r, succs);
  }
  // y: rank by rank, each rank as tall as its tallest box
  let y = 0;
  for (const l of layers) {
    const h = Math.max(0, ...l.map(b => boxes[b].h));
    for (const b of l) { boxes[b].x = x[b]; boxes[b].y = y + (h - boxes[b].h) / 2; boxes[b].rank = rank[b]; }
    y += h + RANK_GAP;
  }
  let x0 = Infinity, x1 = -Infinity;
  for (const b of boxes) { x0 = Math.min(x0, b.x - b.w / 2); x1 = Math.max(x1, b.x + b.w / 2); }
  v.bounds = n ? { x0, x1, y0: 0, y1: y - RANK_GAP } : { x0: 0, x1: 1, y0: 0, y1: 1 };
  v.nRanks = nRanks;
}

/* ---- drawing ------------------------------------------------------------------- */

function fillOf(b) {
  if (b.type === 'value') return b.foreign ? '#ffffff' : ROLE_COLOURS[values[b.id].role] || '#fff';
  const o = b.type === 'op' ? ops[b.id] : groups[b.id];
  if (b.type === 'group' && o.isSource) return ROLE_COLOURS[o.what] || '#fff';
  const first = b.type === 'op' ? o : ops[o.ops[0]];
  switch (colourBy) {
    case 'stage': return first.stage >= 0 ? stageColour(first.stage) + '88' : '#ffffff';
    case 'phase': return PHASE_COLOURS[first.phase] || '#fff';
    case 'pass': return PASS_COLOURS[first.madeBy] || '#fff';
    default: return deviceColour(first.device);
  }
}
function strokeOf(b) {
  if (b.type === 'value' || (b.type === 'group' && groups[b.id].isSource)) return '#777';
  const first = b.type === 'op' ? ops[b.id] : ops[groups[b.id].ops[0]];
  return first.stage >= 0 ? stageColour(first.stage) : '#555';
}
function tooltipOf(b) {
  if (b.type === 'op') { const o = ops[b.id]; return o.name + ' (' + o.kind + ', ' + o.phase + ', ' + deviceName(o.device) + ')'; }
  if (b.type === 'value') return values[b.id].name + ' ' + values[b.id].dtype + values[b.id].shape;
  const g = groups[b.id];
  return groupTitle(g) + ', ' + groupCounts(g) + (g.isSource ? '' : ', ' + deviceName(g.device)) + ' (click to expand)';
}

function boxSvg(b) {
  const x = b.x - b.w / 2, y = b.y;
  const source = b.source && b.type !== 'group';
  const rx = source || (b.type === 'group' && groups[b.id].isSource) ? b.h / 2 : 3;
  const cls = 'box ' + b.type + (b.foreign ? ' foreign' : '');
  let s = '<g class="' + cls + '" data-b="' + b.index + '"><title>' + escapeHtml(tooltipOf(b)) + '</title>';
  if (b.type === 'group') s += '<rect class="back" x="' + (x + 4) + '" y="' + (y - 4) + '" width="' + b.w + '" height="' + b.h + '" rx="' + rx + '"/>';
  const stroke = strokeOf(b);
  s += '<rect class="front" x="' + x + '" y="' + y + '" width="' + b.w + '" height="' + b.h + '" rx="' + rx +
       '" fill="' + fillOf(b) + '"' + (stroke !== '#555' && stroke !== '#777' ? ' style="--stage:' + stroke + '"' : '') + '/>';
  const mid = y + b.h / 2;
  s += '<text class="l1" x="' + b.x + '" y="' + (mid - 3) + '" text-anchor="middle">' + escapeHtml(b.l1) + '</text>';
  s += '<text class="l2" x="' + b.x + '" y="' + (mid + 11) + '" text-anchor="middle">' + escapeHtml(b.l2) + '</text>';
  return s + '</g>';
}

function edgeSvg(e, i) {
  const a = view.boxes[e.from], b = view.boxes[e.to];
  const x1 = a.x, y1 = a.y + a.h, x2 = b.x, y2 = b.y;
  const dy = Math.max(30, Math.abs(y2 - y1) / 2);
  const d = 'M' + x1.toFixed(1) + ',' + y1.toFixed(1) + ' C' + x1.toFixed(1) + ',' + (y1 + dy).toFixed(1) + ' ' +
            x2.toFixed(1) + ',' + (y2 - dy).toFixed(1) + ' ' + x2.toFixed(1) + ',' + y2.toFixed(1);
  const width = e.count > 1 ? Math.min(6, 1 + Math.log2(e.count)) : 1;
  const label = e.message ? (e.count > 1 ? e.count + ' messages' : 'message to ' + b.l1)
              : e.count > 1 ? e.count + ' values' : values[e.value].name + ' ' + values[e.value].dtype + values[e.value].shape;
  // a collapsed block's params feed each of an expanded block's ops: faint, or they hide the block
  const faint = a.type === 'group' && a.source && b.type === 'op';
  return '<path class="edge' + (e.count > 1 ? ' many' : '') + (e.back ? ' back' : '') + (faint ? ' faint' : '') +
         (e.message ? ' message' : '') +
         '" data-e="' + i + '" d="' + d +
         '" style="stroke-width:' + width + '"><title>' + escapeHtml(label) + '</title></path>';
}

/* A dashed frame around each expanded op group's boxes, its title a link
 * that collapses it again. */
function framesSvg() {
  let s = '';
  for (const g of expanded) {
    const grp = groups[g];
    const members = grp.isSource ? grp.values.map(v => view.sourceBox[v]) : grp.ops.map(o => view.opBox[o]);
    const bs = members.filter(i => i >= 0).map(i => view.boxes[i]);
    if (!bs.length) continue;
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (const b of bs) { x0 = Math.min(x0, b.x - b.w / 2); x1 = Math.max(x1, b.x + b.w / 2); y0 = Math.min(y0, b.y); y1 = Math.max(y1, b.y + b.h); }
    x0 -= 10; x1 += 10; y0 -= 22; y1 += 8;
    s += '<g class="frame" data-g="' + g + '"><rect x="' + x0 + '" y="' + y0 + '" width="' + (x1 - x0) + '" height="' + (y1 - y0) +
         '" rx="8"/><text x="' + (x0 + 8) + '" y="' + (y0 + 15) + '" data-collapse="' + g + '">\u229f ' + escapeHtml(groupTitle(grp)) +
         (grp.isSource ? '' : ', ' + escapeHtml(deviceName(grp.device))) + ' (click to collapse)</text></g>';
  }
  return s;
}

let boxElements = [];
function draw() {
  document.getElementById('frames').innerHTML = framesSvg();
  document.getElementById('edges').innerHTML = view.edges.map(edgeSvg).join('');
  document.getElementById('boxes').innerHTML = view.boxes.map(boxSvg).join('');
  boxElements = Array.from(document.querySelectorAll('#boxes > g.box'));
  markHits();
  markSelected();
  drawLegend();
}

function recolour() {
  for (const el of boxElements) {
    const b = view.boxes[+el.dataset.b];
    el.querySelector('rect.front').setAttribute('fill', fillOf(b));
  }
  drawLegend();
}

function legendItem(colour, text, cls, shape) {
  return '<div class="legend-item ' + cls + '"><span class="swatch' + (shape ? ' ' + shape : '') + '" style="' +
         (shape === 'ring' ? 'border-color:' : 'background:') + colour + '"></span>' + escapeHtml(text) + '</div>';
}

function drawLegend() {
  let s = '<h3>Fill: ' + colourBy + '</h3>';
  if (colourBy === 'device') {
    if (!devices.size) s += legendItem('#ffffff', 'not placed', 'legend-device');
    for (const [, d] of devices) s += legendItem(d.colour, d.name + (d.stage >= 0 ? ' (stage ' + d.stage + ')' : ''), 'legend-device');
  } else if (colourBy === 'stage') {
    const stages = [...new Set(ops.map(o => o.stage))].sort((a, b) => a - b);
    for (const st of stages) s += legendItem(st >= 0 ? stageColour(st) + '88' : '#fff', st >= 0 ? 'stage ' + st : 'no stage', 'legend-stage');
  } else {
    const table = colourBy === 'phase' ? PHASE_COLOURS : PASS_COLOURS;
    const used = new Set(ops.map(o => (colourBy === 'phase' ? o.phase : o.madeBy)));
    for (const k of Object.keys(table)) if (used.has(k)) s += legendItem(table[k], k, 'legend-' + colourBy);
  }
  for (const r of Object.keys(ROLE_COLOURS)) s += legendItem(ROLE_COLOURS[r], r + ' (source)', 'legend-role', 'pill');
  if (placed) {
    s += '<h3>Border: stage</h3>';
    const stages = [...new Set(ops.map(o => o.stage))].filter(st => st >= 0).sort((a, b) => a - b);
    for (const st of stages) {
      const on = [...devices.values()].filter(d => d.stage === st).map(d => d.name);
      s += legendItem(stageColour(st), 'stage ' + st + (on.length ? ': ' + on.join(', ') : ''), 'legend-stage-border', 'ring');
    }
  }
  document.getElementById('legend').innerHTML = s;
}

/* ---- pan and zoom ----------------------------------------------------------------- */

function applyTransform() {
  viewport.setAttribute('transform', 'translate(' + transform.x.toFixed(1) + ',' + transform.y.toFixed(1) + ') scale(' + transform.k.toFixed(4) + ')');
}

/* The whole graph in the window (the fit button); or, the first time, as
 * much as fits with labels that can be read: the top of the graph, centred. */
function fit(readable) {
  const r = svg.getBoundingClientRect(), b = view.bounds;
  const w = Math.max(1, b.x1 - b.x0), h = Math.max(1, b.y1 - b.y0);
  let k = Math.min(1.2, (r.width - 40) / w, (r.height - 40) / h);
  if (readable) k = Math.max(k, 0.9);
  transform = { k, x: r.width / 2 - (b.x0 + w / 2) * k, y: 20 - b.y0 * k };
  if (h * k < r.height - 40) transform.y = (r.height - h * k) / 2 - b.y0 * k;
  applyTransform();
}

function centreOn(b) {
  const r = svg.getBoundingClientRect();
  transform.k = Math.max(transform.k, 0.8);
  transform.x = r.width / 2 - b.x * transform.k;
  transform.y = r.height / 2 - (b.y + b.h / 2) * transform.k;
  applyTransform();
}

let drag = null;
svg.addEventListener('mousedown', e => {
  drag = { x: e.clientX, y: e.clientY, tx: transform.x, ty: transform.y, moved: false };
  document.getElementById('canvas').classList.add('dragging');
});
window.addEventListener('mousemove', e => {
  if (!drag) return;
  const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
  if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
  transform.x = drag.tx + dx;
  transform.y = drag.ty + dy;
  applyTransform();
});
window.addEventListener('mouseup', e => {
  if (!drag) return;
  const moved = drag.moved;
  drag = null;
  document.getElementById('canvas').classList.remove('dragging');
  if (!moved) click(e.target);
});
svg.addEventListener('wheel', e => {
  e.preventDefault();
  const r = svg.getBoundingClientRect();
  const px = e.clientX - r.left, py = e.clientY - r.top;
  const k = Math.min(4, Math.max(0.05, transform.k * Math.exp(-e.deltaY * 0.0015)));
  transform.x = px - (px - transform.x) * (k / transform.k);
  transform.y = py - (py - transform.y) * (k / transform.k);
  transform.k = k;
  applyTransform();
}, { passive: false });

/* ---- expanding, selecting ------------------------------------------------------- */

function relayout(focus) {
  const t0 = performance.now();
  view = buildView();
  layout(view);
  draw();
  report(performance.now() - t0, false);
  if (focus) centreOn(focus);
}

function toggle(g) {
  const was = expanded.has(g);
  if (was) expanded.delete(g); else expanded.add(g);
  const grp = groups[g];
  select({ type: 'group', id: g });
  relayout(null);
  // keep the block in sight: its box, or its first member
  const first = was ? view.groupBox[g] : grp.isSource ? view.sourceBox[grp.values[0]] : view.opBox[grp.ops[0]];
  if (first >= 0) centreOn(view.boxes[first]);
}

function click(target) {
  const collapse = target.closest && target.closest('[data-collapse]');
  if (collapse) { toggle(+collapse.dataset.collapse); return; }
  const el = target.closest && target.closest('g.box');
  if (!el) return;
  const b = view.boxes[+el.dataset.b];
  if (b.type === 'group') toggle(b.id);
  else select({ type: b.type, id: b.id });
}

function boxOfSelection(s) {
  if (!s || !view) return -1;
  if (s.type === 'op') return view.opBox[s.id];
  if (s.type === 'value') return values[s.id].producer >= 0 ? view.opBox[values[s.id].producer] : view.sourceBox[s.id];
  return view.groupBox[s.id];
}

function markSelected() {
  for (const el of document.querySelectorAll('.box.sel')) el.classList.remove('sel');
  for (const el of document.querySelectorAll('.edge.lit')) el.classList.remove('lit');
  const b = boxOfSelection(selected);
  if (b < 0 || !boxElements[b]) return;
  boxElements[b].classList.add('sel');
  const paths = document.querySelectorAll('#edges > path');
  view.edges.forEach((e, i) => { if (e.from === b || e.to === b) paths[i].classList.add('lit'); });
}

function select(s) {
  selected = s;
  markSelected();
  showDetails();
}

function row(k, v) { return '<tr><td>' + escapeHtml(k) + '</td><td>' + v + '</td></tr>'; }
function valueLink(v) {
  const val = values[v];
  return '<a class="value" data-v="' + v + '">' + escapeHtml(val.name) + '</a> ' + escapeHtml(val.dtype + val.shape);
}

function showDetails() {
  const d = document.getElementById('details');
  if (!selected) { d.innerHTML = '<p class="muted">Click an op or a block to see it here.</p>'; return; }
  let s = '';
  if (selected.type === 'op') {
    const o = ops[selected.id];
    s += '<h3>' + escapeHtml(o.name) + '</h3><table>';
    s += row('op', escapeHtml(o.kind));
    s += row('outputs', o.outs.map(valueLink).join('<br>') || '<span class="muted">none (updates in place)</span>');
    s += row('inputs', o.ins.map(valueLink).join('<br>') || '<span class="muted">none</span>');
    s += row('FLOPs', escapeHtml(fmtCount(o.flops, 'FLOP')) + (o.flops ? ' <span class="muted">(' + o.flops.toLocaleString('en') + ')</span>' : ''));
    s += row('bytes', escapeHtml(fmtBytes(o.bytes)));
    s += row('device', escapeHtml(deviceName(o.device)));
    s += row('stage', o.stage >= 0 ? String(o.stage) : '<span class="muted">not placed</span>');
    s += row('phase', escapeHtml(o.phase));
    s += row('source', o.file ? escapeHtml(o.file + ':' + o.line) : '<span class="muted">none</span>');
    s += row('made by', escapeHtml(o.madeBy) + ' <span class="muted">pass</span>');
    s += '</table>';
    if (o.group >= 0)
      s += '<p>In block ' + escapeHtml(groupTitle(groups[o.group])) + '. <button data-toggle="' + o.group + '">collapse block</button></p>';
  } else if (selected.type === 'value') {
    const v = values[selected.id];
    s += '<h3>' + escapeHtml(v.name) + '</h3><table>';
    s += row('role', escapeHtml(v.role) + (v.fromStage >= 0 ? ' (made on stage ' + v.fromStage + ')' : ''));
    s += row('shape', escapeHtml(v.dtype + v.shape));
    s += row('read by', v.consumers.length + ' op' + (v.consumers.length === 1 ? '' : 's'));
    s += '</table>';
    if (v.group >= 0)
      s += '<p>In ' + escapeHtml(groupTitle(groups[v.group])) + '. <button data-toggle="' + v.group + '">collapse</button></p>';
  } else {
    const g = groups[selected.id];
    s += '<h3>' + escapeHtml(groupTitle(g)) + '</h3><table>';
    s += row('holds', escapeHtml(groupCounts(g)));
    if (!g.isSource) {
      const kinds = new Map();
      let flops = 0, bytes = 0, known = true;
      for (const i of g.ops) {
        kinds.set(ops[i].kind, (kinds.get(ops[i].kind) || 0) + 1);
        if (ops[i].flops === null || ops[i].bytes === null) known = false;
        flops += ops[i].flops || 0; bytes += ops[i].bytes || 0;
      }
      const first = ops[g.ops[0]];
      s += row('phase', escapeHtml(g.what));
      s += row('device', escapeHtml(deviceName(g.device)));
      s += row('stage', first.stage >= 0 ? String(first.stage) : '<span class="muted">not placed</span>');
      s += row('FLOPs', escapeHtml(known ? fmtCount(flops, 'FLOP') : fmtCount(null)));
      s += row('bytes', escapeHtml(known ? fmtBytes(bytes) : fmtBytes(null)));
      s += row('ops', [...kinds].sort((a, b) => b[1] - a[1]).map(([k, c]) => escapeHtml(k) + ' &times;' + c).join(', '));
      s += row('made by', escapeHtml([...new Set(g.ops.map(i => ops[i].madeBy))].join('; ')));
    } else {
      s += row('role', escapeHtml(g.what));
    }
    s += '</table><button data-toggle="' + g.id + '">' + (expanded.has(g.id) ? 'collapse' : 'expand') + '</button>';
  }
  d.innerHTML = s;
}

document.getElementById('details').addEventListener('click', e => {
  const t = e.target.closest('[data-toggle]');
  if (t) { toggle(+t.dataset.toggle); return; }
  const a = e.target.closest('[data-v]');
  if (!a) return;
  const v = values[+a.dataset.v];
  if (v.producer >= 0) goToOp(v.producer);
  else { select({ type: 'value', id: v.id }); const b = boxOfSelection(selected); if (b >= 0) centreOn(view.boxes[b]); }
});

/* Select op i, expanding its block if it is collapsed. */
function goToOp(i) {
  const g = ops[i].group;
  if (g >= 0 && !expanded.has(g)) { expanded.add(g); relayout(null); }
  select({ type: 'op', id: i });
  centreOn(view.boxes[view.opBox[i]]);
}

/* ---- search ----------------------------------------------------------------------- */

function markHits() {
  for (const el of document.querySelectorAll('.box.hit')) el.classList.remove('hit');
  for (const i of search.matches) {
    const b = view.opBox[i];
    if (b >= 0 && boxElements[b]) boxElements[b].classList.add('hit');
  }
}

function runSearch(query) {
  search = { query, matches: [], at: -1 };
  const q = query.trim().toLowerCase();
  const found = document.getElementById('found');
  if (q) for (const op of ops) if (op.name.toLowerCase().includes(q)) search.matches.push(op.id);
  markHits();
  if (!q) { found.textContent = ''; return; }
  const hidden = search.matches.filter(i => ops[i].group >= 0 && !expanded.has(ops[i].group)).length;
  found.textContent = search.matches.length
    ? search.matches.length + ' op' + (search.matches.length === 1 ? '' : 's') + (hidden ? ' (' + hidden + ' in collapsed blocks: Enter)' : '')
    : 'no op matches';
  if (search.matches.length) centreOn(view.boxes[view.opBox[search.matches[0]]]);
}

const searchBox = document.getElementById('search');
searchBox.addEventListener('input', () => runSearch(searchBox.value));
searchBox.addEventListener('keydown', e => {
  if (e.key === 'Escape') { searchBox.value = ''; runSearch(''); return; }
  if (e.key !== 'Enter' || !search.matches.length) return;
  search.at = (search.at + 1) % search.matches.length;
  goToOp(search.matches[search.at]);
  markHits();
  document.getElementById('found').textContent = (search.at + 1) + ' of ' + search.matches.length;
});

document.getElementById('colour-by').addEventListener('change', e => { colourBy = e.target.value; recolour(); });
document.getElementById('collapse-all').addEventListener('click', () => { expanded.clear(); relayout(null); fit(false); });
document.getElementById('fit').addEventListener('click', () => fit(false));

/* ---- the first draw, and the page's report of itself ------------------------------- */

function report(ms, first) {
  const s = document.getElementById('status');
  const collapsed = view.boxes.filter(b => b.type === 'group').length;
  s.setAttribute('data-ready', '1');
  s.setAttribute('data-boxes', String(view.boxes.length));
  s.setAttribute('data-collapsed', String(collapsed));
  if (first) s.setAttribute('data-load-ms', ms.toFixed(0));
  s.textContent = 'drawn ' + view.boxes.length + ' boxes (' + collapsed + ' collapsed blocks) in ' + ms.toFixed(0) + ' ms' +
                  (first ? ' from page load' : '') + ' \u00b7 ' + ops.length + ' ops, ' + view.edges.length + ' edges, ' +
                  view.nRanks + ' ranks \u00b7 ' + G.model + ' after ' + G.after + (G.stage >= 0 ? ', stage ' + G.stage : '');
}

/* The address can ask for a search or a selection, so that a link (or a
 * test) opens the page on what it is about:
 *   gpt2.html#search=attn           as if typed into the search box
 *   gpt2.html#select=h.3.attn.proj  that op selected, its block expanded */
function openFromAddress() {
  const hash = decodeURIComponent(location.hash.replace(/^#/, ''));
  const m = /^(search|select)=(.*)$/.exec(hash);
  if (!m) return;
  if (m[1] === 'search') {
    searchBox.value = m[2];
    runSearch(m[2]);
  } else {
    const op = ops.find(o => o.name === m[2]);
    if (op) goToOp(op.id);
    else document.getElementById('found').textContent = 'no op named ' + m[2];
  }
}

view = buildView();
layout(view);
draw();
fit(true);
openFromAddress();
document.body.getBoundingClientRect();   // style and layout done: what the first paint needs
report(performance.now(), true);
