// The static context-mixing explorer (cmixlib/plotting/explorer.py writes the data and this
// script into one HTML fragment). No dependencies, nothing fetched.
function cmixExplorer(id) {
  "use strict";
  const root = document.getElementById(id);
  const wrap = JSON.parse(document.getElementById(id + "-data").textContent);
  if (wrap.encoding !== "deflate+base64") { start(wrap); return; }
  if (typeof DecompressionStream === "undefined") {
    root.textContent = "This browser cannot unpack the explorer's data (it needs " +
      "DecompressionStream: a browser from 2023 or later).";
    return;
  }
  const bin = Uint8Array.from(atob(wrap.payload), function (c) { return c.charCodeAt(0); });
  new Response(new Blob([bin]).stream().pipeThrough(new DecompressionStream("deflate")))
    .text().then(function (t) { start(JSON.parse(t)); });

  function start(D) {
  const SCALE = Math.pow(10, D.decimals);
  const M = {}, rollOf = {}, baseOf = {};
  D.methods.forEach(function (m) {
    M[m.name] = m;
    if (m.kind === "aggregated" && m.base) {
      if (!(m.base in rollOf)) rollOf[m.base] = m.name;
      baseOf[m.name] = m.base;
    }
  });
  const isBaseline = function (name) { return ["gradient", "erasure"].indexOf(M[name].kind) >= 0; };
  function el(tag, attrs, parent, text) {
    const e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function labelled(text, parent) {
    const l = el("label", {style: "margin-right:1em;white-space:nowrap"}, parent);
    el("span", {style: "margin-right:0.3em"}, l, text);
    return l;
  }
  const ROW = "display:flex;flex-wrap:wrap;gap:0.4em;margin:0.4em 0";
  const bar1 = el("div", {style: ROW}, root);
  const modelL = labelled("model", bar1);
  const model = el("select", {id: id + "-model"}, modelL);
  D.models.forEach(function (b, k) { el("option", {value: k}, model, b.model); });
  const sentence = el("select", {id: id + "-sentence"}, labelled("sentence", bar1));
  const method = el("select", {id: id + "-method"}, labelled("method", bar1));
  const bar2 = el("div", {style: ROW}, root);
  const rollL = labelled("rollout across layers", bar2);
  const rollout = el("input", {type: "checkbox", id: id + "-rollout"}, rollL);
  const layerL = labelled("layer", bar2);
  const layer = el("input", {type: "range", min: 1, max: 1, step: 1, value: 1,
                             id: id + "-layer"}, layerL);
  const layerOut = el("span", {style: "margin-left:0.3em"}, layerL, "");
  const headL = labelled("head", bar2);
  const head = el("select", {id: id + "-head"}, headL);
  const view = el("select", {id: id + "-view"}, labelled("view", bar2));
  const bar3 = el("div", {style: ROW}, root);
  const mode = el("select", {id: id + "-mode"}, labelled("second panel", bar3));
  [["", "(none)"], ["method", "another method"], ["diff", "difference: this method \u2212 another"],
   ["pair", "the minimal pair (BLiMP sentences)"]].forEach(function (o) {
    el("option", {value: o[0]}, mode, o[1]); });
  const compareL = labelled("other method", bar3);
  const compare = el("select", {id: id + "-compare"}, compareL);
  const sharedL = labelled("one colour scale for both panels", bar3);
  const shared = el("input", {type: "checkbox", id: id + "-shared"}, sharedL);
  const info = el("div", {style: "font-size:12px;color:#555;margin:0.3em 0", id: id + "-info"}, root);
  const note = el("div", {style: "font-size:12px;color:#7a4a00;margin:0.3em 0", id: id + "-note"},
                  root);
  const panels = el("div", {style: "display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start"},
                    root);
  function panel(suffix) {
    const p = el("div", {}, panels);
    const cap = el("div", {style: "font-weight:bold;margin:0.2em 0;max-width:560px",
                           id: id + "-caption-" + suffix}, p);
    const row = el("div", {style: "display:flex;gap:6px;align-items:flex-start"}, p);
    const c = el("canvas", {id: id + "-canvas-" + suffix}, row);
    const cb = el("canvas", {id: id + "-colourbar-" + suffix}, row);
    return {panel: p, caption: cap, canvas: c, bar: cb, suffix: suffix};
  }
  const A = panel("a"), B = panel("b");
  const readout = el("div", {id: id + "-readout", style: "min-height:1.4em;margin-top:0.3em;" +
                             "font-family:monospace"}, root, "\u00a0");
  const DPR = function () { return window.devicePixelRatio || 1; };

  function blk() { return D.models[+model.value]; }
  // the layer number shown for slider position l (a block may store some layers only)
  function layerName(l) { const n = blk().layer_numbers; return n ? n[l - 1] : l; }
  function fillModel() {
    const b = blk(), keepS = +sentence.value || 0, keepM = method.value, keepC = compare.value;
    sentence.innerHTML = "";
    b.sentences.forEach(function (s, k) {
      const t = s.text.length > 60 ? s.text.slice(0, 57) + "..." : s.text;
      el("option", {value: k}, sentence, (k + 1) + ". " + t);
    });
    sentence.value = keepS < b.sentences.length ? keepS : 0;
    method.innerHTML = ""; compare.innerHTML = "";
    const names = b.methods.concat(b.baseline_methods || []);
    names.forEach(function (n) {
      el("option", {value: n}, method, M[n].label + " (" + M[n].kind + ")");
      if (!isBaseline(n)) el("option", {value: n}, compare, M[n].label + " (" + M[n].kind + ")");
    });
    method.value = names.indexOf(keepM) >= 0 ? keepM
      : (names.indexOf("value_zeroing") >= 0 ? "value_zeroing" : names[0]);
    compare.value = b.methods.indexOf(keepC) >= 0 ? keepC
      : (b.methods.indexOf("alti") >= 0 ? "alti" : b.methods[0]);
    layer.max = b.layers;
    if (+layer.value > b.layers || keepM === "") layer.value = b.layers;
    head.innerHTML = "";
    el("option", {value: 0}, head, b.heads ? "mean of the " + b.heads + " heads"
                                           : "as computed (no per-head maps stored)");
    for (let h = 1; h <= b.heads; h++) el("option", {value: h}, head, "head " + h);
    note.textContent = b.note || "";
    note.style.display = b.note ? "" : "none";
    fillViews();
  }
  function fillViews() {
    const toks = blk().sentences[+sentence.value].tokens, keep = view.value;
    view.innerHTML = "";
    el("option", {value: ""}, view, "whole map (heatmap)");
    toks.forEach(function (t, i) { el("option", {value: i}, view, "row " + i + ": " + t); });
    view.value = (keep !== "" && +keep < toks.length) ? keep : "";
  }
  function syncControls() {
    const name = method.value, base = isBaseline(name);
    rollout.checked = M[name].kind === "aggregated";
    rollout.disabled = base || (!(name in rollOf) && !(name in baseOf));
    rollL.style.opacity = rollout.disabled ? "0.5" : "1";
    head.disabled = name !== "attention" || !blk().heads;
    if (head.disabled) head.value = 0;
    headL.style.opacity = head.disabled ? "0.5" : "1";
    layer.disabled = base;
    compareL.style.display = (mode.value === "method" || mode.value === "diff") ? "" : "none";
  }
  // What one panel shows: {kind: "map", m: ints (n x n) | "row", r: ints, scale, target |
  // "none", why}; values are ints / SCALE, -1 = not computed.
  function content(k, name) {
    const s = blk().sentences[k], l = +layer.value;
    if (isBaseline(name)) {
      if (!s.baselines) return {kind: "none", why: M[name].label + ": no baseline for this " +
        "sentence (they explain a masked word or a sentiment prediction)."};
      return {kind: "row", r: s.baselines.rows[name], scale: s.baselines.scale[name],
              target: s.baselines.target, about: s.baselines};
    }
    const h = name === "attention" ? +head.value : 0;
    return {kind: "map", m: h > 0 ? s.heads[l - 1][h - 1] : s.maps[name][l - 1], head: h};
  }
  function mapMax(m) {
    let v = 0;
    m.forEach(function (r) { r.forEach(function (x) { v = Math.max(v, x); }); });
    return v;
  }
  function rgb(hex) {
    const h = hex.replace("#", "");
    return [0, 2, 4].map(function (k) { return parseInt(h.slice(k, k + 2), 16); });
  }
  function shade(col, f) {
    f = Math.max(0, Math.min(1, f));
    return "rgb(" + col.map(function (c) { return Math.round(255 + (c - 255) * f); }).join(",") + ")";
  }
  const POS = rgb("#b2182b"), NEG = rgb("#2166ac");
  function diverge(f) { return f >= 0 ? shade(POS, f) : shade(NEG, -f); }
  function setup(c, w, h) {
    const r = DPR();
    c.width = Math.round(w * r); c.height = Math.round(h * r);
    c.style.width = w + "px"; c.style.height = h + "px";
    const ctx = c.getContext("2d");
    ctx.setTransform(r, 0, 0, r, 0, 0);
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, w, h);
    ctx.font = "11px sans-serif";
    return ctx;
  }
  const geom = {}, drawn = {};
  function labels(ctx, toks) {
    return Math.min(110, 8 + Math.max.apply(null, toks.map(function (t) {
      return ctx.measureText(t).width; })));
  }
  function colourBar(p, lo, hi, colourOf, height) {
    const w = 58, top = 6, h = Math.max(60, height - 12);
    const ctx = setup(p.bar, w, h + 2 * top);
    for (let y = 0; y < h; y++) {
      ctx.fillStyle = colourOf(hi - (hi - lo) * (y + 0.5) / h);
      ctx.fillRect(2, top + y, 14, 1);
    }
    ctx.strokeStyle = "#999"; ctx.strokeRect(2, top, 14, h);
    ctx.fillStyle = "#000"; ctx.textBaseline = "middle"; ctx.textAlign = "left";
    const fmt = function (v) { return (Math.abs(v) < 1e-12 ? 0 : v).toFixed(D.decimals); };
    ctx.fillText(fmt(hi), 19, top + 5); ctx.fillText(fmt(lo), 19, top + h - 5);
    if (lo < 0) ctx.fillText(fmt(0), 19, top + h / 2);
    p.bar.style.display = "";
    geom[p.bar.id] = {lo: lo, hi: hi};
  }
  function heat(p, toks, m, colourOf, vmin, vmax) {
    const n = toks.length, c = Math.max(12, Math.min(26, Math.floor(440 / n)));
    const probe = setup(p.canvas, 10, 10), lab = labels(probe, toks);
    const ctx = setup(p.canvas, lab + n * c + 4, lab + n * c + 4);
    for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) {
      const v = m[i][j];
      ctx.fillStyle = v === null || v < vmin ? "#ddd" : colourOf(v);
      ctx.fillRect(lab + j * c, lab + i * c, c, c);
    }
    ctx.fillStyle = "#000"; ctx.textBaseline = "middle";
    for (let i = 0; i < n; i++) {
      ctx.textAlign = "right"; ctx.fillText(toks[i], lab - 4, lab + i * c + c / 2);
      ctx.save(); ctx.translate(lab + i * c + c / 2, lab - 4); ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left"; ctx.fillText(toks[i], 0, 0); ctx.restore();
    }
    return {kind: "heat", x0: lab, y0: lab, c: c, n: n, h: lab + n * c + 4};
  }
  function bars(p, toks, row, vmax, highlight, colour, signed) {
    const n = toks.length, c = Math.max(20, Math.min(40, Math.floor(520 / n))), h = 150, top = 16;
    const probe = setup(p.canvas, 10, 10), lab = labels(probe, toks);
    const ctx = setup(p.canvas, n * c + 50, top + h + lab + 4);
    const zero = signed ? top + h / 2 : top + h, span = signed ? h / 2 : h;
    ctx.strokeStyle = "#999"; ctx.beginPath(); ctx.moveTo(40, zero); ctx.lineTo(40 + n * c, zero);
    ctx.stroke();
    ctx.fillStyle = "#000"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
    ctx.fillText(vmax.toPrecision(2), 38, zero - span);
    if (signed) ctx.fillText((-vmax).toPrecision(2), 38, zero + span);
    for (let j = 0; j < n; j++) {
      const v = row[j] === null ? 0 : row[j], bh = vmax > 0 ? span * v / vmax : 0;
      ctx.fillStyle = j === highlight ? "#444" : (v < 0 ? "#b2182b" : colour);
      ctx.fillRect(40 + j * c + 2, zero - Math.max(bh, 0), c - 4, Math.abs(bh));
      ctx.save(); ctx.translate(40 + j * c + c / 2, top + h + 4); ctx.rotate(-Math.PI / 2);
      ctx.fillStyle = "#000"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
      ctx.fillText(toks[j], 0, 0); ctx.restore();
    }
    p.bar.style.display = "none";
    return {kind: "row", x0: 40, c: c, n: n};
  }
  function values(m) {    // ints -> numbers, -1 -> null (not computed)
    return m.map(function (r) { return r.map(function (v) { return v < 0 ? null : v / SCALE; }); });
  }
  // draw one panel: spec = {k: sentence, name, diff: other name | undefined, vmax: shared max}
  function draw(p, spec) {
    const b = blk(), s = b.sentences[spec.k], toks = s.tokens, l = +layer.value;
    const row = view.value === "" ? null : +view.value;
    const C = content(spec.k, spec.name);
    p.panel.style.display = "";
    if (C.kind === "none") {
      p.caption.textContent = C.why; setup(p.canvas, 10, 10); p.bar.style.display = "none";
      geom[p.canvas.id] = null; drawn[p.suffix] = null;
      return;
    }
    if (C.kind === "row") {
      const r = C.r.map(function (v) { return v / SCALE; });
      p.caption.textContent = M[spec.name].label + " (no layers): " + C.about.explains + ", " +
        C.about.model + "; bars divided by the row's largest |score| " + C.scale.toPrecision(3);
      geom[p.canvas.id] = Object.assign(bars(p, toks, r, 1, C.target, M[spec.name].colour, true),
                                        {name: spec.name, k: spec.k, vals: [r], row: 0,
                                         scale: C.scale});
      drawn[p.suffix] = {kind: "row", ints: C.r};
      return;
    }
    let m = values(C.m), ints = C.m, title = M[spec.name].label +
      (C.head ? " head " + C.head : "") + ", layer " + layerName(l);
    if (spec.diff) {
      const O = content(spec.k, spec.diff), o = values(O.m);
      m = m.map(function (r, i) { return r.map(function (v, j) {
        return v === null || o[i][j] === null ? null : (C.m[i][j] - O.m[i][j]) / SCALE; }); });
      ints = C.m.map(function (r, i) { return r.map(function (v, j) {
        return v < 0 || O.m[i][j] < 0 ? null : v - O.m[i][j]; }); });
      title = M[spec.name].label + (C.head ? " head " + C.head : "") + " \u2212 " +
        M[spec.diff].label + (O.head ? " head " + O.head : "") + ", layer " + layerName(l);
    }
    if (spec.k !== +sentence.value) title += " (the minimal pair: \u201c" + s.text + "\u201d)";
    let g;
    if (spec.diff) {
      let a = 0;
      m.forEach(function (r) { r.forEach(function (v) { if (v !== null) a = Math.max(a, Math.abs(v)); }); });
      a = a || 1 / SCALE;
      if (row === null) {
        g = heat(p, toks, m, function (v) { return diverge(v / a); }, -Infinity, a);
        colourBar(p, -a, a, function (v) { return diverge(v / a); }, g.h);
      } else g = bars(p, toks, m[row], a, row, M[spec.name].colour, true);
    } else {
      const vmax = spec.vmax !== undefined ? spec.vmax : mapMax(C.m) / SCALE;
      const col = rgb(M[spec.name].colour);
      const f = function (v) { return shade(col, vmax > 0 ? v / vmax : 0); };
      if (row === null) { g = heat(p, toks, m, f, 0, vmax); colourBar(p, 0, vmax, f, g.h); }
      else g = bars(p, toks, m[row], vmax, row, M[spec.name].colour, false);
    }
    p.caption.textContent = title + (row === null ? "" : ", row of " + JSON.stringify(toks[row]));
    geom[p.canvas.id] = Object.assign(g, {name: spec.name, diff: spec.diff, k: spec.k, vals: m,
                                          row: row});
    drawn[p.suffix] = {kind: spec.diff ? "diff" : "map", ints: ints, row: row};
  }
  function redraw() {
    syncControls();
    layerOut.textContent = layerName(+layer.value);
    const b = blk(), k = +sentence.value, s = b.sentences[k], name = method.value;
    let specB = null;
    if (mode.value === "method") specB = {k: k, name: compare.value};
    else if (mode.value === "diff") specB = {k: k, name: name, diff: compare.value};
    else if (mode.value === "pair" && s.pair !== undefined) specB = {k: s.pair, name: name};
    const specA = {k: k, name: name};
    if (shared.checked && specB && !specB.diff && !isBaseline(name) && !isBaseline(specB.name)) {
      const v = Math.max(mapMax(content(k, name).m), mapMax(content(specB.k, specB.name).m));
      specA.vmax = specB.vmax = v / SCALE;
    }
    const about = [s.source, s.cut].filter(function (x) { return !!x; }).join("; ");
    info.textContent = "Model: " + b.model + " (" + b.family + ", " +
      (b.layer_numbers ? "layers " + b.layer_numbers.join(", ") : b.layers + " layers") +
      (b.heads ? ", " + b.heads + " heads" : "") + "). Sentence " + (k + 1) + " of " +
      b.sentences.length + ": \u201c" + s.text + "\u201d" + (about ? " (" + about + ")" : "") +
      ". Rows receive, " +
      "columns give. " + (specA.vmax !== undefined ? "Both panels share one colour scale"
      : "Each map is shaded from 0 (white) to its own maximum") + " (colour bars); a " +
      "difference is shaded from \u2212 to + its largest |value|; values rounded to " +
      (1 / SCALE) + "; grey: not computed.";
    draw(A, specA);
    if (specB) draw(B, specB);
    else if (mode.value === "pair") {
      B.panel.style.display = ""; B.caption.textContent = "This sentence has no minimal pair " +
        "(choose a BLiMP sentence)."; setup(B.canvas, 10, 10); B.bar.style.display = "none";
      geom[B.canvas.id] = null; drawn.b = null;
    } else { B.panel.style.display = "none"; drawn.b = null; }
  }
  function point(ev) {
    const g = geom[ev.target.id];
    if (!g) return;
    const r = ev.target.getBoundingClientRect(), b = blk(), toks = b.sentences[g.k].tokens;
    const x = ev.clientX - r.left, y = ev.clientY - r.top;
    let i, j;
    if (g.kind === "heat") { i = Math.floor((y - g.y0) / g.c); j = Math.floor((x - g.x0) / g.c); }
    else { i = g.row; j = Math.floor((x - g.x0) / g.c); }
    if (!(i >= 0 && i < g.n && j >= 0 && j < g.n)) return;
    const v = g.vals[g.kind === "heat" ? i : 0][j];
    let what = M[g.name].label;
    if (g.diff) what += " \u2212 " + M[g.diff].label;
    let text;
    if (g.scale !== undefined) {
      text = what + ": " + toks[j] + " = " + v.toFixed(D.decimals) + " \u00d7 " +
        g.scale.toPrecision(3);
    } else {
      text = what + ", layer " + layer.value + ": " + toks[i] + " \u2190 " + toks[j] + " = " +
        (v === null ? "not computed" : v.toFixed(D.decimals));
    }
    readout.textContent = text + " (" + ev.pointerType + ")";
  }
  [A.canvas, B.canvas].forEach(function (c) {
    c.addEventListener("pointermove", point);
    c.addEventListener("pointerdown", point);
  });
  model.addEventListener("change", function () { fillModel(); redraw(); });
  sentence.addEventListener("change", function () { fillViews(); redraw(); });
  method.addEventListener("change", function () {
    rollout.checked = M[method.value].kind === "aggregated"; redraw(); });
  [compare, view, mode, head, shared].forEach(function (c) { c.addEventListener("change", redraw); });
  layer.addEventListener("input", redraw);
  layer.addEventListener("change", redraw);
  rollout.addEventListener("change", function () {
    const name = method.value;
    if (rollout.checked && name in rollOf) method.value = rollOf[name];
    else if (!rollout.checked && name in baseOf) method.value = baseOf[name];
    redraw();
  });
  window.addEventListener("resize", function () { redraw(); });
  modelL.style.display = D.models.length > 1 ? "" : "none";
  method.value = "";
  fillModel(); redraw();

  if (String(window.location.hash).indexOf("cmix-explorer-selftest") >= 0) selftest();

  function hash(c) {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let h = 2166136261;
    for (let k = 0; k < d.length; k += 1) { h ^= d[k]; h = Math.imul(h, 16777619) >>> 0; }
    return c.width + "x" + c.height + ":" + h.toString(16);
  }
  function set(ctrl, v, type) { ctrl.value = v; ctrl.dispatchEvent(new Event(type || "change")); }
  function tick(ctrl, on) { if (ctrl.checked !== on) ctrl.click(); }
  function selftest() {
    const out = {dpr: DPR(), models: [], states: [], steps: []};
    D.models.forEach(function (b, mk) {
      set(model, mk); set(mode, ""); set(layer, b.layers, "input");
      const names = b.methods.concat(b.baseline_methods || []);
      out.models.push({model: b.model, info: info.textContent, note: note.textContent,
                       layer_max: +layer.max, methods: Array.prototype.map.call(
                         method.options, function (o) { return o.value; }),
                       heads: head.options.length - 1});
      b.sentences.forEach(function (s, k) {
        if (mk > 0 && k > 1) return;           // other models: the first two sentences
        set(sentence, k);
        names.forEach(function (n) {
          set(method, n);
          out.states.push({model: mk, sentence: k, method: n, layer: +layer.value,
                           hash: hash(A.canvas), drawn: drawn.a});
        });
      });
    });
    function step(what) {
      const ca = A.canvas;
      out.steps.push({what: what, model: +model.value, sentence: +sentence.value,
                      method: method.value, compare: compare.value, mode: mode.value,
                      layer: +layer.value, view: view.value, head: +head.value,
                      shared: shared.checked, hash: hash(ca),
                      hash_b: B.panel.style.display === "none" ? null : hash(B.canvas),
                      drawn: drawn.a, drawn_b: drawn.b, bar: geom[A.bar.id] || null,
                      bar_b: geom[B.bar.id] || null, bar_shown: A.bar.style.display !== "none",
                      bar_b_shown: B.bar.style.display !== "none", readout: readout.textContent,
                      caption_b: B.caption.textContent,
                      backing: [ca.width, ca.height], css: [parseFloat(ca.style.width),
                                                              parseFloat(ca.style.height)]});
    }
    function poke(c, type, i, j, pointerType) {
      const g = geom[c.id], r = c.getBoundingClientRect();
      c.dispatchEvent(new PointerEvent(type, {clientX: r.left + g.x0 + (j + 0.5) * g.c,
        clientY: r.top + (g.y0 || 0) + (i + 0.5) * g.c, bubbles: true,
        pointerType: pointerType, isPrimary: true}));
    }
    set(model, 0); set(sentence, 0); set(mode, ""); tick(shared, false);
    set(method, "value_zeroing"); set(view, ""); set(layer, D.models[0].layers, "input");
    step("start");
    set(layer, 1, "input"); step("layer 1");
    rollout.click(); step("rollout on");
    rollout.click(); step("rollout off");
    set(view, 1); step("row 1");
    set(view, ""); set(mode, "method"); set(compare, "alti"); step("compare alti");
    poke(A.canvas, "pointermove", 1, 2, "mouse"); step("pointer mouse 1,2");
    poke(A.canvas, "pointerdown", 2, 1, "touch"); step("pointer touch 2,1");
    tick(shared, true); step("shared on");
    tick(shared, false); step("shared off");
    set(mode, "diff"); step("difference");
    poke(B.canvas, "pointermove", 1, 2, "pen"); step("difference pointer 1,2");
    set(layer, D.models[0].layers, "input");
    const pk = D.models[0].sentences.findIndex(function (s) { return s.pair !== undefined; });
    set(mode, "pair");
    if (pk >= 0) { set(sentence, pk); step("pair"); }
    set(mode, ""); set(sentence, 0); set(method, "attention");
    set(head, D.models[0].heads); step("head last");
    set(head, 0); step("head mean");
    const bl = D.models[0].baseline_methods || [];
    if (bl.length) {
      const bk = D.models[0].sentences.findIndex(function (s) { return !!s.baselines; });
      set(sentence, bk); set(method, bl[0]); step("baseline");
      poke(A.canvas, "pointermove", 0, 1, "mouse"); step("baseline pointer 1");
    }
    D.models.forEach(function (b, mk) {
      set(model, mk); set(sentence, 0); set(method, b.methods[0]); set(mode, "");
      step("model " + mk);
    });
    el("pre", {id: id + "-selftest", style: "display:none"}, root, JSON.stringify(out));
  }
  }
}
