// The static context-mixing explorer (cmixlib/plotting/explorer.py writes the data and this
// script into one HTML fragment). No dependencies, nothing fetched.
function cmixExplorer(id) {
  "use strict";
  const root = document.getElementById(id);
  const D = JSON.parse(document.getElementById(id + "-data").textContent);
  const SCALE = Math.pow(10, D.decimals);
  const M = {}, rollOf = {}, baseOf = {};
  D.methods.forEach(function (m) {
    M[m.name] = m;
    if (m.kind === "aggregated" && m.base) {
      if (!(m.base in rollOf)) rollOf[m.base] = m.name;
      baseOf[m.name] = m.base;
    }
  });
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
  const bar = el("div", {style: "display:flex;flex-wrap:wrap;gap:0.4em;margin:0.4em 0"}, root);
  const sentence = el("select", {id: id + "-sentence"}, labelled("sentence", bar));
  D.sentences.forEach(function (s, k) {
    const t = s.text.length > 60 ? s.text.slice(0, 57) + "..." : s.text;
    el("option", {value: k}, sentence, (k + 1) + ". " + t);
  });
  const method = el("select", {id: id + "-method"}, labelled("method", bar));
  const compare = el("select", {id: id + "-compare"}, labelled("compare with", bar));
  el("option", {value: ""}, compare, "(none)");
  D.methods.forEach(function (m) {
    el("option", {value: m.name}, method, m.label + " (" + m.kind + ")");
    el("option", {value: m.name}, compare, m.label + " (" + m.kind + ")");
  });
  const bar2 = el("div", {style: "display:flex;flex-wrap:wrap;gap:0.4em;margin:0.4em 0"}, root);
  const rollL = labelled("rollout across layers", bar2);
  const rollout = el("input", {type: "checkbox", id: id + "-rollout"}, rollL);
  const layerL = labelled("layer", bar2);
  const layer = el("input", {type: "range", min: 1, max: D.layers, step: 1, value: D.layers,
                             id: id + "-layer"}, layerL);
  const layerOut = el("span", {style: "margin-left:0.3em"}, layerL, String(D.layers));
  const view = el("select", {id: id + "-view"}, labelled("view", bar2));
  const info = el("div", {style: "font-size:12px;color:#555;margin:0.3em 0"}, root);
  const panels = el("div", {style: "display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start"},
                    root);
  function panel(suffix) {
    const p = el("div", {}, panels);
    const cap = el("div", {style: "font-weight:bold;margin:0.2em 0", id: id + "-caption-" + suffix}, p);
    const c = el("canvas", {id: id + "-canvas-" + suffix, width: 10, height: 10}, p);
    return {panel: p, caption: cap, canvas: c};
  }
  const A = panel("a"), B = panel("b");
  const readout = el("div", {id: id + "-readout", style: "min-height:1.4em;margin-top:0.3em;" +
                             "font-family:monospace"}, root, "\u00a0");
  method.value = D.methods.some(function (m) { return m.name === "value_zeroing"; })
    ? "value_zeroing" : D.methods[0].name;

  function current() {
    return {s: D.sentences[+sentence.value], l: +layer.value, row: view.value === "" ? null
            : +view.value};
  }
  function fillViews() {
    const toks = D.sentences[+sentence.value].tokens, keep = view.value;
    view.innerHTML = "";
    el("option", {value: ""}, view, "whole map (heatmap)");
    toks.forEach(function (t, i) { el("option", {value: i}, view, "row " + i + ": " + t); });
    view.value = (keep !== "" && +keep < toks.length) ? keep : "";
  }
  function syncRollout() {
    const name = method.value;
    rollout.checked = M[name].kind === "aggregated";
    rollout.disabled = !(name in rollOf) && !(name in baseOf);
    rollL.style.opacity = rollout.disabled ? "0.5" : "1";
  }
  function rgb(hex) {
    const h = hex.replace("#", "");
    return [0, 2, 4].map(function (k) { return parseInt(h.slice(k, k + 2), 16); });
  }
  function shade(col, f) {
    f = Math.max(0, Math.min(1, f));
    return "rgb(" + col.map(function (c) { return Math.round(255 + (c - 255) * f); }).join(",") + ")";
  }
  const geom = {};
  function draw(p, name) {
    const st = current(), toks = st.s.tokens, n = toks.length;
    const map = st.s.maps[name][st.l - 1], col = rgb(M[name].colour);
    const ctx = p.canvas.getContext("2d");
    p.caption.textContent = M[name].label + ", layer " + st.l +
      (st.row === null ? "" : ", row of " + JSON.stringify(toks[st.row]));
    ctx.font = "11px sans-serif";
    const lab = Math.min(110, 8 + Math.max.apply(null, toks.map(function (t) {
      return ctx.measureText(t).width; })));
    if (st.row === null) {
      const c = Math.max(12, Math.min(26, Math.floor(440 / n)));
      let vmax = 0;
      map.forEach(function (r) { r.forEach(function (v) { vmax = Math.max(vmax, v); }); });
      p.canvas.width = lab + n * c + 4; p.canvas.height = lab + n * c + 4;
      ctx.font = "11px sans-serif";
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, p.canvas.width, p.canvas.height);
      for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) {
        const v = map[i][j];
        ctx.fillStyle = v < 0 ? "#ddd" : shade(col, vmax > 0 ? v / vmax : 0);
        ctx.fillRect(lab + j * c, lab + i * c, c, c);
      }
      ctx.fillStyle = "#000"; ctx.textBaseline = "middle";
      for (let i = 0; i < n; i++) {
        ctx.textAlign = "right"; ctx.fillText(toks[i], lab - 4, lab + i * c + c / 2);
        ctx.save(); ctx.translate(lab + i * c + c / 2, lab - 4); ctx.rotate(-Math.PI / 2);
        ctx.textAlign = "left"; ctx.fillText(toks[i], 0, 0); ctx.restore();
      }
      geom[p.canvas.id] = {kind: "heat", x0: lab, y0: lab, c: c, n: n, name: name};
    } else {
      const c = Math.max(20, Math.min(40, Math.floor(520 / n))), h = 150, top = 16;
      const row = map[st.row];
      const vmax = Math.max.apply(null, row.concat([0]));
      p.canvas.width = n * c + 50; p.canvas.height = top + h + lab + 4;
      ctx.font = "11px sans-serif";
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, p.canvas.width, p.canvas.height);
      ctx.strokeStyle = "#999"; ctx.beginPath(); ctx.moveTo(40, top + h); ctx.lineTo(40 + n * c, top + h);
      ctx.stroke();
      for (let j = 0; j < n; j++) {
        const v = row[j], bh = vmax > 0 && v > 0 ? h * v / vmax : 0;
        ctx.fillStyle = j === st.row ? "#444" : M[name].colour;
        ctx.fillRect(40 + j * c + 2, top + h - bh, c - 4, bh);
        ctx.save(); ctx.translate(40 + j * c + c / 2, top + h + 4); ctx.rotate(-Math.PI / 2);
        ctx.fillStyle = "#000"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
        ctx.fillText(toks[j], 0, 0); ctx.restore();
      }
      ctx.fillStyle = "#000"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
      ctx.fillText((vmax / SCALE).toFixed(D.decimals), 38, top);
      ctx.fillText("0", 38, top + h);
      geom[p.canvas.id] = {kind: "row", x0: 40, c: c, n: n, name: name, row: st.row};
    }
  }
  function redraw() {
    layerOut.textContent = layer.value;
    const s = D.sentences[+sentence.value];
    info.textContent = "Model: " + D.model + ". Sentence " + (+sentence.value + 1) + " of " +
      D.sentences.length + ": \u201c" + s.text + "\u201d (" + s.source + "). Rows receive, " +
      "columns give; each map is shaded from 0 (white) to its own maximum; values rounded to " +
      (1 / SCALE) + "; grey: not computed.";
    draw(A, method.value);
    if (compare.value) { B.panel.style.display = ""; draw(B, compare.value); }
    else { B.panel.style.display = "none"; }
  }
  function hover(ev) {
    const g = geom[ev.target.id];
    if (!g) return;
    const r = ev.target.getBoundingClientRect();
    const x = ev.clientX - r.left, y = ev.clientY - r.top, st = current(), toks = st.s.tokens;
    let i, j;
    if (g.kind === "heat") { i = Math.floor((y - g.y0) / g.c); j = Math.floor((x - g.x0) / g.c); }
    else { i = g.row; j = Math.floor((x - g.x0) / g.c); }
    if (!(i >= 0 && i < g.n && j >= 0 && j < g.n)) return;
    const v = st.s.maps[g.name][st.l - 1][i][j];
    readout.textContent = M[g.name].label + ", layer " + st.l + ": " + toks[i] + " \u2190 " +
      toks[j] + " = " + (v < 0 ? "not computed" : (v / SCALE).toFixed(D.decimals));
  }
  [A.canvas, B.canvas].forEach(function (c) { c.addEventListener("mousemove", hover); });
  sentence.addEventListener("change", function () { fillViews(); redraw(); });
  method.addEventListener("change", function () { syncRollout(); redraw(); });
  compare.addEventListener("change", redraw);
  view.addEventListener("change", redraw);
  layer.addEventListener("input", redraw);
  layer.addEventListener("change", redraw);
  rollout.addEventListener("change", function () {
    const name = method.value;
    if (rollout.checked && name in rollOf) method.value = rollOf[name];
    else if (!rollout.checked && name in baseOf) method.value = baseOf[name];
    syncRollout(); redraw();
  });
  fillViews(); syncRollout(); redraw();

  if (String(window.location.hash).indexOf("cmix-explorer-selftest") >= 0) selftest();

  function hash(c) {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let h = 2166136261;
    for (let k = 0; k < d.length; k += 1) { h ^= d[k]; h = Math.imul(h, 16777619) >>> 0; }
    return c.width + "x" + c.height + ":" + h.toString(16);
  }
  function set(ctrl, v, type) { ctrl.value = v; ctrl.dispatchEvent(new Event(type || "change")); }
  function selftest() {
    const out = {states: [], steps: []};
    D.sentences.forEach(function (s, k) {
      set(sentence, k);
      D.methods.forEach(function (m) {
        set(method, m.name);
        out.states.push({sentence: k, method: m.name, layer: +layer.value, hash: hash(A.canvas)});
      });
    });
    function step(what) {
      out.steps.push({what: what, method: method.value, compare: compare.value, layer: +layer.value,
                      view: view.value, hash: hash(A.canvas),
                      hash_b: compare.value ? hash(B.canvas) : null, readout: readout.textContent});
    }
    set(sentence, 0); set(method, "value_zeroing"); set(view, ""); set(layer, D.layers, "input");
    step("start");
    set(layer, 1, "input"); step("layer 1");
    rollout.click(); step("rollout on");
    rollout.click(); step("rollout off");
    set(view, 1); step("row 1");
    set(view, ""); set(compare, "alti"); step("compare alti");
    const g = geom[A.canvas.id], r = A.canvas.getBoundingClientRect();
    A.canvas.dispatchEvent(new MouseEvent("mousemove", {
      clientX: r.left + g.x0 + 2.5 * g.c, clientY: r.top + g.y0 + 1.5 * g.c, bubbles: true}));
    step("hover cell 1,2");
    el("pre", {id: id + "-selftest", style: "display:none"}, root, JSON.stringify(out));
  }
}
