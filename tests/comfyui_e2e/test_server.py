"""End to end against a real ComfyUI server: our pack loaded from an oddly named folder, a workflow
with our nodes run through /prompt and /history, the runtime route, /free, the template listing,
and the web panel in the real frontend (headless Chromium).

Runs only when COMFYUI_PATH points at a ComfyUI checkout and this interpreter can run it:

    COMFYUI_PATH=/path/to/ComfyUI /path/to/comfy-venv/bin/python -m pytest tests/comfyui_e2e -q -s

The server runs on 127.0.0.1 on a free port with `--cpu` and a temporary base directory (nothing is
written into the checkout) and is stopped by its PID at the end. The pack's runtime is told to
simulate a 10 MB device (MIZUOTO_COMPUTE_SIMULATE_VRAM_MB): the embedded voice's acoustic model
(7.3 MB, int8 Linear weights, plus ~12 MB of working memory) then does not fit whole, so the run exercises partial placement
and weight streaming inside ComfyUI, and the panel has real bars to show. The eviction test runs its
own server, in which ComfyUI arbitrates a simulated 128 MB device as its GPU (simgpu_node/).
See README.md here.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cdp import Browser, find_chromium  # noqa: E402
from comfy_server import REPO, SIMULATED_VRAM_MB, ComfyServer, comfyui_path, why_not_runnable  # noqa: E402

SKIP_REASON = why_not_runnable()
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")

OUR_NODES = {
    "MizuotoLoadHibari": {"required": ["precision", "device"], "output": ["MIZUOTO_TTS"]},
    "MizuotoSpeak": {"required": ["model", "text", "seed", "speed", "language"],
                     "optional": ["voice", "reference_audio", "reference_text", "instruction", "settings",
                                  "named_voice", "options", "option_audio"],
                     "output": ["AUDIO"]},
    "MizuotoVoice": {"required": ["name", "library_voice", "save_to_library"],
                     "optional": ["audio", "transcript", "speaker", "instruction", "model", "language"],
                     "output": ["MIZUOTO_VOICE"]},
    "MizuotoScript": {"required": ["model", "script", "seed", "speed", "language", "unknown_characters"],
                      "optional": ["narrator", *(f"voice_{i}" for i in range(1, 9)), "settings", "options",
                                   "option_audio", "native_dialogue"],
                      "output": ["AUDIO", "STRING"]},
    "MizuotoSrt": {"required": ["model", "srt", "srt_file", "timing", "max_stretch", "fallback", "overlapping_cues",
                                "seed", "speed", "language", "unknown_characters"],
                   "optional": ["narrator", *(f"voice_{i}" for i in range(1, 9)), "settings", "options",
                                "option_audio"],
                   "output": ["AUDIO", "STRING", "STRING"]},
    "MizuotoLoadQwen3TTS": {"required": ["model", "precision", "device"], "output": ["MIZUOTO_TTS"]},
    "MizuotoRuntimeSettings": {"required": ["vram_mode", "vram_reserve_mb", "vram_limit_mb", "async_offload",
                                            "host_copies", "oom_retry", "oom_fallback", "kv_cache"],
                               "optional": ["more"], "output": ["MIZUOTO_SETTINGS"]},
}
# The runtime service's key for the loader's fp32/auto output: engine, model, dtype, device (auto = CPU under --cpu)
MODEL = "hibari:hibari heart:float32:cpu"
# Every example workflow shipped (the hibari ones built by make_examples.py, one per engine by hand).
WORKFLOWS = sorted(p.stem for p in (REPO / "example_workflows").glob("*.json"))
FRONTEND_ONLY = {"Note", "MarkdownNote", "Reroute", "PrimitiveNode"}  # node types with no /object_info entry
API_PROMPT = json.loads((HERE / "speak_and_preview.api.json").read_text())
SPEAKING = ("MizuotoSpeak", "MizuotoScript", "MizuotoSrt")   # the nodes that turn a model into AUDIO


@pytest.fixture(scope="module")
def server():
    started = time.monotonic()
    srv = ComfyServer(comfyui_path(), extra_custom_nodes={"mizuoto_e2e_probe": HERE / "probe_node"},
                      env={"MIZUOTO_COMPUTE_SIMULATE_VRAM_MB": str(SIMULATED_VRAM_MB)})
    try:
        srv.start()
        print(f"\nComfyUI up at {srv.url} (pid {srv.proc.pid}) in {time.monotonic() - started:.1f} s; "
              f"pack folder {srv.pack_dir_name!r}")
        yield srv
    finally:
        srv.stop()  # SIGTERM/SIGKILL by PID, then the temp base dir goes
        assert srv.proc is None or srv.proc.poll() is not None, "ComfyUI still running after stop()"


def runtime(server) -> dict:
    return server.get("/mizuoto/runtime")


def component(report: dict, name: str = "acoustic") -> dict | None:
    return next((c for c in report["components"] if c["name"] == name), None)


def flac_info(data: bytes) -> tuple[int, int, int]:
    """(sample rate, channels, total samples) from a FLAC stream's STREAMINFO block."""
    assert data[:4] == b"fLaC", f"not FLAC: {data[:8]!r}"
    info = data[8:8 + 34]  # after the 4-byte metadata block header
    bits = int.from_bytes(info[10:18], "big")
    rate, channels, total = bits >> 44, ((bits >> 41) & 0x7) + 1, bits & ((1 << 36) - 1)
    return rate, channels, total


