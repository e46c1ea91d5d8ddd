#!/usr/bin/env bash
# Run the test suite while two CPU-burning processes load the machine, to find timing
# dependencies before CI does. Usage: tests/stress.sh [RUNS] [pytest args...]
# Each run's duration and result is printed; the exit code is non-zero if any run failed.
set -uo pipefail
cd "$(dirname "$0")/.."

runs="${1:-1}"
shift || true
burners=()
cleanup() { for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null; done; }
trap cleanup EXIT INT TERM
for _ in 1 2; do
    python3 -c "while True: pass" &
    burners+=("$!")
done

failed=0
for run in $(seq 1 "$runs"); do
    started=$(date +%s)
    python -m pytest -q "$@"
    code=$?
    echo "stress run $run/$runs: exit $code in $(( $(date +%s) - started )) s (load: $(cut -d' ' -f1-3 /proc/loadavg))"
    [ "$code" -eq 0 ] || failed=1
done
exit "$failed"
