"""Subprocess side of tests/test_hostile_configs.py: for each named engine's tiny model folder, every numeric
field of its config files set to each hostile value in turn, then the engine built and one short request run.

    python tests/hostile_config_worker.py ENGINE[,ENGINE...] ROOT OUT [--plan 0:1,-1:1,1000000000000:1]
                                          [--limit-gb 6]

`--plan VALUE:N[+K],...`: each value set in every N-th field from the K-th (N = 1: all of them; a larger N: a
faster sample; different K give different values different fields).

Runs under an address-space limit (RLIMIT_AS) so an allocation of terabytes fails here, not on the machine.
Writes one JSON line per case to OUT as it goes ("start" before the build, then the outcome), so a hang or
a crash still says which field caused it.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import resource
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

TESTS = Path(__file__).resolve().parent
# YAML 1.1 reads 1e-06 (no dot) as a string; the loaders read it as the float it is meant to be
EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
JSON_SKIP = {"tokenizer.json", "vocab.json", "special_tokens.json"}   # token tables (their numbers are ids), not configs


@dataclass(frozen=True)
class Field:
    """One number in a config file: where it is and the name an error should give."""
    file: str          # relative to the model folder
    path: str          # dotted path (list items as [i])
    key: str           # the nearest mapping key: what the error must name
    value: int | float
    span: tuple[int, int] | None   # YAML: character span of the scalar in the text (edited as text)


def config_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and (
        p.suffix in (".yaml", ".yml") or (p.suffix == ".json" and p.name not in JSON_SKIP)))


def _json_numbers(data: Any, path: str, key: str) -> Iterator[tuple[str, str, Any]]:
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _json_numbers(v, f"{path}.{k}" if path else str(k), str(k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _json_numbers(v, f"{path}[{i}]", key)
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        yield path, key, data


def _yaml_numbers(node: Any, path: str, key: str) -> Iterator[tuple[str, str, Any, tuple[int, int]]]:
    import yaml
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            name = str(k.value)
            yield from _yaml_numbers(v, f"{path}.{name}" if path else name, name)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            yield from _yaml_numbers(v, f"{path}[{i}]", key)
    elif isinstance(node, yaml.ScalarNode) and node.style is None and (
            node.tag.endswith((":int", ":float")) or (node.tag.endswith(":str") and EXPONENT.fullmatch(node.value))):
        text = node.value
        try:
            value: int | float = int(text)
        except ValueError:
            value = float(text)
        yield path, key, value, (node.start_mark.index, node.end_mark.index)


def fields(folder: Path) -> list[Field]:
    import yaml
    out = []
    for p in config_files(folder):
        rel = str(p.relative_to(folder))
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".json":
            for path, key, value in _json_numbers(json.loads(text), "", ""):
                out.append(Field(rel, path, key, value, None))
        else:
            # composed, not constructed: HyperPyYAML's !new:/!ref tags are kept as they are
            for path, key, value, span in _yaml_numbers(yaml.compose(text, Loader=yaml.SafeLoader), "", ""):
                out.append(Field(rel, path, key, value, span))
    return out


def _set_json(data: Any, path: str, value: Any) -> Any:
    parts = re.findall(r"[^.\[\]]+|\[\d+\]", path)
    node = data
    for part in parts[:-1]:
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    last = parts[-1]
    if last.startswith("["):
        node[int(last[1:-1])] = value
    else:
        node[last] = value
    return data


def edited(original: str, field: Field, value: int | float) -> str:
    if field.span is not None:
        a, b = field.span
        return original[:a] + repr(value) + original[b:]
    return json.dumps(_set_json(json.loads(original), field.path, value), indent=1)


def load_case(engine: str, root: Path):
    sys.path.insert(0, str(TESTS))
    spec = importlib.util.spec_from_file_location(f"hostile_{engine}", TESTS / engine / "tiny.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.conformance_case(root)


def parse_plan(text: str) -> list[tuple[int, int, int]]:
    plan = []
    for item in text.split(","):
        value, _, step = item.partition(":")
        every, _, offset = step.partition("+")
        plan.append((int(value), int(every or 1), int(offset or 0)))
    return plan


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("engines", help="engine ids, comma-separated: one process for all keeps imports to one")
    parser.add_argument("root", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--plan", default=f"0:1,-1:1,{10**12}:1")
    parser.add_argument("--limit-gb", type=float, default=6)
    args = parser.parse_args()
    plan = parse_plan(args.plan)

    import torch
    torch.set_num_threads(1)
    from mizuoto.nodes.pack.pipeline import synthesize
    from mizuoto.nodes.pack.registry import LoadRequest, discover
    from mizuoto.runtime import DeviceService, ModelManager

    specs = {s.engine_id: s for s in discover()}
    limit = int(args.limit_gb * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))   # after the imports: only the cases are bounded
    with open(args.out, "w", encoding="utf-8") as out:
        for engine in args.engines.split(","):
            spec, case = specs[engine], load_case(engine, args.root / engine)
            if case.folder is None:             # an engine without model files (Hibari): no config to break
                continue
            load = LoadRequest("tiny", case.folder, torch.float32, torch.device("cpu"))
            for i, f in enumerate(fields(case.folder)):
                path = case.folder / f.file
                original = path.read_text(encoding="utf-8")
                for value, every, offset in plan:
                    if value == f.value or i % every != offset % every:
                        continue
                    record = {"engine": engine, "file": f.file, "path": f.path, "key": f.key, "value": value}
                    out.write(json.dumps({"start": record}) + "\n")
                    out.flush()
                    path.write_text(edited(original, f, value), encoding="utf-8")
                    start = time.monotonic()
                    try:
                        synthesize(spec.build(load, ModelManager(DeviceService())), case.request)
                        record["outcome"] = "ok"
                    except BaseException as e:   # noqa: BLE001 - every outcome is reported, the parent judges it
                        record["outcome"] = type(e).__name__
                        record["value_error"] = isinstance(e, ValueError)
                        record["message"] = str(e)[:600]
                        record["where"] = "".join(traceback.format_tb(e.__traceback__)[-3:])[-1500:]
                    finally:
                        path.write_text(original, encoding="utf-8")
                    record["seconds"] = round(time.monotonic() - start, 3)
                    out.write(json.dumps({"done": record}) + "\n")
                    out.flush()


if __name__ == "__main__":
    main()