def check_audio_output(server, entry: dict, node_id: str) -> float:
    """The PreviewAudio node's file: exists in ComfyUI's temp dir, non-empty FLAC, 24 kHz, > 0.5 s."""
    files = entry["outputs"][node_id]["audio"]
    assert len(files) == 1 and files[0]["type"] == "temp", files
    f = files[0]
    on_disk = server.base / "temp" / f["subfolder"] / f["filename"]
    assert on_disk.is_file() and on_disk.stat().st_size > 1000, on_disk
    query = urllib.parse.urlencode({"filename": f["filename"], "subfolder": f["subfolder"], "type": "temp"})
    data = server.get(f"/view?{query}")
    assert data == on_disk.read_bytes()
    rate, channels, total = flac_info(data)
    assert (rate, channels) == (24000, 1), (rate, channels)
    seconds = total / rate
    assert seconds > 0.5, seconds
    return seconds


# ---- the server and the pack -------------------------------------------------------------------------
def test_pack_loads_without_errors(server):
    log = server.log()
    ours = [line for line in log.splitlines() if server.pack_dir_name in line]
    assert any("seconds" in line for line in ours), f"no import-time line for our pack:\n{log[-3000:]}"
    assert not [line for line in ours if "IMPORT FAILED" in line], ours
    assert "Traceback" not in log, log[-6000:]
    # The frontend extension is served under the folder name, whatever it is.
    extensions = server.get("/extensions")
    assert f"/extensions/{urllib.parse.quote(server.pack_dir_name)}/mizuoto_panel.js" in extensions, extensions


def test_object_info_lists_our_nodes(server):
    info = server.get("/object_info")
    for name, spec in OUR_NODES.items():
        assert name in info, f"{name} missing from /object_info"
        node = info[name]
        assert node["category"] == "audio/tts"
        assert node["output"] == spec["output"]
        assert node["python_module"] == f"custom_nodes.{server.pack_dir_name}"
        assert list(node["input"]["required"]) == spec["required"]
        assert list(node["input"].get("optional", {})) == spec.get("optional", [])
    speak = info["MizuotoSpeak"]["input"]["required"]
    assert speak["model"] == ["MIZUOTO_TTS"] and speak["text"][0] == "STRING" and speak["seed"][0] == "INT"
    assert info["MizuotoLoadHibari"]["input"]["required"]["precision"][0] == ["fp32", "bf16", "fp16"]


# ---- a workflow with our nodes through the HTTP API ------------------------------------------------
def test_speak_workflow_via_prompt_and_history(server):
    started = time.monotonic()
    entry = server.run_prompt(API_PROMPT)
    assert entry["status"]["status_str"] == "success", json.dumps(entry["status"], indent=1)[:3000]
    seconds = check_audio_output(server, entry, "3")
    print(f"speak_and_preview: {seconds:.2f} s of audio in {time.monotonic() - started:.1f} s")

    report = runtime(server)
    assert report["device"] == "cpu" and report["total_mb"] == SIMULATED_VRAM_MB
    assert {"name": MODEL, "components": ["acoustic"]} in report["models"], report["models"]
    c = component(report)
    assert c is not None and c["engine"] == "hibari"
    print(f"runtime after the run: {json.dumps(c)}")
    # 10 MB cannot hold the acoustic model plus its working memory: partly placed, the rest streamed.
    assert 0 < c["loaded_mb"] < c["size_mb"], c
    assert c["partial"] is True and c["in_use"] is False, c
    assert c["streamed_mb"] > 0 and c["host_mb"] > 0, c
    last = report["last"]
    assert last["model"] == "hibari heart"
    assert last["memory"]["partial"]["acoustic"]["reason"] == "budget", last
    assert last["memory"]["streamed_mb"] > 0 and last["applied"] == {"oom_retries": 0, "fallbacks": []}, last


def preview_text(entry: dict, node_id: str) -> str:
    """What a PreviewAny node showed."""
    (text,) = entry["outputs"][node_id]["text"]
    return text


