// Mizuoto: speech played while it is being made.
//
// The Speak and Script nodes send each finished piece of audio over ComfyUI's websocket as the event
// "mizuoto.audio" (nodes/pack/live.py): float32 samples in base64, in order, then a "done" message.
// This extension schedules the pieces back to back with WebAudio, so sound starts with the first
// sentence instead of after the last; the node's AUDIO output is unchanged. An interrupt or a new
// prompt stops playback. Setting "Mizuoto.LivePlayback" turns it off. A small chip at the bottom left
// shows what is playing: .mizuoto-live[data-node][data-pieces][data-seconds][data-state].
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

const EVENT = "mizuoto.audio";
const SETTING = "Mizuoto.LivePlayback";

const CSS = `
.mizuoto-live { position: fixed; left: 12px; bottom: 12px; z-index: 1001; font-size: 12px; padding: 3px 10px;
  border-radius: 12px; background: var(--comfy-menu-bg, #202020); color: var(--fg-color, #ddd);
  border: 1px solid var(--border-color, #555); display: none; }
.mizuoto-live[data-state="playing"], .mizuoto-live[data-state="receiving"] { display: block; }
`;

function decode(b64) {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  return new Float32Array(bytes.buffer);
}

class LivePlayer {
  constructor() {
    this.context = null;
    this.sources = [];
    this.node = null;
    this.next = 0;
    this.pieces = 0;
    this.seconds = 0;
    this.chip = null;
  }

  enabled() {
    const store = app.extensionManager?.setting;
    const value = store?.get ? store.get(SETTING) : app.ui?.settings?.getSettingValue?.(SETTING);
    return value !== false;
  }

  show(state) {
    if (!this.chip) {
      document.head.append(Object.assign(document.createElement("style"), { textContent: CSS }));
      this.chip = Object.assign(document.createElement("div"), { className: "mizuoto-live" });
      document.body.append(this.chip);
    }
    const c = this.chip;
    c.dataset.state = state;
    c.dataset.node = this.node ?? "";
    c.dataset.pieces = String(this.pieces);
    c.dataset.seconds = this.seconds.toFixed(3);
    c.textContent = `🔊 node ${this.node}: ${this.seconds.toFixed(1)} s${state === "receiving" ? " …" : ""}`;
  }

  stop() {
    for (const s of this.sources) { try { s.stop(); } catch { /* already ended */ } }
    this.sources = [];
    this.node = null;
    this.pieces = 0;
    this.seconds = 0;
    this.next = 0;
    if (this.chip) this.show("stopped");
  }

  add(msg) {
    if (!this.enabled()) return;
    if (msg.node !== this.node || msg.seq === 0) {   // another node (or the same one again) starts over
      this.stop();
      this.node = msg.node;
    }
    if (msg.done) {
      const left = this.context ? Math.max(0, this.next - this.context.currentTime) : 0;
      this.show("playing");
      setTimeout(() => { if (this.node === msg.node) this.show("done"); }, left * 1000 + 50);
      return;
    }
    const samples = decode(msg.pcm);
    if (!this.context) this.context = new AudioContext();
    const ctx = this.context;
    if (ctx.state === "suspended") ctx.resume().catch(() => {});
    const buffer = ctx.createBuffer(1, samples.length, msg.sample_rate);
    buffer.copyToChannel(samples, 0);
    const source = ctx.createBufferSource();
    source.buffer = buffer;
    source.connect(ctx.destination);
    const at = Math.max(ctx.currentTime + 0.05, this.next);
    source.start(at);
    source.onended = () => { this.sources = this.sources.filter((s) => s !== source); };
    this.sources.push(source);
    this.next = at + buffer.duration;
    this.pieces += 1;
    this.seconds += samples.length / msg.sample_rate;
    this.show("receiving");
  }
}

app.registerExtension({
  name: "mizuoto.live",
  settings: [{
    id: SETTING, name: "Mizuoto: play speech while it is being generated", type: "boolean", defaultValue: true,
    category: ["Mizuoto", "Audio", "Live playback"],
  }],
  async setup() {
    const player = new LivePlayer();
    api.addEventListener(EVENT, (e) => player.add(e.detail));
    api.addEventListener("execution_interrupted", () => player.stop());
    api.addEventListener("execution_start", () => player.stop());
  },
});
