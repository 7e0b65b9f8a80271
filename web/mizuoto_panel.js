// Mizuoto: the loaded-audio-models panel.
//
// A sidebar tab (a floating panel on frontends without registerSidebarTab) listing every audio model
// the pack has loaded, each component with bars for its loaded / streamed / host bytes relative to
// its size, and the last request's meta (partial placements, OOM retries, fallbacks). Data: the
// read-only route GET /mizuoto/runtime. Refreshed on execution events and when the tab opens.
// Plain DOM, no build step. Stable hooks for tests: #mizuoto-panel, .mizuoto-model[data-name],
// .mizuoto-component[data-name], .mizuoto-bar-{loaded,streamed,host}[data-mb][title], .mizuoto-last,
// #mizuoto-panel[data-state="ready"|"error"] and [data-fetched] (ms timestamp: when the data shown
// was requested).
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

const ROUTE = "/mizuoto/runtime";
const BARS = [
  ["loaded", "on the device"],
  ["streamed", "copied to the device while running (total since load)"],
  ["host", "host (RAM) copy used for streaming"],
];
const EVENTS = ["executed", "execution_success", "execution_error", "execution_interrupted", "status"];

const CSS = `
.mizuoto-panel { padding: 8px 10px; font-size: 13px; line-height: 1.35; color: var(--fg-color, #ddd); }
.mizuoto-panel h3 { font-size: 14px; margin: 0 0 4px; display: flex; justify-content: space-between;
  align-items: center; }
.mizuoto-panel button { background: var(--comfy-input-bg, #333); color: inherit;
  border: 1px solid var(--border-color, #555); border-radius: 4px; padding: 1px 8px; cursor: pointer; }
.mizuoto-device, .mizuoto-empty, .mizuoto-updated { opacity: .75; margin-bottom: 6px; }
.mizuoto-model { border: 1px solid var(--border-color, #555); border-radius: 6px; padding: 6px 8px; margin: 6px 0; }
.mizuoto-model-name { font-weight: 600; word-break: break-all; }
.mizuoto-component { margin-top: 4px; }
.mizuoto-component-name { opacity: .9; }
.mizuoto-tag { font-size: 11px; border-radius: 3px; padding: 0 4px; margin-left: 4px; background: #8a5a00;
  color: #fff; }
.mizuoto-row { display: grid; grid-template-columns: 62px 1fr 108px; gap: 6px; align-items: center; margin: 2px 0; }
.mizuoto-track { height: 10px; background: var(--comfy-input-bg, #222); border: 1px solid var(--border-color, #555);
  border-radius: 3px; overflow: hidden; }
.mizuoto-bar { height: 100%; }
.mizuoto-bar-loaded { background: #3fae5a; }
.mizuoto-bar-streamed { background: #d08a2a; }
.mizuoto-bar-host { background: #4a7fd0; }
.mizuoto-num { text-align: right; font-variant-numeric: tabular-nums; font-size: 12px; }
.mizuoto-last { margin-top: 10px; border-top: 1px solid var(--border-color, #555); padding-top: 6px; }
.mizuoto-last dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 8px; margin: 4px 0; }
.mizuoto-last dt { opacity: .75; }
.mizuoto-last dd { margin: 0; word-break: break-word; }
.mizuoto-error { color: #e66; }
.mizuoto-floating { position: fixed; right: 12px; bottom: 48px; width: 340px; max-height: 60vh; overflow: auto;
  z-index: 1000; background: var(--comfy-menu-bg, #202020); border: 1px solid var(--border-color, #555);
  border-radius: 8px; }
`;

const fmt = (mb) => (mb == null ? "–" : mb >= 1024 ? `${(mb / 1024).toFixed(2)} GB` : `${mb.toFixed(1)} MB`);

function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") el.className = v;
    else if (k === "style") el.style.cssText = v;
    else if (k.startsWith("data-") || k === "title" || k === "id") el.setAttribute(k, v);
    else el[k] = v;
  }
  for (const c of children.flat()) if (c != null) el.append(c);
  return el;
}

function bar(kind, help, mb, size) {
  const pct = size > 0 ? Math.min(100, (100 * mb) / size) : 0;
  const ratio = size > 0 && mb > size ? `${(mb / size).toFixed(1)}×` : "";  // streamed adds up over runs
  const title = `${kind}: ${fmt(mb)} of ${fmt(size)}${ratio ? ` (${ratio} size)` : ""} — ${help}`;
  return h("div", { class: "mizuoto-row", title },
    h("span", {}, kind),
    h("div", { class: "mizuoto-track" },
      h("div", { class: `mizuoto-bar mizuoto-bar-${kind}`, style: `width:${pct.toFixed(1)}%`,
                 title, "data-mb": mb.toFixed(2) })),
    h("span", { class: "mizuoto-num" }, fmt(mb) + (ratio ? ` (${ratio})` : "")));
}

function component(c) {
  return h("div", { class: "mizuoto-component", "data-name": c.name, "data-engine": c.engine },
    h("div", { class: "mizuoto-component-name" }, `${c.name} · ${c.engine} · ${c.device} · ${fmt(c.size_mb)}`,
      c.partial ? h("span", { class: "mizuoto-tag mizuoto-partial" }, "partial") : null,
      c.in_use ? h("span", { class: "mizuoto-tag mizuoto-in-use" }, "in use") : null),
    BARS.map(([kind, help]) => bar(kind, help, c[`${kind}_mb`] ?? 0, c.size_mb)));
}