def test_script_and_srt_workflows_speak_with_named_voices(server):
    """The shipped Script and SRT templates (their frontend API forms) run to success: AUDIO from the
    named voices, the per-segment report, the adjusted SRT; run again unchanged, every segment comes
    from the segment cache (the Script node reruns: its report output feeds an output node)."""
    script = json.loads((HERE / "script_dialogue.api.json").read_text())
    entry = server.run_prompt(script)
    assert entry["status"]["status_str"] == "success", json.dumps(entry["status"], indent=1)[:3000]
    nodes = {v["class_type"]: k for k, v in script.items()}
    seconds = check_audio_output(server, entry, nodes["PreviewAudio"])
    report = preview_text(entry, nodes["PreviewAny"])
    assert report.startswith("5 speech segments, 1 pauses") and "5 synthesised" in report, report
    assert "Alice (hibari, seed 0" in report and "Bob (hibari, seed 1" in report and "narrator (hibari" in report
    print(f"script_dialogue: {seconds:.2f} s of audio\n{report}")
    edited = json.loads(json.dumps(script))
    script_node = nodes["MizuotoScript"]
    edited[script_node]["inputs"]["script"] = script[script_node]["inputs"]["script"].replace("nine", "ten")
    entry = server.run_prompt(edited)
    assert entry["status"]["status_str"] == "success"
    again = preview_text(entry, nodes["PreviewAny"])
    assert "1 synthesised, 4 from the segment cache" in again, again

    srt = json.loads((HERE / "srt_subtitles.api.json").read_text())
    entry = server.run_prompt(srt)
    assert entry["status"]["status_str"] == "success", json.dumps(entry["status"], indent=1)[:3000]
    audio_node = next(k for k, v in srt.items() if v["class_type"] == "PreviewAudio")
    seconds = check_audio_output(server, entry, audio_node)
    assert seconds >= 7.5, seconds                                 # the last cue ends at 7.5 s
    srt_node = next(k for k, v in srt.items() if v["class_type"] == "MizuotoSrt")
    shown = {srt[k]["inputs"]["source"][1]: preview_text(entry, k) for k, v in srt.items()
             if v["class_type"] == "PreviewAny" and srt[k]["inputs"]["source"][0] == srt_node}
    adjusted, report = shown[1], shown[2]
    assert adjusted.startswith("1\n00:00:00,500 --> ") and "[Bob] This line is much too long" in adjusted
    assert "cues adjusted" in report and "cue 2 00:00:03,000 --> 00:00:04,000" in report, report
    print(f"srt_subtitles: {seconds:.2f} s of audio\n{report}")


def test_free_unloads_our_model(server):
    if component(runtime(server)) is None or component(runtime(server))["loaded_mb"] == 0:
        server.run_prompt(API_PROMPT)
    before = server.get("/mizuoto_e2e/comfy_loaded_models")
    print(f"ComfyUI's loaded models before /free: {before}")
    server.post("/free", {"unload_models": True, "free_memory": True})
    deadline = time.monotonic() + 10  # ComfyUI acts on /free within about a second once idle
    while time.monotonic() < deadline:
        c = component(runtime(server))
        if c is None or c["loaded_mb"] == 0:
            return
        time.sleep(0.25)
    pytest.fail(f"/free left our component loaded: {component(runtime(server))}; "
                f"ComfyUI's list: {server.get('/mizuoto_e2e/comfy_loaded_models')}")


def link_problems(graph: dict) -> list[str]:
    """Links that do not join two nodes of the graph both ways (the link table vs the nodes' slots)."""
    problems, nodes = [], {n["id"]: n for n in graph["nodes"]}
    links = {link[0]: link for link in graph["links"]}
    for link_id, src, src_slot, dst, dst_slot, kind in graph["links"]:
        if src not in nodes or dst not in nodes:
            problems.append(f"link {link_id}: {src} -> {dst} leaves the graph")
            continue
        outs, ins = nodes[src].get("outputs", []), nodes[dst].get("inputs", [])
        if src_slot >= len(outs) or link_id not in (outs[src_slot].get("links") or []):
            problems.append(f"link {link_id}: output {src_slot} of node {src} does not list it")
        elif dst_slot >= len(ins) or ins[dst_slot].get("link") != link_id:
            problems.append(f"link {link_id}: input {dst_slot} of node {dst} does not name it")
        elif kind not in (outs[src_slot]["type"], ins[dst_slot]["type"]):
            problems.append(f"link {link_id}: type {kind} matches neither end")
    for n in graph["nodes"]:
        named = [i["link"] for i in n.get("inputs", []) if i.get("link") is not None]
        named += [link_id for o in n.get("outputs", []) for link_id in o.get("links") or []]
        problems += [f"node {n['id']} names link {link_id}, not in the link table" for link_id in named
                     if link_id not in links]
    return problems


