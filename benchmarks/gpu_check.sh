#!/usr/bin/env bash
# The GPU check: one script, at most about 8 minutes on one GPU, one JSON report.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]          (default: results/gpu-check)
#
# 1. installs the project with its GPU extra (pip install -e '.[gpu]', flash-attn); on a machine
#    without network put wheels (flash-attn, pinned transformers, ...) in $WHEELS: they are
#    installed from there and nothing is fetched; whether flash-attn imports is reported;
# 2. tests/test_attention_backends.py on cuda (SPEC_LIB_TEST_DEVICE=cuda): SDPA and FlexAttention
#    give the same logits for every call kind, and identical greedy decodes;
# 3. benchmarks/gpu_exactness.py: greedy identity of every schedule with generate in float32
#    and bfloat16 (divergences with their logit gaps), first-token sampling law with a negative
#    control, SDPA vs FlexAttention logits and time per call layout;
# 4. benchmarks/decode_overhead.py on cuda (non-model share of each schedule, ar vs generate);
# 5. report.json: versions, the GPU, each step's exit status and seconds, and the numbers.
# Without a GPU (CPU_ONLY=1, or no GPU found) it runs steps 3-4 at tiny sizes on the CPU, so the
# script itself can be checked anywhere.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/gpu-check}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
LOG="$OUT/log.txt"
: > "$LOG"
declare -A STATUS SECONDS_TAKEN

step() {   # step NAME COMMAND...: run, log, record exit status and time; never stop the script
  local name=$1; shift
  local start=$SECONDS
  echo "=== $name: $*" | tee -a "$LOG"
  "$@" >> "$LOG" 2>&1
  STATUS[$name]=$?
  SECONDS_TAKEN[$name]=$((SECONDS - start))
  echo "=== $name: exit ${STATUS[$name]} in ${SECONDS_TAKEN[$name]} s" | tee -a "$LOG"
}

if [ "${CPU_ONLY:-0}" = 1 ] || ! $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  # hidden 128 / 4 heads: FlexAttention on CPU needs head_dim >= 32; 1000 samples give the chi-square 21 cells
  DEVICE=cpu; SIZE=(--hidden 128 --layers 1 --vocab 64 --prompts 2 --new-tokens 8 --samples 1000 --cache-len 16 --repeats 2)
  OVERHEAD=(--hidden 32 --layers 1 --vocab 64 --prompts 2 --new-tokens 16 --repeats 2)
else
  DEVICE=cuda; SIZE=(); OVERHEAD=(--prompts 8 --new-tokens 128 --repeats 5)
fi

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"           # the project, installed or not
if [ -n "${WHEELS:-}" ]; then                                  # offline: the extra and pinned deps as wheels
  step wheels $PY -m pip install -q --no-index --no-deps "$WHEELS"/*.whl
  step install $PY -m pip install -q --no-index --no-build-isolation --no-deps -e .
else
  step install $PY -m pip install -q --no-build-isolation -e '.[gpu]'
fi
$PY -c "import flash_attn" 2>/dev/null && FLASH=true || FLASH=false
export SPEC_LIB_TEST_DEVICE=$DEVICE
step tests $PY -m pytest -q -p no:cacheprovider tests/test_attention_backends.py
step exactness $PY benchmarks/gpu_exactness.py --device $DEVICE "${SIZE[@]}" --out "$OUT/exactness.json"
step overhead $PY benchmarks/decode_overhead.py --device $DEVICE "${OVERHEAD[@]}" --out "$OUT/overhead.json"

steps_json=$(for name in wheels install tests exactness overhead; do
  printf '"%s": {"exit": %s, "seconds": %s},' "$name" "${STATUS[$name]:-null}" "${SECONDS_TAKEN[$name]:-null}"
done)
$PY - "$OUT" "$DEVICE" "$FLASH" "{${steps_json%,}}" <<'EOF'
import json, pathlib, platform, sys
import torch, transformers
out, device, flash, steps = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "true", json.loads(sys.argv[4])
report = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__,
          "cuda": torch.version.cuda, "transformers": transformers.__version__, "python": platform.python_version(),
          "flash_attn_installed": flash, "steps": steps}
for name in ("exactness", "overhead"):
    path = out / f"{name}.json"
    report[name] = json.loads(path.read_text()) if path.exists() else None
(out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
print(f"wrote {out / 'report.json'}")
EOF
failed=0
for name in tests exactness overhead; do [ "${STATUS[$name]:-1}" = 0 ] || failed=1; done
exit $failed
