"""The shipped example workflows against the pack's own node definitions (no ComfyUI needed): every
Mizuoto node's saved widget values are valid choices and in range, as ComfyUI's prompt validation checks
them. Saved values are part of a workflow like node ids: an earlier model name still loads."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mizuoto.nodes import NODE_CLASS_MAPPINGS
from mizuoto.nodes.pack.loader_node import current_name
from mizuoto.nodes.gpt_sovits import ENGINE as GPT_SOVITS

SEED_CONTROLS = ("fixed", "increment", "decrement", "randomize")
EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "example_workflows").glob("*.json"))


def widget_problems(node: dict) -> list[str]:
    cls = NODE_CLASS_MAPPINGS[node["type"]]
    types = cls.INPUT_TYPES()
    inputs = {**types.get("required", {}), **types.get("optional", {})}
    problems = []
    for name, value in node.get("widgets_values_named", {}).items():
        if name == "control_after_generate":   # the frontend's widget after a seed
            if value not in SEED_CONTROLS:
                problems.append(f"{name}: {value!r} is not one of {SEED_CONTROLS}")
            continue
        if name not in inputs:
            problems.append(f"{name}: not an input of {node['type']}")
            continue
        kind, options = inputs[name][0], (inputs[name][1] if len(inputs[name]) > 1 else {})
        if isinstance(kind, list) and value not in kind:
            problems.append(f"{name}: {value!r} is not one of {kind}")
        elif kind in ("INT", "FLOAT") and not options.get("min", value) <= value <= options.get("max", value):
            problems.append(f"{name}: {value!r} outside [{options.get('min')}, {options.get('max')}]")
        elif kind == "STRING" and not isinstance(value, str):
            problems.append(f"{name}: {value!r} is not a string")
    return problems


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_mizuoto_widget_value_of_the_example_is_valid(path):
    graph = json.loads(path.read_text())
    thumb = path.with_suffix(".jpg")   # ComfyUI's template browser shows it
    assert thumb.exists() and thumb.read_bytes()[:3] == b"\xff\xd8\xff", f"{thumb.name}: no JPEG thumbnail"
    ours = [n for n in graph["nodes"] if n["type"] in NODE_CLASS_MAPPINGS]
    assert ours, f"{path.name}: no Mizuoto node"
    problems = {f"{n['type']} #{n['id']}": p for n in ours if (p := widget_problems(n))}
    assert not problems, f"{path.name}: {problems}"
    for n in ours:   # the positional list ComfyUI's frontend reads holds the same values
        assert list(n["widgets_values_named"].values()) == n["widgets_values"], (path.name, n["id"])


def test_an_earlier_model_name_in_a_saved_workflow_still_loads():
    loader = NODE_CLASS_MAPPINGS[GPT_SOVITS.loader_node]
    assert loader.VALIDATE_INPUTS("v2Pro") is True                      # ComfyUI's check for the input
    assert current_name(GPT_SOVITS, "v2Pro") == "GPT-SoVITS-v2Pro"      # and what the loader opens
    assert loader.VALIDATE_INPUTS("GPT-SoVITS-v2") is True
    assert "expected one of" in loader.VALIDATE_INPUTS("v9")


def test_every_engine_has_an_example_workflow():
    """The README promises one example per engine: each registered loader appears in some workflow."""
    from mizuoto.nodes.pack.registry import discover

    used = {n["type"] for path in EXAMPLES for n in json.loads(path.read_text())["nodes"]}
    assert [s.engine_id for s in discover() if s.loader_node not in used] == []