def test_workflow_templates_list_our_examples(server):
    assert {"speak_and_preview", "speech_next_to_an_image_model", "script_dialogue", "srt_subtitles"} <= \
        set(WORKFLOWS), WORKFLOWS
    templates = server.get("/api/workflow_templates")
    assert sorted(templates.get(server.pack_dir_name, [])) == WORKFLOWS, templates
    info = server.get("/object_info")
    # An audio output node: an output node of ComfyUI's that takes AUDIO (PreviewAudio, SaveAudio, ...).
    audio_outputs = {name for name, node in info.items() if node.get("output_node")
                     and any(spec[0] == "AUDIO" for spec in node["input"].get("required", {}).values())}
    assert "PreviewAudio" in audio_outputs, sorted(audio_outputs)
    for name in WORKFLOWS:
        base = f"/api/workflow_templates/{urllib.parse.quote(server.pack_dir_name)}/{name}"
        graph = server.get(base + ".json")
        assert graph == json.loads((REPO / "example_workflows" / f"{name}.json").read_text()), name
        nodes = {n["id"]: n for n in graph["nodes"]}
        unknown = {n["type"] for n in graph["nodes"]} - set(info) - FRONTEND_ONLY
        assert not unknown, f"{name}: node types not in /object_info: {unknown}"
        assert not link_problems(graph), (name, link_problems(graph))
        # a Mizuoto loader -> a speaking node (model) -> an audio output node (audio)
        linked = {(nodes[src]["type"], nodes[dst]["type"], nodes[dst]["inputs"][slot]["name"])
                  for _, src, _, dst, slot, _ in graph["links"]}
        loaders = [n for n in graph["nodes"] if n["type"].startswith("MizuotoLoad")]
        assert loaders, f"{name}: no Mizuoto loader node"
        for loader in loaders:
            spec = info[loader["type"]]
            assert spec["output"] == ["MIZUOTO_TTS"] and spec["python_module"] == f"custom_nodes.{server.pack_dir_name}"
            assert any((loader["type"], node, "model") in linked for node in SPEAKING), (name, linked)
            # every loader input is a combo: its value must be one of the choices (e.g. a known model)
            required = spec["input"]["required"]
            assert len(loader["widgets_values"]) == len(required), (name, loader["widgets_values"])
            for (input_name, (choices, *_)), value in zip(required.items(), loader["widgets_values"]):
                assert isinstance(choices, list) and value in choices, (name, loader["type"], input_name, value)
        # every node's saved combo values, ComfyUI's own nodes included, are among the server's choices;
        # file pickers (uploads, model lists) list the test server's empty folders and are left out
        for node in graph["nodes"]:
            spec = info.get(node["type"], {}).get("input", {})
            inputs = {**spec.get("required", {}), **spec.get("optional", {})}
            for input_name, value in node.get("widgets_values_named", {}).items():
                choices, options = (inputs.get(input_name) or [None])[0], (inputs.get(input_name) or [None, {}])[-1]
                if choices == "COMBO":   # the newer schema: choices in the options
                    choices = (options or {}).get("options")
                picker = not choices or any(k.endswith("_upload") for k in (options or {}))
                if isinstance(choices, list) and not picker:
                    assert value in choices, (name, node["type"], input_name, value)
        assert any(n["type"] in SPEAKING for n in graph["nodes"]), f"{name}: no node of {SPEAKING}"
        assert any(src in SPEAKING and dst in audio_outputs and inp == "audio" for src, dst, inp in linked), \
            f"{name}: no speaking node feeds an audio output node ({linked})"
        thumb = server.get(base + ".jpg")
        assert thumb[:3] == b"\xff\xd8\xff", f"{name}.jpg is not a JPEG"
    pack = urllib.parse.quote(server.pack_dir_name)
    image_nodes = {n["type"] for n in server.get(
        f"/api/workflow_templates/{pack}/speech_next_to_an_image_model.json")["nodes"]}
    assert {"CheckpointLoaderSimple", "CLIPTextEncode", "EmptyLatentImage", "KSampler", "VAEDecode",
            "PreviewImage"} <= image_nodes


# ---- regression: a cached loader output whose model RAM relief evicted ------------------------------
# A RAM reserve no machine has: the service's RAM relief evicts every idle model after each Speak.
RAM_RELIEF_ENV = {"MIZUOTO_COMPUTE_RAM_RESERVE_MB": "1000000000000"}


