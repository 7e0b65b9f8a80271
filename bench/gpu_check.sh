#!/usr/bin/env bash
# The GPU check (issue 21), one command on a fresh GPU machine with no network, from the repository root:
#
#   bash bench/gpu_check.sh [--device cuda|cpu] [--budget SECONDS] [--install pip|link]
#
# 1. makes the pack importable as `mizuoto` without its dependencies or the network: `pip install
#    --no-deps --no-build-isolation --no-index -e .` (default on cuda), falling back to (or, with
#    `--install link`, the default on cpu, only) a `mizuoto` link to this checkout on PYTHONPATH;
# 2. the environment (Python, torch, CUDA, cuDNN, the GPU, its driver), the pack's import from
#    another folder, and whether cudaHostRegister works here (runtime/pinning.py on a 4 MB tensor,
#    then a copy and a kernel, so that an error a failed registration left pending shows up);
# 3. pytest -m gpu (tests/test_runtime_cuda.py: the GPU twins and the GPU-only tests), then
#    `python -m mizuoto verify --device cuda:0` on the embedded voice where hibari-tts is installed;
# 4. bench/gpu.py --quick, then the full bench/gpu.py with --deadline set to what is left of the budget.
# Everything goes to $OUT (default ./out/gpu-check): summary.txt, pytest.txt, gpu-check.log and the
# bench's tables (gpu-cuda-quick.txt/.json, gpu-cuda.txt/.json). The budget (default 520 s) keeps
# the whole check under 9 minutes; a device call for it needs timeout_s of about 570.
#
# --device cpu is the dry run that the default test suite runs (tests/test_bench_gpu.py): the same
# steps on the CPU, with the GPU tests collected, not run (their simulated-device twins run in the
# suite itself), the quick bench on one model and two arms, and the full bench only named.
set -uo pipefail
cd "$(dirname "$0")/.."

DEVICE=cuda
BUDGET=520
INSTALL=
while [ $# -gt 0 ]; do
    case "$1" in
        --device) DEVICE=$2; shift 2 ;;
        --budget) BUDGET=$2; shift 2 ;;
        --install) INSTALL=$2; shift 2 ;;
        -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$DEVICE" in cuda|cpu) ;; *) echo "gpu_check.sh: --device cuda or cpu" >&2; exit 2 ;; esac
[ -n "$INSTALL" ] || { [ "$DEVICE" = cuda ] && INSTALL=pip || INSTALL=link; }
OUT=${OUT:-$PWD/out/gpu-check}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export OUT PYTHONUNBUFFERED=1
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
START=$SECONDS

note() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $(( BUDGET - (SECONDS - START) )); }

step() {  # step NAME SECONDS COMMAND...: run with a time limit, record its status and duration
    local name=$1 limit=$2 t0=$SECONDS rc
    shift 2
    echo "== $name (limit ${limit}s)"
    timeout --kill-after=10 "$limit" "$@"
    rc=$?
    note "$(printf '%-24s %s in %ds' "$name:" "$([ $rc = 0 ] && echo ok || echo "FAILED (exit $rc)")" $((SECONDS - t0)))"
    return $rc
}

# The environment, the pack's import from another folder, whether cudaHostRegister works here.
PROBE='
import platform, subprocess, sys
import torch
print(f"python {platform.python_version()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"cuDNN {torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"GPU: {torch.cuda.get_device_name(0)}, {p.total_memory / 2**30:.1f} GiB, "
          f"{torch.cuda.device_count()} device(s)")
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        print(f"driver {smi.stdout.strip() or smi.stderr.strip()}")
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"driver: nvidia-smi unavailable ({e})")
elif sys.argv[1] == "cuda":
    sys.exit("torch sees no CUDA device: run with --device cpu for the dry run")
import mizuoto.runtime
from mizuoto.runtime.pinning import PinBudget
print(f"mizuoto imports from {mizuoto.__path__[0]}")
if not torch.cuda.is_available():
    print("cudaHostRegister:        n/a (no CUDA device)")
else:
    try:  # reported, not fatal: the tests and the bench run in their own processes
        budget = PinBudget(1 << 30, allowance=lambda: None)
        budget.serve("cuda")
        host = torch.ones(4 << 20, dtype=torch.uint8)
        pinned = budget.pin(host)
        device = torch.empty_like(host, device="cuda")
        device.copy_(pinned, non_blocking=True)
        # A kernel: raises if a failed registration left an error pending.
        copied = "ok" if bool((device == 1).all()) else "FAILED (wrong values)"
        if pinned is host and host.is_pinned():
            print(f"cudaHostRegister:        works (4 MB registered in place; copy {copied})")
        else:
            print(f"cudaHostRegister:        unavailable here; pinned copies instead (copy {copied}, "
                  f"no pending CUDA error)")
    except Exception as e:
        print(f"cudaHostRegister:        FAILED: {type(e).__name__}: {e}")
'

main() {
    note "mizuoto GPU check: device $DEVICE, budget ${BUDGET}s, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    local site
    site=$(mktemp -d)
    if [ "$INSTALL" = pip ] && "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e . \
            > "$site/pip.log" 2>&1; then
        note "install:                 pip install --no-deps -e . (editable)"
    else
        [ "$INSTALL" = pip ] && { cat "$site/pip.log"; note "install:                 pip failed; a link instead"; }
        ln -s "$PWD" "$site/mizuoto"
        export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
        note "install:                 link $site/mizuoto -> $PWD on PYTHONPATH"
    fi
    (cd / && "$PY" -c "$PROBE" "$DEVICE") 2>&1 | tee -a "$SUMMARY"
    [ "${PIPESTATUS[0]}" = 0 ] || { note "environment:             FAILED"; return 1; }

    if [ "$DEVICE" = cuda ]; then
        step "pytest -m gpu" 240 "$PY" -m pytest -c pyproject.toml --rootdir=tests -p no:cacheprovider -q -rs \
            -m gpu tests/test_runtime_cuda.py 2>&1 | tee "$OUT/pytest.txt"
        if "$PY" -c "import hibari, psutil, soxr" 2>/dev/null; then
            step "verify --device cuda:0" 120 "$PY" -m mizuoto verify --device cuda:0 --json "$OUT/verify-cuda.json"
        else
            note "verify --device cuda:0:  skipped: the embedded voice's package (hibari-tts) or a dependency is missing"
        fi
        step "bench --quick" 150 "$PY" bench/gpu.py --quick --deadline 140
        local deadline=$(( $(left) - 15 ))
        if [ "$deadline" -gt 60 ]; then
            step "bench (full)" $((deadline + 20)) "$PY" bench/gpu.py --deadline "$deadline"
        else
            note "bench (full):            skipped: only $(left)s of the budget left"
        fi
    else
        step "pytest -m gpu (collect)" 60 "$PY" -m pytest -c pyproject.toml --rootdir=tests -p no:cacheprovider \
            -q --collect-only -m gpu tests/test_runtime_cuda.py 2>&1 | tee "$OUT/pytest.txt"
        step "bench --quick" 120 "$PY" bench/gpu.py --quick --device cpu --models dit --arms ours0 --threads 1 \
            --bandwidth-mb 8
        note "bench (full):            dry run: not run (would be: bench/gpu.py --deadline $(( $(left) - 15 )))"
    fi
    note "total:                   $((SECONDS - START))s of ${BUDGET}s"
}

main 2>&1 | tee "$OUT/gpu-check.log"
status=${PIPESTATUS[0]}
grep -q "FAILED" "$SUMMARY" && status=1
exit "$status"
