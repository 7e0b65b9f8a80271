#!/usr/bin/env bash
# Wheels for bench/gpu.py's peer arms on a GPU machine that has torch but no network (Python 3.12,
# manylinux x86_64): diffusers and accelerate, plus every dependency of theirs (walked through each
# wheel's Requires-Dist, extras and markers that do not apply to CPython 3.12 on Linux skipped) that
# is not already installed there. Saved into .whl/ at the repository root (ignored through
# .git/info/exclude, not .gitignore: the folder is how this workplace's device tool carries wheels,
# not part of the project). Replaces older versions of the same projects in .whl/ (pip refuses two).
#
#     bash bench/gpu_wheels.sh               # then carry .whl to the GPU machine; see bench/README.md
#
# Environment: PYTHON (default python3, any Python with pip), WHL_DIR (default .whl), PRESENT
# (space-separated project names already on the GPU machine; the default is what its image holds).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
WHL_DIR=${WHL_DIR:-.whl}
# What the bench was written against (diffusers 0.42's apply_group_offloading signature; accelerate 1.x).
WANT=("diffusers==0.42.1" "accelerate==1.15.0")
# On the GPU machine's image already (its package list), so never carried. The accelerate there is the
# same 1.15.0 today; it is carried anyway so the arm does not depend on the image's version.
PRESENT=${PRESENT:-"torch numpy packaging psutil pyyaml huggingface-hub safetensors filelock requests regex pillow
httpx httpcore h11 anyio idna certifi charset-normalizer urllib3 tqdm fsspec typing-extensions zipp hf-xet
shellingham typer click rich markdown-it-py mdurl pygments jinja2 markupsafe sympy mpmath networkx setuptools
triton"}

PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

exclude=$(git rev-parse --git-path info/exclude 2>/dev/null || true)
if [ -n "$exclude" ] && ! grep -qxF '/.whl/' "$exclude" 2>/dev/null; then
    mkdir -p "$(dirname "$exclude")"
    echo '/.whl/' >> "$exclude"
    echo "added /.whl/ to $exclude"
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

fetch() {  # one requirement, no dependencies, into the staging folder
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${PLATFORMS[@]}" -d "$stage" "$1"
}

for req in "${WANT[@]}"; do
    fetch "$req"
done

# Walk Requires-Dist until every dependency is either present on the GPU machine or downloaded.
while :; do
    missing=$("$PYTHON" - "$stage" "$PRESENT" <<'EOF'
import re, sys, zipfile
from pathlib import Path
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement

norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
stage, present = Path(sys.argv[1]), {norm(n) for n in sys.argv[2].split()}
env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux", "os_name": "posix",
       "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
       "platform_python_implementation": "CPython", "extra": ""}
printed = stage / "printed.txt"  # each wheel's Requires-Dist is shown once
shown = set(printed.read_text().split()) if printed.exists() else set()
have, needed = set(), {}
for whl in sorted(stage.glob("*.whl")):
    have.add(norm(whl.name.split("-")[0]))
    show = whl.name not in shown
    shown.add(whl.name)
    with zipfile.ZipFile(whl) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        for line in z.read(meta).decode().splitlines():
            if not line.startswith("Requires-Dist:"):
                continue
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is not None and not req.marker.evaluate(env):
                continue  # an extra, or another Python/platform
            if show:
                print(f"  {whl.name}: {line}", file=sys.stderr)
            if norm(req.name) not in present:
                needed[norm(req.name)] = f"{req.name}{req.specifier}"
printed.write_text("\n".join(sorted(shown)))
for name, spec in needed.items():
    if name not in have:
        print(spec)
EOF
)
    [ -z "$missing" ] && break
    while IFS= read -r req; do
        echo "dependency not on the GPU machine: $req"
        fetch "$req"
    done <<< "$missing"
done

mkdir -p "$WHL_DIR"
for whl in "$stage"/*.whl; do
    name=$(basename "$whl" | cut -d- -f1)
    # one version of each project: drop older ones of the same name
    find "$WHL_DIR" -maxdepth 1 -iname "${name}-*.whl" ! -name "$(basename "$whl")" -print -delete
    cp "$whl" "$WHL_DIR/"
done
echo "wheels in $WHL_DIR for the peer arms:"
for whl in "$stage"/*.whl; do
    echo "  $(basename "$whl") ($(du -k "$whl" | cut -f1) KB)"
done
