#!/usr/bin/env bash
# Run dvc stages one at a time, in the order given (default: every stage in dvc.yaml's order), appending
# "stage <TAB> wall seconds <TAB> exit status <TAB> end time (UTC) <TAB> ran|cached" per stage to $LOG (default
# docs/pipeline_times.tsv); stops at the first failure. A stage that is up to date takes a second and is logged
# "cached", so the same call resumes an interrupted reproduction; `python benchmarks/pipeline_times.py --log $LOG`
# sums the stages' last runs.
#   benchmarks/repro_timed.sh                      # the whole pipeline
#   benchmarks/repro_timed.sh sft table1@coda-0    # chosen stages (their dependencies must be up to date)
#   COMMIT=1 benchmarks/repro_timed.sh ...         # also commit each stage that ran: dvc.lock and its git-tracked
#                                                  # outputs (records/, metrics/, figures/, ...), only those paths
set -uo pipefail
cd "$(dirname "$0")/.."
export DVC_NO_ANALYTICS=1 PATH="$PWD/.venv/bin:$PATH"
LOG="${LOG:-docs/pipeline_times.tsv}"
stages=("$@")
if [ ${#stages[@]} -eq 0 ]; then
    mapfile -t stages < <(dvc stage list --name-only)
fi
for st in "${stages[@]}"; do
    t0=$(date +%s)
    out=$(mktemp)
    dvc repro -s "$st" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    how=cached
    grep -q "^Running stage" "$out" && how=ran
    rm -f "$out"
    secs=$(( $(date +%s) - t0 ))
    printf '%s\t%s\t%s\t%s\t%s\n' "$st" "$secs" "$rc" "$(date -u +%FT%TZ)" "$how" >> "$LOG"
    [ $rc -eq 0 ] || { echo "stage $st failed (exit $rc)" >&2; exit $rc; }
    if [ -n "${COMMIT:-}" ] && [ "$how" = ran ]; then
        paths=()
        for p in dvc.lock "$LOG" records metrics figures notebooks/executed runs/sft/policy runs/sft_b/policy \
                 runs/regime_b/sft/policy runs/regime_b/sft_b/policy; do
            { [ -e "$p" ] || git ls-files --error-unmatch "$p" >/dev/null 2>&1; } && paths+=("$p")
        done
        git add -A -- "${paths[@]}" && git commit -q -m "Pipeline: $st done ($secs s)" -- "${paths[@]}" ||
            echo "nothing to commit for $st" >&2
    fi
done
