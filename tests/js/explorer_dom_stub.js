// A minimal DOM for cmixlib/plotting/explorer.js (tests/test_api_views.py runs it with node when
// node is installed): enough to build the controls and draw the first panel; prints what the
// viewer wrote. Usage: node explorer_dom_stub.js explorer.js data.json
const fs = require("fs");
const [,, jsPath, dataPath] = process.argv;
const els = {};
function ctx() {
  return new Proxy({}, {get(t, k) {
    if (k === "measureText") return (s) => ({width: String(s).length * 6});
    if (k in t) return t[k];
    return () => {};
  }, set(t, k, v) { t[k] = v; return true; }});
}
function makeEl(tag) {
  const e = {tagName: tag, children: [], attrs: {}, style: {}, listeners: {}, textContent: "",
    value: "", checked: false, disabled: false,
    setAttribute(k, v) { this.attrs[k] = v; if (k === "id") els[v] = this;
      if (k === "value") this.value = String(v); if (k === "max") this.max = v; },
    appendChild(c) { this.children.push(c); c.parent = this;
      if (this.tagName === "select" && this.children.filter(x => x.tagName === "option").length === 1)
        this.value = c.value; return c; },
    addEventListener(ev, f) { (this.listeners[ev] = this.listeners[ev] || []).push(f); },
    getContext() { return ctx(); }, getBoundingClientRect() { return {left: 0, top: 0}; }};
  Object.defineProperty(e, "innerHTML", {set() { e.children = []; e.value = ""; }});
  return e;
}
global.window = {devicePixelRatio: 1, location: {hash: ""}, addEventListener() {}};
global.location = window.location;
global.document = {
  createElement: makeEl,
  getElementById(id) { return els[id]; },
};
const root = makeEl("div"); els["x"] = root;
const data = fs.readFileSync(dataPath, "utf8");
els["x-data"] = {textContent: data};
eval(fs.readFileSync(jsPath, "utf8"));
cmixExplorer("x");
const txt = (id) => els[id] ? els[id].textContent : "(none)";
console.log("INFO:", txt("x-info"));
console.log("CAPTION:", txt("x-caption-a"));
console.log("HEAD:", els["x-head"].children.map(c => c.textContent).join(" | "), "disabled", els["x-head"].disabled);
console.log("METHODS:", els["x-method"].children.map(c => c.textContent).join(" | "));
console.log("NOTE:", txt("x-note"));