def cached_nodes(entry: dict) -> list[str]:
    """The nodes ComfyUI served from its output cache in this prompt (its `execution_cached` message)."""
    return next((data["nodes"] for event, data in entry["status"]["messages"] if event == "execution_cached"), [])


def test_cached_loader_output_survives_ram_relief():
    """Two prompts, the second changing only Speak's text: ComfyUI reuses the loader's cached output
    (a LoadedModel) although RAM relief evicted the engine after the first Speak; the runtime service
    loads it again. Before the LoadedModel design the second prompt failed with
    `component 'acoustic' is not registered`."""
    prompt = json.loads(json.dumps(API_PROMPT))  # loader -> Speak -> PreviewAudio
    with ComfyServer(comfyui_path(), env=RAM_RELIEF_ENV) as srv:
        first = srv.run_prompt(prompt)
        assert first["status"]["status_str"] == "success", json.dumps(first["status"], indent=1)[:3000]
        check_audio_output(srv, first, "3")
        report = runtime(srv)
        # RAM relief really ran: the engine and its component are gone, only the cached LoadedModel remains.
        assert report["models"] == [] and report["components"] == [], report
        assert report["last"]["model"] == "hibari heart", report["last"]

        prompt["2"]["inputs"]["text"] = "The same loader output, after the model was evicted."
        second = srv.run_prompt(prompt)
        assert second["status"]["status_str"] == "success", json.dumps(second["status"], indent=1)[:3000]
        assert "1" in cached_nodes(second), second["status"]["messages"]  # the loader did not run again
        check_audio_output(srv, second, "3")
        assert second["outputs"]["3"]["audio"] != first["outputs"]["3"]["audio"]
        assert "is not registered" not in srv.log()


# ---- ComfyUI's own model and our voice evict each other on one simulated GPU ---------------------------
# "8 GB" at test_bridge's 1/64 scale. ComfyUI loads the stand-in (108) whole and keeps its scaled minimum
# inference memory (18.75) free, evicting our voice; the voice then needs 7.3 MB of weights and ~17 MB of
# working memory for one of these ~130-phoneme sentences (more than ComfyUI left free), so ComfyUI's model
# gives some back; and so on: each has to make room for the other.
SHARED_VRAM_MB = 128
STANDIN_MB = 108
TEXTS = ["The image model has to make room for this voice, because the voice needs more memory than the image "
         "model has left free on the card.",
         "And then the voice makes room again, since the image model wants all of its layers back before it can "
         "draw the next picture."]


def speak_inputs(text: str | list) -> dict:
    return {**API_PROMPT["2"]["inputs"], "text": text, "model": ["1", 0]}


def clean_prompt() -> dict:
    """Our voice alone on the device: each text spoken and its waveform saved exactly."""
    prompt = {"1": API_PROMPT["1"]}
    for k, text in enumerate(TEXTS):
        prompt[f"2{k}"] = {"class_type": "MizuotoSpeak", "inputs": speak_inputs(text)}
        prompt[f"3{k}"] = {"class_type": "MizuotoE2ESaveWaveform",
                           "inputs": {"audio": [f"2{k}", 0], "name": f"clean{k}"}}
    return prompt


def eviction_prompt(k: int) -> dict:
    """The stand-in diffusion model runs (load_models_gpu), then our Speak, then the stand-in again.

    The stand-in runs are never cached (IS_CHANGED is NaN) and feed Speak its text, so Speak runs
    on every prompt and strictly between them; the loader outputs stay cached between prompts."""
    return {
        "1": API_PROMPT["1"],
        "11": {"class_type": "MizuotoE2EStandinModel", "inputs": {"size_mb": STANDIN_MB}},
        "10": {"class_type": "MizuotoE2EStandinRun", "inputs": {"model": ["11", 0], "text": TEXTS[k]}},
        "2": {"class_type": "MizuotoSpeak", "inputs": speak_inputs(["10", 0])},
        "12": {"class_type": "MizuotoE2EStandinRun", "inputs": {"model": ["11", 0], "text": "", "after": ["2", 0]}},
        "3": {"class_type": "MizuotoE2ESaveWaveform", "inputs": {"audio": ["2", 0], "name": f"evicted{k}"}},
    }


def check_accounting(snap: dict, where: str) -> None:
    """One device, two owners: ComfyUI and the pack read the same free memory, nothing is over."""
    assert snap["external"] == snap["standin_loaded"], (where, snap)
    assert snap["comfy_free"] == snap["pack_free"] == snap["capacity"] - snap["used"] - snap["external"], (where, snap)
    assert snap["used"] + snap["external"] <= snap["capacity"] and snap["peak"] <= snap["capacity"], (where, snap)
    # between requests the pack holds nothing on the device but its placed weights
    assert snap["ours_in_use"] == 0 and snap["used"] == snap["ours_loaded"], (where, snap)