function lastRequest(last) {
  if (!last || !last.memory) return h("div", { class: "mizuoto-last mizuoto-empty" }, "No request yet.");
  const m = last.memory, a = last.applied || {};
  const partial = Object.entries(m.partial || {});
  return h("div", { class: "mizuoto-last" },
    h("strong", {}, `Last request: ${last.model ?? "?"}`),
    h("dl", {},
      h("dt", {}, "loaded"), h("dd", { class: "mizuoto-last-loaded" }, `${fmt(m.loaded_mb)} of ${fmt(m.size_mb)}`),
      h("dt", {}, "streamed"), h("dd", { class: "mizuoto-last-streamed" }, fmt(m.streamed_mb)),
      h("dt", {}, "OOM retries"), h("dd", { class: "mizuoto-last-oom" }, String(a.oom_retries ?? 0)),
      h("dt", {}, "fallbacks"), h("dd", { class: "mizuoto-last-fallbacks" }, (a.fallbacks || []).join(", ") || "none"),
      h("dt", {}, "partial"),
      h("dd", { class: "mizuoto-last-partial" }, partial.length
        ? partial.map(([name, d]) => h("div", { "data-name": name },
            `${name}: ${d.reason ?? "partial"}`
            + (d.loaded_mb != null ? ` (${fmt(d.loaded_mb)} of ${fmt(d.size_mb)})` : "")))
        : "none")));
}

function draw(root, data, error, fetchedAt) {
  const body = [];
  if (error) body.push(h("div", { class: "mizuoto-error" }, `Could not read ${ROUTE}: ${error}`));
  if (data) {
    const total = data.total_mb != null ? ` of ${fmt(data.total_mb)}` : "";
    body.push(h("div", { class: "mizuoto-device" }, data.free_mb != null
      ? `Device ${data.device}: ${fmt(data.free_mb)} free${total}`
      : `Device ${data.device}: weights run from RAM, no VRAM to manage (${fmt(data.total_mb)})`));
    const byName = new Map((data.components || []).map((c) => [c.name, c]));
    const models = (data.models || []).map((m) => ({
      name: m.name, comps: m.components.map((n) => byName.get(n)).filter(Boolean) }));
    const listed = new Set(models.flatMap((m) => m.comps.map((c) => c.name)));
    const rest = (data.components || []).filter((c) => !listed.has(c.name));
    if (rest.length) models.push({ name: "(other components)", comps: rest });
    body.push(models.length
      ? h("div", { class: "mizuoto-models" }, models.map((m) =>
          h("div", { class: "mizuoto-model", "data-name": m.name },
            h("div", { class: "mizuoto-model-name" }, m.name), m.comps.map(component))))
      : h("div", { class: "mizuoto-empty" }, "No audio model loaded."));
    body.push(lastRequest(data.last));
  }
  body.push(h("div", { class: "mizuoto-updated" }, `updated ${new Date().toLocaleTimeString()}`));
  const refresh = h("button", { class: "mizuoto-refresh", title: "Refresh", onclick: () => refreshAll() }, "↻");
  root.replaceChildren(h("h3", {}, "Mizuoto audio models", refresh), ...body);
  root.dataset.state = error ? "error" : "ready";
  root.dataset.fetched = String(fetchedAt);  // for tests: when the data shown was requested
}

const roots = new Set();  // panel elements that have been mounted
let pending = null;

async function refresh(targets) {
  let data = null, error = null;
  const fetchedAt = Date.now();
  try {
    const res = await api.fetchApi(ROUTE, { cache: "no-store" });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    data = await res.json();
  } catch (e) {
    error = e?.message ?? String(e);
  }
  for (const r of targets) draw(r, data, error, fetchedAt);
}

function refreshAll() {
  // A panel drawn once and now detached (tab closed, re-rendered) is forgotten.
  for (const r of [...roots]) if (r.dataset.state && !r.isConnected) roots.delete(r);
  if (roots.size) return refresh([...roots]);
}

function scheduleRefresh() {
  clearTimeout(pending);
  pending = setTimeout(refreshAll, 250);
}

function mount(el) {
  if (!document.getElementById("mizuoto-panel-style")) {
    document.head.append(h("style", { id: "mizuoto-panel-style" }, CSS));
  }
  const root = h("div", { id: "mizuoto-panel", class: "mizuoto-panel" }, "Loading…");
  el.replaceChildren(root);
  roots.add(root);
  refresh([root]);  // the host element may not be in the document yet when render() is called
  return root;
}

function floatingPanel() {
  const box = h("div", { class: "mizuoto-floating", style: "display:none" });
  const toggle = h("button", {
    class: "mizuoto-floating-toggle", title: "Mizuoto audio models",
    style: "position:fixed;right:12px;bottom:12px;z-index:1001",
    onclick: () => {
      const show = box.style.display === "none";
      box.style.display = show ? "" : "none";
      if (show) mount(box);
    },
  }, "🔊");
  document.body.append(box, toggle);
}

app.registerExtension({
  name: "mizuoto.panel",
  async setup() {
    for (const ev of EVENTS) api.addEventListener(ev, scheduleRefresh);
    const manager = app.extensionManager;
    if (typeof manager?.registerSidebarTab === "function") {
      manager.registerSidebarTab({
        id: "mizuoto-models",
        icon: "pi pi-volume-up",
        title: "Audio models",
        tooltip: "Mizuoto: loaded audio models and memory",
        type: "custom",
        render: (el) => { mount(el); },
      });
    } else {
      floatingPanel();
    }
  },
});
