#!/usr/bin/env bash
# Reader v2's training run: continues reader-minilm on SQuAD v1.1 train (less its last 20
# articles, held out for choosing settings) and the three SQuAD-Shifts sets, two epochs, two
# BM25 negatives per question (a BM25 index of every training paragraph) and the per-passage
# selection loss. One core, one thread, bf16 autocast where the CPU has it natively.
# Idempotent: the split and the negatives' index are made once, and a rerun resumes from the
# last checkpoint in $RUNS/reader-v2 (MAX_MINUTES per call, then a checkpoint and a reader).
#   RUNS=/work/runs CORE=0 MAX_MINUTES=150 bash bench/reader_v2.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-/work/runs}
DATA=${DATA:-$(realpath ../shared/data)}  # absolute: a resumed run must name the same files
CORE=${CORE:-0}
mkdir -p "$RUNS"
[[ -f $RUNS/split/train.json ]] ||
  python3 bench/squad_holdout.py "$DATA/squad-v1.1/train-v1.1.json" --out "$RUNS/split"
SHIFTS=("$DATA"/squadshifts/{new_wiki,amazon_reviews,reddit}_v1.0.json)
if [[ ! -f $RUNS/negpool-bm25/index.json ]]; then
  python3 - "$RUNS/split/train.json" "${SHIFTS[@]}" "$RUNS/negpool.json" <<'PY'
import json, sys
*sources, out = sys.argv[1:]
articles = [a for s in sources for a in json.load(open(s, encoding="utf-8"))["data"]]
json.dump({"version": "1.1", "data": articles}, open(out, "w", encoding="utf-8"))
PY
  taskset -c "$CORE" anygrain index "squad:$RUNS/negpool.json" --kind bm25 --out "$RUNS/negpool-bm25" -q
fi
exec env OMP_NUM_THREADS=1 taskset -c "$CORE" anygrain train reader \
  --train "squad:$RUNS/split/train.json" \
  --train "squad:${SHIFTS[0]}" --train "squad:${SHIFTS[1]}" --train "squad:${SHIFTS[2]}" \
  --model reader-minilm --out "$RUNS/reader-v2" \
  --epochs 2 --batch-size 16 --lr 1e-4 --negatives 2 --selection-bce 1.0 \
  --max-length 256 --micro-batch 8 --freeze-embeddings --bf16 --threads 1 \
  --retriever "$RUNS/negpool-bm25" --checkpoint-every 100 \
  --max-minutes "${MAX_MINUTES:-150}" --no-fit-budget -q