def test_comfy_model_and_our_voice_evict_each_other():
    """ComfyUI arbitrates the simulated device as its GPU (simgpu_node): a diffusion-sized ModelPatcher
    and our voice take memory from each other through ComfyUI's own free_memory, across two prompts,
    and our audio is equal to the clean run's."""
    env = {"MIZUOTO_COMPUTE_SIMULATE_VRAM_MB": str(SHARED_VRAM_MB)}
    mb = 1 << 20
    with ComfyServer(comfyui_path(), env=env, extra_custom_nodes={"mizuoto_e2e_simgpu": HERE / "simgpu_node"}) as srv:
        clean = srv.run_prompt(clean_prompt())
        assert clean["status"]["status_str"] == "success", json.dumps(clean["status"], indent=1)[:3000]
        report = runtime(srv)
        assert report["device"] == "cpu:0" and report["total_mb"] == SHARED_VRAM_MB, report
        rows = []
        for k in range(len(TEXTS)):
            entry = srv.run_prompt(eviction_prompt(k))
            assert entry["status"]["status_str"] == "success", json.dumps(entry["status"], indent=1)[:3000]
            first, second = entry["outputs"]["10"]["runs"][0], entry["outputs"]["12"]["runs"][0]
            snaps = [("before", first["before"]), ("stand-in loads", first["after"]),
                     ("voice speaks", second["before"]), ("stand-in loads again", second["after"])]
            for where, snap in snaps:
                check_accounting(snap, f"prompt {k}: {where}")
            rows += [(k, where, snap) for where, snap in snaps]
            before, loaded, spoke, again = (snap for _, snap in snaps)
            assert loaded["standin_loaded"] == STANDIN_MB * mb, loaded  # the stand-in runs whole
            if k == 0:  # its first load takes memory from our voice, resident since the clean run
                assert before["ours_loaded"] > loaded["ours_loaded"], (before, loaded)
            # We load: ComfyUI's model gives memory back through ComfyUI's own free_memory.
            assert spoke["standin_loaded"] < loaded["standin_loaded"], (loaded, spoke)
            assert spoke["ours_loaded"] > loaded["ours_loaded"], (loaded, spoke)
            # It loads: ComfyUI takes our units back through the bridge.
            assert again["ours_loaded"] < spoke["ours_loaded"], (spoke, again)
            assert again["gave_up_for"] == {"acoustic": "ComfyUI"}, again
            assert again["standin_loaded"] == STANDIN_MB * mb, again
            # Our audio is exactly the clean run's.
            out = srv.base / "output"
            evicted = torch.load(out / f"evicted{k}.pt")
            assert torch.equal(evicted, torch.load(out / f"clean{k}.pt")), k
            # ComfyUI made the room itself: our placement never ran out of memory and retried.
            last = runtime(srv)["last"]
            assert last["applied"]["oom_retries"] == 0 and last["memory"]["partial"] == {}, last
        assert "ComfyUI took back" in srv.log()
    print("\nprompt | step | stand-in loaded MB | our loaded MB | pack used MB | free MB")
    for k, where, s in rows:
        print(f"{k} | {where} | {s['standin_loaded'] / mb:.1f} | {s['ours_loaded'] / mb:.1f} | "
              f"{s['used'] / mb:.1f} | {s['pack_free'] / mb:.1f}")


# ---- the frontend: the workflow run from the UI, and our panel ---------------------------------------
def test_panel_in_the_real_frontend(server):
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("chromium not found at /usr/bin/chromium or on PATH (apt-get install chromium); "
                    "set CHROMIUM=/path/to/chromium to use another build")
    artifacts = Path(os.environ.get("MIZUOTO_ARTIFACTS") or tempfile.mkdtemp(prefix="mizuoto-e2e-"))
    artifacts.mkdir(parents=True, exist_ok=True)
    pack = urllib.parse.quote(server.pack_dir_name)
    started = time.monotonic()
    with Browser(chromium, width=1400, height=900, log_path=str(artifacts / "chromium.log")) as b:
        try:
            drive_ui(server, b, pack, artifacts, started)
        except BaseException:
            shot = b.screenshot(artifacts / "failure.png")
            print(f"failure screenshot: {shot}; console errors: {b.console_errors()}")
            raise
    print(f"browser part: {time.monotonic() - started:.1f} s")


LIVE_TEXT = "The panel refreshes after this run. Speech plays while it is made. This is the third sentence."


