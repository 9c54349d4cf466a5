#!/usr/bin/env bash
# A smaller reader distilled from reader v2: LAYERS of its transformer layers (evenly spaced),
# trained on reader v2's data (bench/reader_v2.sh makes the split and the negatives' index)
# with the teacher's span and selection scores as soft targets (DISTILL=0: the gold loss
# alone, the ablation's other arm). One core, one thread, bf16 autocast where native.
# The teacher is a fixed copy of a reader v2 state (TEACHER), so a rerun resumes the same run.
# FIT_BUDGET=1 fits the schedule (warm-up, decay) to MAX_MINUTES: an ablation at a fixed budget;
# LR sets the peak learning rate (default 1e-4), MAX_EXAMPLES a seeded subset of the questions,
# HIDDEN the weight of the layer-wise hidden-state loss (TinyBERT's; default 0, off), EPOCHS
# the passes over the questions (default 2).
#   RUNS=/work/runs TEACHER=/work/runs/v2-5351 LAYERS=3 DISTILL=1 OUT=/work/runs/r3-kd \
#     CORE=1 MAX_MINUTES=20 bash bench/reader_distill.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-/work/runs}
DATA=${DATA:-$(realpath ../shared/data)}
CORE=${CORE:-1}
TEACHER=${TEACHER:?a reader directory to distil from}
LAYERS=${LAYERS:-3}
DISTILL=${DISTILL:-1}
OUT=${OUT:?the student directory to write}
[[ -f $RUNS/split/train.json && -f $RUNS/negpool-bm25/index.json ]] ||
  { echo "run bench/reader_v2.sh first (the split and the negatives' index)" >&2; exit 2; }
SHIFTS=("$DATA"/squadshifts/{new_wiki,amazon_reviews,reddit}_v1.0.json)
FIT=--no-fit-budget
[[ ${FIT_BUDGET:-0} == 0 ]] || FIT=--fit-budget
SUBSET=()
[[ -z ${MAX_EXAMPLES:-} ]] || SUBSET=(--max-examples "$MAX_EXAMPLES")
KD=()
[[ $DISTILL == 0 ]] || KD=(--teacher "$TEACHER" --distill "$DISTILL")
[[ ${HIDDEN:-0} == 0 ]] || KD+=(--hidden-distill "$HIDDEN")
exec env OMP_NUM_THREADS=1 taskset -c "$CORE" anygrain train reader \
  --train "squad:$RUNS/split/train.json" \
  --train "squad:${SHIFTS[0]}" --train "squad:${SHIFTS[1]}" --train "squad:${SHIFTS[2]}" \
  --model "$TEACHER" --layers "$LAYERS" "${KD[@]}" "${SUBSET[@]}" --out "$OUT" \
  --epochs "${EPOCHS:-2}" --batch-size 16 --lr "${LR:-1e-4}" --negatives 2 --selection-bce 1.0 \
  --max-length 256 --micro-batch 8 --freeze-embeddings --bf16 --threads 1 \
  --retriever "$RUNS/negpool-bm25" --checkpoint-every 100 \
  --max-minutes "${MAX_MINUTES:-150}" "$FIT" -q
