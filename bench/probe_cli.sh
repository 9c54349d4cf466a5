#!/usr/bin/env bash
# A probe of the CLI as a new user and a hostile one would drive it: each case either runs
# (ok) or is refused (err); a traceback, a hang (120 s), or exit 0 where a refusal belongs is
# BAD. Writes its own corpus, questions and indexes in a temporary folder; prints one line a
# case and "cases N bad M" (exit 1 when M > 0).
#   OMP_NUM_THREADS=1 taskset -c 1 bash bench/probe_cli.sh
set -uo pipefail
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT; cd "$W"
cat > corpus.txt <<'TXT'
The Denver Broncos represented the AFC at Super Bowl 50. They defeated the Carolina Panthers 24 to 10.

The break statement in Python exits the nearest enclosing for or while loop.

Marie Curie was a physicist and chemist who conducted pioneering research on radioactivity.
TXT
python3 - <<'PY'
import json
ctx = [c.strip() for c in open("corpus.txt").read().split("\n\n")]
qa = [("Who represented the AFC?", "Denver Broncos"), ("What exits a loop?", "break statement"),
      ("Who researched radioactivity?", "Marie Curie")]
paras = [{"context": c, "qas": [{"id": f"q{i}", "question": q, "answers": [{"text": a, "answer_start": c.index(a)}]}]}
         for i, (c, (q, a)) in enumerate(zip(ctx, qa))]
json.dump({"version": "1.1", "data": [{"title": "T", "paragraphs": paras}]}, open("q.json", "w"))
PY
anygrain index corpus.txt --kind bm25 --out bm -q >/dev/null 2>&1
anygrain index corpus.txt --kind phrase --out ph -q >/dev/null 2>&1
n=0; bad=0
c() { # expect: ok|err ; args...
  local want=$1; shift; n=$((n+1))
  out=$(timeout 120 "$@" 2>&1); rc=$?
  local verdict=good
  if grep -q "Traceback" <<<"$out"; then verdict="BAD(traceback)"; fi
  if [[ $rc == 124 ]]; then verdict="BAD(hang)"; fi
  if [[ $want == err && $rc == 0 ]]; then verdict="BAD(exit 0)"; fi
  if [[ $want == ok && $rc != 0 ]]; then verdict="BAD(rc $rc)"; fi
  [[ $verdict != good ]] && bad=$((bad+1))
  echo "$verdict rc=$rc :: $* :: $(tail -1 <<<"$out" | cut -c1-150)"
}
DEEP=$(python3 -c "import json;f={'year':1}
for _ in range(300): f={'\$not':f}
print(json.dumps(f))")
c err anygrain search bm "Who?" --filter "$DEEP"
c err anygrain search ph "Who?" --filter "$DEEP"
c err anygrain eval bm --questions squad:q.json --unit answer
c err anygrain eval-reader bm --questions squad:q.json -k 0
c err anygrain eval-reader bm --questions squad:q.json -k 3 --at 0
c err anygrain eval-reader bm --questions squad:q.json -k 3 --at 5
c err anygrain eval-reader bm --questions squad:q.json -k 3 --at x
c ok anygrain eval-reader --corpus squad:q.json --questions squad:q.json --gold-passage --json -q
c ok anygrain search bm "Who represented the AFC?" --read 3 --runtime onnx
c err anygrain search bm "Who?" -k 0
c err anygrain search bm "Who?" -k -3
c err anygrain search bm "Who?" --read 0
c err anygrain search bm "Who?" --unit nonsense
c err anygrain search nonexistent "Who?"
c err anygrain index nonexistent.txt --out x1
c err anygrain index corpus.txt --out bm --kind bm25
c err anygrain index corpus.txt --out x2 --kind nonsense
c err anygrain search bm "Who?" --filter '{"year": {"$bogus": 1}}'
c err anygrain search bm "Who?" --filter 'not json'
ln -sf loop loop 2>/dev/null
c err anygrain index corpus.txt --out loop
c err anygrain attach-sparse loop --from bm
c err anygrain delete bm --doc no-such-doc
c err anygrain add bm nonexistent.txt
c ok anygrain verify bm
c err anygrain train reader --train squad:q.json --out r1 --batch-size 0
c err anygrain train reader --train squad:q.json --out r1 --selection-bce -1
c err anygrain search ph "Who?" --rescore 2 --rescore-context -5
c err anygrain serve nonexistent
c err anygrain mcp nonexistent
printf '\xff\xfe bad utf8\n' > bad.txt
c err anygrain index bad.txt --out x3
: > empty.txt
c err anygrain index empty.txt --out x4
c err anygrain search bm ""
c ok anygrain search bm "$(printf 'caf\xc3\xa9')" -k 1
c err anygrain search bm "$(printf 'abc\xff')" -k 1
c ok anygrain search ph "Who represented the AFC?" --unit answer -k 1
c err anygrain search ph "Who?" --unit answer --reader bm
c err anygrain eval bm --questions squad:corpus.txt
c err anygrain eval bm --questions nosuch:q.json
c err anygrain compact nonexistent
echo "cases $n bad $bad"; [[ $bad == 0 ]]