def check_live_pieces(b: Browser, done: dict) -> None:
    """The Speak node's pieces reached the page over the websocket before the prompt finished, in order,
    and decode to exactly the audio of the same request run here (same text, seed, model: equal however
    much the server streamed); the live chip counted them; the playback setting is registered."""
    import base64

    import numpy as np

    from mizuoto.nodes.hibari import ENGINE
    from mizuoto.nodes.pack.pipeline import SpeakRequest, synthesize
    from mizuoto.nodes.pack.registry import LoadRequest
    from mizuoto.runtime import DeviceService, ModelManager

    pieces = b.evaluate("window.__mz.pieces")
    audio = [p for p in pieces if not p.get("done")]
    assert len(audio) >= 3 and pieces[-1].get("done"), [(p["seq"], p.get("samples")) for p in pieces]
    assert [p["seq"] for p in pieces] == list(range(len(pieces)))
    assert audio[0]["at"] <= done["at"], "the first piece arrived after the prompt finished"
    assert [p["start"] for p in audio] == list(np.cumsum([0] + [p["samples"] for p in audio[:-1]]))
    live = torch.from_numpy(np.concatenate([np.frombuffer(base64.b64decode(p["pcm"]), "<f4") for p in audio]).copy())
    engine = ENGINE.build(LoadRequest("hibari heart", None, torch.float32, torch.device("cpu")),
                          ModelManager(DeviceService()))
    plain, _ = synthesize(engine, SpeakRequest(LIVE_TEXT, seed=0, language="auto"))
    assert torch.equal(live, plain), "the live pieces differ from the node's audio"
    chip = b.wait_for("(() => { const c = document.querySelector('.mizuoto-live');"
                      " return c && Number(c.dataset.pieces) > 0 && {pieces: Number(c.dataset.pieces),"
                      " seconds: Number(c.dataset.seconds)}; })()", timeout=10)
    assert chip["pieces"] == len(audio) and abs(chip["seconds"] - plain.numel() / 24000) < 1e-3, chip
    assert b.evaluate("app.extensionManager.setting.get('Mizuoto.LivePlayback')") is True
    print(f"live pieces: {len(audio)}, first after {audio[0]['at'] - pieces[0]['at']} ms of the first event, "
          f"{done['at'] - audio[0]['at']} ms before the prompt finished")


