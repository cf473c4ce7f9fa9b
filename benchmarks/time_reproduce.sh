#!/usr/bin/env bash
# Time `make reproduce` on a fresh clone of this repository's HEAD, environment set-up included.
#
#   bash benchmarks/time_reproduce.sh [PROFILE] [CLONE_DIR]     (defaults: cpu, a new temporary folder)
#
# Clones HEAD into CLONE_DIR, runs `make reproduce PROFILE=...` there (log: CLONE_DIR/reproduce.log)
# and writes CLONE_DIR/results/PROFILE/reproduce_time.json: the commit, the profile, the wall
# seconds of the whole command, the sum of the notebooks' own run times of that run
# (results/PROFILE/run_times.json), when it ran and on how many cores.  The clone's results/ and
# figures/ are then the regenerated results: copy them back to commit them
# (rsync -a CLONE_DIR/results/ results/ && rsync -a CLONE_DIR/figures/ figures/), then
# `python -m spec_lib.notebook.readme` restates the README, which shows the measured time.
# Keep the machine otherwise idle while it runs: the notebooks time decoding.
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE="${1:-cpu}"
CLONE="${2:-$(mktemp -d)/repro}"
if [ -e "$CLONE" ] && [ -n "$(ls -A "$CLONE" 2>/dev/null)" ]; then
  echo "CLONE_DIR $CLONE exists and is not empty: give a new folder" >&2
  exit 2
fi
COMMIT="$(git rev-parse HEAD)"
git clone --quiet "$(pwd)" "$CLONE"
git -C "$CLONE" checkout --quiet "$COMMIT"
STARTED="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
START=$(date +%s)
set +e
make -C "$CLONE" reproduce PROFILE="$PROFILE" > "$CLONE/reproduce.log" 2>&1
STATUS=$?
set -e
SECONDS_TAKEN=$(( $(date +%s) - START ))
python3 - "$CLONE" "$PROFILE" "$COMMIT" "$STARTED" "$SECONDS_TAKEN" "$STATUS" <<'EOF'
import json, os, sys
from pathlib import Path

clone, profile, commit, started, seconds, status = sys.argv[1:]
times_file = Path(clone) / "results" / profile / "run_times.json"
times = json.loads(times_file.read_text()) if times_file.is_file() else {}
record = {"commit": commit, "profile": profile, "command": "make reproduce (fresh clone, .venv created)",
          "started": started, "seconds": int(seconds), "exit_status": int(status),
          "notebook_seconds": round(sum(times.values()), 1), "notebooks": len(times), "cpu_count": os.cpu_count()}
out = Path(clone) / "results" / profile / "reproduce_time.json"
out.parent.mkdir(parents=True, exist_ok=True)
tmp = out.with_suffix(".tmp")
tmp.write_text(json.dumps(record, indent=1) + "\n")
tmp.replace(out)
print(json.dumps(record))
EOF
echo "clone: $CLONE (log: $CLONE/reproduce.log)"
exit "$STATUS"
