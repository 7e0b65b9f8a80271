"""Regenerate example_workflows/*.json (+ .jpg thumbnails) and the API form the e2e test posts.

The graphs are built by the real ComfyUI frontend (LiteGraph nodes created from the server's
/object_info, linked, widgets set) and exported with `app.graph.serialize()`, so the files are
exactly what ComfyUI itself saves. `speak_and_preview.api.json` is the frontend's own
`app.graphToPrompt()` of the same graph. Thumbnails are screenshots of each workflow loaded in the
UI (focus mode, fitted to the view), scaled to 512x512 JPEG like the core templates' thumbnails.

Workflows written by hand (every other example_workflows/*.json, e.g. one per engine) are checked
and get their thumbnails too: each is loaded into the frontend, its node types must exist in
/object_info, its links must be consistent, every widget value must be valid for its widget (combo
values among the choices, e.g. a loader's model among its known models; `widgets_values_named`, when
present, naming the same values) and its links must survive the load; the file is then rewritten
as the frontend's own `app.graph.serialize()` of it, so it too is exactly what ComfyUI saves.

    COMFYUI_PATH=<ComfyUI checkout> <its venv>/bin/python tests/comfyui_e2e/make_examples.py   # see README.md
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cdp import Browser, find_chromium  # noqa: E402
from comfy_server import REPO, ComfyServer, comfyui_path, why_not_runnable  # noqa: E402

OUT = REPO / "example_workflows"
THUMB = 512

# Helpers defined once in the page: build a graph from a spec of nodes, links and groups.
BUILDER = r"""
window.__mizuotoBuild = async (spec) => {
  await app.loadGraphData(window.comfyAPI.defaultGraph.blankGraph, true, true, null);
  const G = app.graph, byKey = {};
  for (const n of spec.nodes) {
    const node = LiteGraph.createNode(n.type);
    if (!node) throw new Error("unknown node type " + n.type);
    if (n.title) node.title = n.title;
    node.pos = n.pos;
    G.add(node);
    for (const [name, value] of Object.entries(n.values || {})) {
      const w = (node.widgets || []).find((w) => w.name === name);
      if (!w) throw new Error(n.type + ": no widget " + name + " (" + (node.widgets || []).map((w) => w.name) + ")");
      w.value = value;
    }
    if (n.properties) Object.assign(node.properties, n.properties);
    if (n.size) node.setSize(n.size);
    if (n.color) { node.color = n.color; node.bgcolor = n.bgcolor; }
    byKey[n.key] = node;
  }
  for (const [from, out, to, inp] of spec.links) {
    const a = byKey[from], b = byKey[to];
    const slot = typeof inp === "number" ? inp : b.findInputSlot(inp);
    if (!a.connect(out, b, slot)) throw new Error("could not link " + from + "." + out + " -> " + to + "." + inp);
  }
  for (const g of spec.groups || []) {
    const group = new LiteGraph.LGraphGroup(g.title);
    group.pos = g.pos; group.size = g.size;
    if (g.color) group.color = g.color;
    G.add(group);
  }
  G.setDirtyCanvas(true, true);
  return app.graph.serialize();
};
"""

SPEECH_TEXT = ("Hello from Mizuoto. This voice runs inside ComfyUI, and it shares the graphics card "
               "with your image models.")
FIXED = {"control_after_generate": "fixed"}

SPEAK_AND_PREVIEW = {
    "nodes": [
        {"key": "load", "type": "MizuotoLoadHibari", "pos": [40, 120], "size": [330, 90],
         "values": {"precision": "fp32", "device": "auto"}},
        {"key": "speak", "type": "MizuotoSpeak", "pos": [420, 120], "size": [400, 330],
         "values": {"text": SPEECH_TEXT, "seed": 0, **FIXED, "speed": 1.0, "language": "auto", "voice": ""}},
        {"key": "preview", "type": "PreviewAudio", "pos": [870, 120], "size": [320, 130]},
    ],
    "links": [["load", 0, "speak", "model"], ["speak", 0, "preview", "audio"]],
}

SD15 = "v1-5-pruned-emaonly-fp16.safetensors"
SD15_URL = "https://huggingface.co/Comfy-Org/stable-diffusion-v1-5-archive/resolve/main/" + SD15
NOTE = ("Speech and an image model in one graph.\n\n"
        "Mizuoto registers its components with ComfyUI's memory manager, so when the checkpoint "
        "loads, ComfyUI takes VRAM back from the voice unit by unit (and the other way round). "
        "If the voice does not fit whole, its remaining layers stream from RAM: slower, "
        "never different, never out of memory.\n\n"
        "The image part needs " + SD15 + " in models/checkpoints; the voice needs no download.")

SPEECH_NEXT_TO_IMAGE = {
    "nodes": [
        {"key": "ckpt", "type": "CheckpointLoaderSimple", "pos": [40, 140], "size": [330, 100],
         "values": {"ckpt_name": SD15},
         "properties": {"models": [{"name": SD15, "url": SD15_URL, "directory": "checkpoints"}]}},
        {"key": "pos", "type": "CLIPTextEncode", "pos": [420, 100], "size": [420, 170], "title": "Positive prompt",
         "values": {"text": "a lighthouse on a cliff at dawn, soft light, sea mist, detailed painting"}},
        {"key": "neg", "type": "CLIPTextEncode", "pos": [420, 310], "size": [420, 130], "title": "Negative prompt",
         "values": {"text": "text, watermark, blurry"}},
        {"key": "latent", "type": "EmptyLatentImage", "pos": [500, 480], "size": [300, 110],
         "values": {"width": 512, "height": 512, "batch_size": 1}},
        {"key": "ksampler", "type": "KSampler", "pos": [890, 100], "size": [320, 270],
         "values": {"seed": 0, **FIXED, "steps": 20, "cfg": 7.0, "sampler_name": "euler",
                    "scheduler": "normal", "denoise": 1.0}},
        {"key": "decode", "type": "VAEDecode", "pos": [1260, 100], "size": [210, 50]},
        {"key": "image", "type": "PreviewImage", "pos": [1260, 200], "size": [320, 380]},
        {"key": "load", "type": "MizuotoLoadHibari", "pos": [40, 720], "size": [330, 90],
         "values": {"precision": "fp32", "device": "auto"}},
        {"key": "speak", "type": "MizuotoSpeak", "pos": [420, 720], "size": [420, 330],
         "values": {"text": "The lighthouse keeper lit the lamp at dawn, just as the mist rolled in.",
                    "seed": 0, **FIXED, "speed": 1.0, "language": "en", "voice": ""}},
        {"key": "preview", "type": "PreviewAudio", "pos": [890, 720], "size": [320, 130]},
        {"key": "note", "type": "Note", "pos": [1260, 720], "size": [320, 300], "values": {"text": NOTE}},
    ],
    "links": [
        ["ckpt", 0, "ksampler", "model"], ["ckpt", 1, "pos", "clip"], ["ckpt", 1, "neg", "clip"],
        ["pos", 0, "ksampler", "positive"], ["neg", 0, "ksampler", "negative"],
        ["latent", 0, "ksampler", "latent_image"], ["ksampler", 0, "decode", "samples"],
        ["ckpt", 2, "decode", "vae"], ["decode", 0, "image", "images"],
        ["load", 0, "speak", "model"], ["speak", 0, "preview", "audio"],
    ],
    "groups": [
        {"title": "Image (Stable Diffusion 1.5)", "pos": [20, 20], "size": [1580, 600], "color": "#3f789e"},
        {"title": "Speech (Mizuoto, embedded voice)", "pos": [20, 640], "size": [1580, 420], "color": "#8a8a3f"},
    ],
}

DIALOGUE = ("[Alice] Good morning! Did you see the lighthouse last night?\n"
            "[Bob] I did. [pause:0.4s] The lamp was brighter than ever.\n"
            "[narrator] They walked down to the harbour together.\n"
            "[Alice][speed:1.15] Let's hurry, the boat leaves at nine!")
SCRIPT_NOTE = ("A script: [Name] switches the speaker (the Voice nodes' names), [pause:0.5s] inserts silence, "
               "[lang:de] or [de:Name] switch language, [seed:N] and [speed:X] set one line's options. "
               "Line i uses seed + i; unchanged lines come from a cache when you run it again.\n\n"
               "Here every voice is the embedded one (no download). Connect reference audio and its "
               "transcript to a Voice node, and a cloning model (its own model input, or the Script's), "
               "to give a character its own voice. save_to_library keeps a voice in models/TTS/voices/.")
VOICE_NODE = {"library_voice": "(none)", "save_to_library": False, "transcript": "", "instruction": ""}
# The embedded voice and two named voices (both its one speaker: no download), shared by both scripts.
CAST = [
    {"key": "load", "type": "MizuotoLoadHibari", "pos": [40, 120], "size": [330, 90],
     "values": {"precision": "fp32", "device": "auto"}},
    {"key": "alice", "type": "MizuotoVoice", "pos": [40, 260], "size": [330, 260],
     "values": {"name": "Alice", **VOICE_NODE, "speaker": "heart"}},
    {"key": "bob", "type": "MizuotoVoice", "pos": [40, 560], "size": [330, 260],
     "values": {"name": "Bob", **VOICE_NODE, "speaker": "heart"}},
]

SCRIPT_DIALOGUE = {
    "nodes": [
        *CAST,
        {"key": "script", "type": "MizuotoScript", "pos": [420, 120], "size": [460, 460],
         "values": {"script": DIALOGUE, "seed": 0, **FIXED, "speed": 1.0, "language": "en",
                    "unknown_characters": "error"}},
        {"key": "preview", "type": "PreviewAudio", "pos": [930, 120], "size": [320, 130]},
        {"key": "report", "type": "PreviewAny", "pos": [930, 300], "size": [420, 280]},
        {"key": "note", "type": "Note", "pos": [930, 620], "size": [420, 260], "values": {"text": SCRIPT_NOTE}},
    ],
    "links": [["load", 0, "script", "model"], ["alice", 0, "script", "voice_1"], ["bob", 0, "script", "voice_2"],
              ["script", 0, "preview", "audio"], ["script", 1, "report", "source"]],
}

SUBTITLES = ("1\n00:00:00,500 --> 00:00:02,500\n[Alice] Welcome to the harbour.\n\n"
             "2\n00:00:03,000 --> 00:00:04,000\n[Bob] This line is much too long for the one second it has.\n\n"
             "3\n00:00:05,000 --> 00:00:07,500\nThe boat leaves at nine.\n")
SRT_NOTE = ("Subtitles spoken on their timings. Each cue starts at its time; speech longer than its cue is "
            "stretched (pitch kept) up to max_stretch, then handled by the fallback (pad_trim cuts it, overlap "
            "lets it run on, shift moves what follows). The report lists every cue that was adjusted; "
            "adjusted_srt has the times as spoken. Put .srt files in ComfyUI's input folder to pick them "
            "with srt_file.")

SRT_SUBTITLES = {
    "nodes": [
        *CAST,
        {"key": "srt", "type": "MizuotoSrt", "pos": [420, 120], "size": [460, 600],
         "values": {"srt": SUBTITLES, "srt_file": "(none)", "timing": "stretch", "max_stretch": 1.5,
                    "fallback": "overlap", "overlapping_cues": "trim", "seed": 0, **FIXED, "speed": 1.0,
                    "language": "en", "unknown_characters": "error"}},
        {"key": "preview", "type": "PreviewAudio", "pos": [930, 120], "size": [320, 130]},
        {"key": "adjusted", "type": "PreviewAny", "pos": [930, 300], "size": [420, 220]},
        {"key": "report", "type": "PreviewAny", "pos": [930, 560], "size": [420, 280]},
        {"key": "note", "type": "Note", "pos": [1400, 120], "size": [380, 300], "values": {"text": SRT_NOTE}},
    ],
    "links": [["load", 0, "srt", "model"], ["alice", 0, "srt", "voice_1"], ["bob", 0, "srt", "voice_2"],
              ["srt", 0, "preview", "audio"], ["srt", 1, "adjusted", "source"], ["srt", 2, "report", "source"]],
}

WORKFLOWS = {"speak_and_preview": SPEAK_AND_PREVIEW, "speech_next_to_an_image_model": SPEECH_NEXT_TO_IMAGE,
             "script_dialogue": SCRIPT_DIALOGUE, "srt_subtitles": SRT_SUBTITLES}
API_FORMS = ("speak_and_preview", "script_dialogue", "srt_subtitles")   # posted by test_server.py
# The audio file the hand-made voice-cloning workflows' LoadAudio nodes name; a short silent stand-in
# is put in the server's input folder, so the UI draws it as an existing file.
REFERENCE_AUDIO = "reference.wav"
FRONTEND_ONLY = {"Note", "MarkdownNote", "Reroute", "PrimitiveNode"}  # node types with no /object_info entry


def hand_made() -> list[str]:
    """The example workflows not built from a spec here (every other example_workflows/*.json)."""
    return sorted(p.stem for p in OUT.glob("*.json") if p.stem not in WORKFLOWS)


def link_problems(graph: dict) -> list[str]:
    """Links that do not join two nodes of the graph both ways (the link table vs the nodes' slots)."""
    problems, nodes = [], {n["id"]: n for n in graph["nodes"]}
    links = {link[0]: link for link in graph["links"]}
    for link_id, src, src_slot, dst, dst_slot, kind in graph["links"]:
        a, b = nodes.get(src), nodes.get(dst)
        if a is None or b is None:
            problems.append(f"link {link_id}: node {src if a is None else dst} is not in the graph")
            continue
        out = a["outputs"][src_slot] if src_slot < len(a.get("outputs", [])) else None
        inp = b["inputs"][dst_slot] if dst_slot < len(b.get("inputs", [])) else None
        if out is None or link_id not in (out.get("links") or []):
            problems.append(f"link {link_id}: output {src_slot} of node {src} does not list it")
        if inp is None or inp.get("link") != link_id:
            problems.append(f"link {link_id}: input {dst_slot} of node {dst} does not name it")
        if out is not None and inp is not None and kind not in (out["type"], inp["type"]):
            problems.append(f"link {link_id}: type {kind} is neither {out['type']} nor {inp['type']}")
    for n in graph["nodes"]:
        for i in n.get("inputs", []):
            if i.get("link") is not None and i["link"] not in links:
                problems.append(f"node {n['id']} input {i['name']}: link {i['link']} is not in the link table")
        for o in n.get("outputs", []):
            for link_id in o.get("links") or []:
                if link_id not in links:
                    problems.append(f"node {n['id']} output {o['name']}: link {link_id} is not in the link table")
    if graph["nodes"] and graph.get("last_node_id", 0) < max(nodes):
        problems.append(f"last_node_id {graph.get('last_node_id')} < largest node id {max(nodes)}")
    if links and graph.get("last_link_id", 0) < max(links):
        problems.append(f"last_link_id {graph.get('last_link_id')} < largest link id {max(links)}")
    return problems


# Load a workflow as the template browser does; each node's widgets as the frontend built them.
LOAD_AND_INSPECT = r"""
window.__mizuotoInspect = async (graph) => {
  await app.loadGraphData(graph, true, true, null);
  const nodes = app.graph.nodes.map((n) => ({
    id: n.id, type: n.type, known: !!LiteGraph.registered_node_types[n.type],
    widgets: (n.widgets || []).filter((w) => w.serialize !== false).map((w) => ({
      name: w.name, type: w.type, value: w.value ?? null,
      choices: Array.isArray(w.options?.values) ? w.options.values : null,
      min: w.options?.min ?? null, max: w.options?.max ?? null})),
  }));
  const saved = app.graph.serialize();
  return {nodes, saved};
};
"""


def widget_problems(graph: dict, inspected: list[dict]) -> list[str]:
    """Widget values the frontend would not accept as they are, or that the file names differently."""
    problems, by_id = [], {str(n["id"]): n for n in graph["nodes"]}  # the live graph's ids may be strings
    for node in inspected:
        where = f"node {node['id']} ({node['type']})"
        named = by_id.get(str(node["id"]), {}).get("widgets_values_named")
        for w in node["widgets"]:
            value = w["value"]
            if w["choices"] is not None and value not in w["choices"]:
                some = ", ".join(map(repr, w["choices"][:8])) + (", ..." if len(w["choices"]) > 8 else "")
                problems.append(f"{where}: {w['name']} = {value!r} is not one of [{some}]")
            if w["type"] == "number":
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    problems.append(f"{where}: {w['name']} = {value!r} is not a number")
                elif (w["min"] is not None and value < w["min"]) or (w["max"] is not None and value > w["max"]):
                    problems.append(f"{where}: {w['name']} = {value!r} is outside [{w['min']}, {w['max']}]")
            if w["type"] in ("text", "customtext") and not isinstance(value, str):
                problems.append(f"{where}: {w['name']} = {value!r} is not a string")
            if named is not None and w["name"] in named and named[w["name"]] != value:
                problems.append(f"{where}: widgets_values puts {value!r} in {w['name']}, "
                                f"widgets_values_named says {named[w['name']]!r} (order of the inputs?)")
    return problems


def check_hand_made(browser: Browser, name: str, object_info: dict) -> dict:
    """Validate a hand-made workflow in the frontend; return the frontend's serialization of it."""
    graph = json.loads((OUT / f"{name}.json").read_text())
    problems = [f"node {n['id']}: unknown node type {n['type']}" for n in graph["nodes"]
                if n["type"] not in object_info and n["type"] not in FRONTEND_ONLY]
    problems += link_problems(graph)
    if not problems:
        result = browser.evaluate(f"window.__mizuotoInspect({json.dumps(graph)})")
        problems += [f"node {n['id']}: the frontend does not know {n['type']}"
                     for n in result["nodes"] if not n["known"]]
        problems += widget_problems(graph, result["nodes"])
        saved = result["saved"]
        saved.pop("id", None)
        saved.setdefault("extra", {}).pop("ds", None)
        if sorted(map(tuple, saved["links"])) != sorted(map(tuple, graph["links"])):
            problems.append(f"the links change on load: {graph['links']} -> {saved['links']}")
        problems += [f"after load: {p}" for p in link_problems(saved)]
    if problems:
        raise SystemExit(f"example_workflows/{name}.json is not a valid workflow:\n  " + "\n  ".join(problems))
    return saved


def write_silent_wav(path: Path, seconds: float = 1.0, rate: int = 24000) -> None:
    import wave

    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(b"\0\0" * int(seconds * rate))


def open_ui(browser: Browser, url: str) -> None:
    browser.navigate(url)
    browser.wait_for("!!(window.app && app.graph && app.extensionManager && window.LiteGraph"
                     " && document.querySelector('.side-bar-button')"
                     " && app.extensions.some((e) => e.name === 'mizuoto.panel'))", timeout=90)


def thumbnail(browser: Browser, workflow: dict, path: Path) -> None:
    """Load the workflow at zoom <= 1.5, centred; screenshot the square around it; 512x512 JPEG."""
    from PIL import Image

    width, height, margin = 2200, 2200, 30
    browser.send("Emulation.setDeviceMetricsOverride",
                 {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    browser.evaluate(f"app.loadGraphData({json.dumps(workflow)}, true, true, null).then(() => true)")
    rect = browser.evaluate(f"""(async () => {{
      const W = {width}, H = {height}, M = {margin}, G = app.graph, T = LiteGraph.NODE_TITLE_HEIGHT;
      let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
      for (const n of G.nodes) {{
        x0 = Math.min(x0, n.pos[0]); y0 = Math.min(y0, n.pos[1] - T);
        x1 = Math.max(x1, n.pos[0] + n.size[0]); y1 = Math.max(y1, n.pos[1] + n.size[1]);
      }}
      for (const g of G.groups || []) {{
        x0 = Math.min(x0, g.pos[0]); y0 = Math.min(y0, g.pos[1]);
        x1 = Math.max(x1, g.pos[0] + g.size[0]); y1 = Math.max(y1, g.pos[1] + g.size[1]);
      }}
      const ds = app.canvas.ds, bw = x1 - x0, bh = y1 - y0;
      ds.scale = Math.min(1.5, 0.8 * W / bw, 0.8 * H / bh);
      ds.offset[0] = W / (2 * ds.scale) - (x0 + bw / 2);
      ds.offset[1] = H / (2 * ds.scale) - (y0 + bh / 2);
      app.canvas.setDirty(true, true);
      await new Promise((r) => setTimeout(r, 800));
      const sx = (x) => (x + ds.offset[0]) * ds.scale, sy = (y) => (y + ds.offset[1]) * ds.scale;
      const side = Math.max(bw, bh) * ds.scale + 2 * M;  // a square around the graph's centre
      return {{x: sx(x0 + bw / 2) - side / 2, y: sy(y0 + bh / 2) - side / 2, width: side, height: side}};
    }})()""")
    tmp = browser.screenshot(path.with_name(path.stem + ".tmp.png"), clip=rect)
    square = Image.open(tmp).convert("RGB")
    tmp.unlink()
    square.resize((THUMB, THUMB), Image.LANCZOS).save(path, "JPEG", quality=88, optimize=True)


def main() -> int:
    reason = why_not_runnable()
    chromium = find_chromium()
    if reason or not chromium:
        print(reason or "chromium not found (apt-get install chromium)", file=sys.stderr)
        return 2
    OUT.mkdir(exist_ok=True)
    settings = {"Comfy.Graph.CanvasInfo": False, "Comfy.Minimap.Visible": False}
    # The usual clone name, so the node-source badges in the thumbnails read "comfyui-mizuoto".
    with ComfyServer(comfyui_path(), settings=settings, pack_dir_name="comfyui-mizuoto") as server, \
            Browser(chromium, log_path=str(server.base / "chromium.log")) as browser:
        # An empty stand-in for the SD1.5 checkpoint, so the UI draws no "missing model" warning.
        checkpoints = server.base / "models" / "checkpoints"
        checkpoints.mkdir(parents=True, exist_ok=True)
        (checkpoints / SD15).touch()
        # A silent stand-in for the voice-cloning workflows' reference recording (same reason).
        (server.base / "input").mkdir(exist_ok=True)
        write_silent_wav(server.base / "input" / REFERENCE_AUDIO)
        object_info = server.get("/object_info")
        open_ui(browser, server.url)
        browser.evaluate(BUILDER + LOAD_AND_INSPECT + "; true")
        for name, spec in WORKFLOWS.items():
            graph = browser.evaluate(f"window.__mizuotoBuild({json.dumps(spec)})")
            graph.pop("id", None)  # a fresh id per load; templates carry none
            graph.setdefault("extra", {}).pop("ds", None)  # the view is fitted on load
            (OUT / f"{name}.json").write_text(json.dumps(graph, indent=2, ensure_ascii=False) + "\n")
            if name in API_FORMS:
                api = browser.evaluate("app.graphToPrompt().then((p) => p.output)")
                (HERE / f"{name}.api.json").write_text(json.dumps(api, indent=2, ensure_ascii=False) + "\n")
            thumbnail(browser, graph, OUT / f"{name}.jpg")
            print(f"wrote {OUT / name}.json/.jpg ({len(graph['nodes'])} nodes, {len(graph['links'])} links)")
        for name in hand_made():  # checked, rewritten as the frontend saves them, thumbnailed
            graph = check_hand_made(browser, name, object_info)
            (OUT / f"{name}.json").write_text(json.dumps(graph, indent=2, ensure_ascii=False) + "\n")
            thumbnail(browser, graph, OUT / f"{name}.jpg")
            print(f"checked {OUT / name}.json, wrote .jpg ({len(graph['nodes'])} nodes, {len(graph['links'])} links)")
        errors = [e for e in browser.console_errors() if "mizuoto" in e.lower()]
        if errors:
            print("console errors mentioning mizuoto:", *errors, sep="\n  ", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