def drive_ui(server, b: Browser, pack: str, artifacts: Path, started: float) -> None:
    b.navigate(server.url)
    b.wait_for("!!(window.app && app.graph && app.extensionManager && document.querySelector('.side-bar-button'))",
               timeout=90)
    assert b.wait_for("app.extensions.some((e) => e.name === 'mizuoto.panel')", timeout=30)
    assert b.evaluate("app.extensionManager.getSidebarTabs().some((t) => t.id === 'mizuoto-models')")
    print(f"frontend ready in {time.monotonic() - started:.1f} s")

    # Open our tab first, so the refresh on execution events is what fills it with the new run.
    b.evaluate("app.extensionManager.command.execute('Workspace.ToggleSidebarTab.mizuoto-models').then(() => true)")
    b.wait_for("document.querySelector('#mizuoto-panel')?.dataset.state === 'ready'", timeout=20)

    # Load the shipped template exactly as the template browser fetches it, then run it from the UI.
    b.evaluate(f"""(async () => {{
      const graph = await (await fetch('/api/workflow_templates/{pack}/speak_and_preview.json')).json();
      await app.loadGraphData(graph);
      window.__mz = {{done: null, pieces: []}};
      const api = window.comfyAPI.api.api;
      api.addEventListener('mizuoto.audio', (e) => {{ window.__mz.pieces.push({{...e.detail, at: Date.now()}}); }});
      api.addEventListener('execution_success', (e) => {{
        window.__mz.done = {{ok: true, id: e.detail.prompt_id, at: Date.now()}};
      }});
      api.addEventListener('execution_error', (e) => {{ window.__mz.done = {{ok: false, detail: e.detail}}; }});
      return true;
    }})()""")
    ui_prompt = b.evaluate("app.graphToPrompt().then((p) => p.output)")
    assert ui_prompt == API_PROMPT, "graphToPrompt of the template differs from speak_and_preview.api.json"
    # A new text, so Speak really runs again (not served from ComfyUI's cache); three sentences, three pieces.
    b.evaluate(f"(() => {{ const n = app.graph.nodes.find((n) => n.type === 'MizuotoSpeak');"
               f" n.widgets.find((w) => w.name === 'text').value = {json.dumps(LIVE_TEXT)};"
               " return true; })()")
    b.evaluate("app.queuePrompt(0).then(() => true)")
    done = b.wait_for("window.__mz.done", timeout=120)
    assert done["ok"], done
    entry = server.get(f"/history/{done['id']}")[done["id"]]
    check_audio_output(server, entry, "3")
    check_live_pieces(b, done)

    # The panel refetched after execution_success (our event listeners) and lists the model with its bars.
    b.wait_for(f"Number(document.querySelector('#mizuoto-panel').dataset.fetched) >= {done['at']}", timeout=20)
    assert b.evaluate(f"!!document.querySelector('#mizuoto-panel .mizuoto-model[data-name=\"{MODEL}\"]')")
    panel = b.evaluate(f"""(() => {{
      const m = document.querySelector('#mizuoto-panel .mizuoto-model[data-name="{MODEL}"]');
      const c = m.querySelector('.mizuoto-component[data-name="acoustic"]');
      const bar = (k) => {{ const e = c.querySelector('.mizuoto-bar-' + k);
        return e && {{mb: parseFloat(e.dataset.mb), title: e.title, width: e.style.width,
                      px: e.getBoundingClientRect().width}}; }};
      const r = document.querySelector('#mizuoto-panel').getBoundingClientRect();
      return {{loaded: bar('loaded'), streamed: bar('streamed'), host: bar('host'),
               partialTag: !!c.querySelector('.mizuoto-partial'),
               lastPartial: document.querySelector('#mizuoto-panel .mizuoto-last-partial').textContent,
               lastOom: document.querySelector('#mizuoto-panel .mizuoto-last-oom').textContent,
               visible: r.width > 100 && r.height > 100}};
    }})()""")
    print(f"panel: {json.dumps(panel)}")
    report = runtime(server)
    c = component(report)
    assert panel["visible"]
    assert abs(panel["loaded"]["mb"] - c["loaded_mb"]) < 0.01 and 0 < panel["loaded"]["mb"] < c["size_mb"]
    assert panel["loaded"]["px"] > 0 and "MB" in panel["loaded"]["title"]
    assert panel["streamed"]["mb"] > 0 and panel["host"]["mb"] > 0
    assert panel["partialTag"] and "budget" in panel["lastPartial"] and panel["lastOom"] == "0"

    shot = b.screenshot(artifacts / "mizuoto_panel.png")
    print(f"panel screenshot: {shot}")

    # Frontends without registerSidebarTab get a floating panel instead: load a second instance of
    # the module with that API hidden and a registerExtension that just runs setup().
    fallback = b.evaluate(f"""(async () => {{
      const em = app.extensionManager, tab = em.registerSidebarTab, reg = app.registerExtension;
      em.registerSidebarTab = undefined;
      app.registerExtension = (ext) => ext.setup();
      try {{ await import('/extensions/{pack}/mizuoto_panel.js?fallback=1'); }}
      finally {{ em.registerSidebarTab = tab; app.registerExtension = reg; }}
      document.querySelector('.mizuoto-floating-toggle').click();
      for (let i = 0; i < 40; i++) {{
        const p = document.querySelector('.mizuoto-floating #mizuoto-panel[data-state="ready"]');
        if (p) return !!p.querySelector('.mizuoto-model[data-name="{MODEL}"] .mizuoto-bar-loaded');
        await new Promise((r) => setTimeout(r, 250));
      }}
      return false;
    }})()""")
    assert fallback, "the floating fallback panel did not show the model"
    check_interrupt_stops_live_playback(b)
    errors = [e for e in b.console_errors() if "mizuoto" in e.lower()]
    assert not errors, errors


def check_interrupt_stops_live_playback(b: Browser) -> None:
    """A long text interrupted from the UI once its first piece has arrived: ComfyUI reports the
    interrupt, fewer pieces arrived than the text has sentences (generation stopped) and the live chip
    stops (playback stopped)."""
    sentences = 60
    text = " ".join(f"Sentence number {i} of a long reading." for i in range(sentences))
    b.evaluate(f"""(() => {{
      window.__mz = {{done: null, pieces: [], interrupted: false}};
      const api = window.comfyAPI.api.api;
      api.addEventListener('execution_interrupted', () => {{ window.__mz.interrupted = true; }});
      const n = app.graph.nodes.find((n) => n.type === 'MizuotoSpeak');
      n.widgets.find((w) => w.name === 'text').value = {json.dumps(text)};
      return true;
    }})()""")
    b.evaluate("app.queuePrompt(0).then(() => true)")
    b.wait_for("window.__mz.pieces.length > 0", timeout=60)
    b.evaluate("window.comfyAPI.api.api.interrupt().then(() => true)")
    assert b.wait_for("window.__mz.interrupted", timeout=60)
    received = b.evaluate("window.__mz.pieces.filter((p) => !p.done).length")
    assert 0 < received < sentences, received
    assert b.wait_for("document.querySelector('.mizuoto-live')?.dataset.state === 'stopped'", timeout=10)
    print(f"interrupt: {received} of {sentences} sentences arrived; playback stopped")
