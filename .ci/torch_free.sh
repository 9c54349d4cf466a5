#!/usr/bin/env bash
# CI, after the --dev suite: the base install (./install.sh: no torch, no transformers) end to
# end, in a fresh virtual environment with an empty graph cache (the shipped graphs rebuilt
# with NumPy, as on a user's first run).  Every command runs on the shipped models over a small
# corpus written here; what only torch does is refused in one line naming the extra.  Each
# step prints one line; any failure stops the script with the command's output.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=$(mktemp -d "${TMPDIR:-/tmp}/anygrain-torch-free.XXXXXX")
SERVER=""
cleanup() {
  if [[ -n "$SERVER" ]]; then
    kill "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

EXTRA="pip install 'anygrain[train]'"
LOG=$WORK/last.log
ok() { echo "ok (${SECONDS}s): $*"; }
die() {
  echo "FAILED: $*" >&2
  if [[ -s "$LOG" ]]; then
    echo "--- output of the last command:" >&2
    tail -n 40 "$LOG" >&2
  fi
  exit 1
}
# run WHAT CMD...: CMD must succeed (bounded: a command that hangs fails)
run() {
  local what=$1
  shift
  timeout 300 "$@" >"$LOG" 2>&1 || die "$what (exit $?): $*"
}
# refused WHAT CMD...: CMD must fail with one error line naming the train extra, no traceback
refused() {
  local what=$1 rc=0
  shift
  timeout 120 "$@" >"$LOG" 2>&1 || rc=$?
  [[ $rc -ne 0 ]] || die "$what was not refused: $*"
  [[ $rc -ne 124 ]] || die "$what ran on instead of being refused: $*"
  ! grep -q "Traceback" "$LOG" || die "$what crashed with a traceback: $*"
  local errors
  errors=$(grep "^error: " "$LOG" || true)
  [[ $(grep -c . <<<"$errors") -eq 1 ]] && grep -qF "$EXTRA" <<<"$errors" ||
    die "$what: not one error line naming $EXTRA: $*"
  ok "refused in one line naming the train extra: $what"
}

VENV=$WORK/venv
PY=$VENV/bin/python
AG=$VENV/bin/anygrain
python3 -m venv "$VENV"
PYTHON=$PY ./install.sh >"$LOG" 2>&1 || die "./install.sh into a fresh venv"
ok "./install.sh (the base install) in a fresh venv"
for m in torch transformers; do
  if "$PY" -c "import $m" 2>/dev/null; then die "$m is importable in the base install"; fi
done
ok "torch and transformers are not importable"
run "anygrain --help" "$AG" --help
ok "anygrain --help"

# pip keeps its own cache (the mcp step below); anygrain gets an empty one: the shipped graphs
# are rebuilt from their weights with NumPy, as on a user's first run
PIP_ENV=(env -u XDG_CACHE_HOME)
[[ -z "${XDG_CACHE_HOME:-}" ]] || PIP_ENV=(env XDG_CACHE_HOME="$XDG_CACHE_HOME")
export XDG_CACHE_HOME=$WORK/cache
D=$WORK/data
mkdir -p "$D"
cd "$WORK"

# --- the demo, twice: a few reference topics (all of them take minutes to index, and the
# reuse is the same), the first run building the index, the second reusing it
DEMO=(demo --out "$WORK/demo" --max-documents 3 -q)
# the last JSON line: the demo's summary
last_json() { "$PY" -c "import json, sys; print(json.loads([l for l in open(sys.argv[1]) if l.startswith('{')][-1])$1)" "$LOG"; }
reused() { last_json '["reused_index"]'; }
run "first demo" "$AG" "${DEMO[@]}"
[[ $(reused) == False ]] || die "the first demo reused an index"
[[ $(last_json '["metrics"].get("answer_f1") is not None') == True ]] ||
  die "the demo did not read (no answer grain)"
ok "demo: built its phrase index and answered (the reader too)"
run "second demo" "$AG" "${DEMO[@]}"
[[ $(reused) == True ]] && grep -q "reusing the demo index" "$LOG" ||
  die "the second demo did not reuse the index"
ok "demo again: reused the index"

# --- a small English corpus and questions about it
cat >"$D/docs.jsonl" <<'EOF'
{"id": "football", "title": "Super Bowl 50", "text": "The Denver Broncos represented the AFC at Super Bowl 50. They defeated the Carolina Panthers 24 to 10.\n\nSuper Bowl 50 was played at Levi's Stadium in Santa Clara, California, on February 7, 2016."}
{"id": "python", "title": "Python loops", "text": "The break statement in Python exits the nearest enclosing for or while loop.\n\nThe continue statement skips the rest of the loop body and goes on with the next iteration."}
{"id": "curie", "title": "Marie Curie", "text": "Marie Curie was a physicist and chemist who conducted pioneering research on radioactivity. She was the first woman to win a Nobel Prize.\n\nCurie won Nobel Prizes in two sciences: physics in 1903 and chemistry in 1911."}
EOF
cat >"$D/more.jsonl" <<'EOF'
{"id": "franklin", "title": "Rosalind Franklin", "text": "Rosalind Franklin took the X-ray image of DNA known as Photo 51."}
EOF
"$PY" - "$D/docs.jsonl" "$D/questions.json" <<'EOF'
import json, sys

docs = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
asked = {
    "football": ("Which team represented the AFC at Super Bowl 50?", "Denver Broncos"),
    "python": ("Which statement exits the nearest enclosing loop?", "break"),
    "curie": ("Who was the first woman to win a Nobel Prize?", "Marie Curie"),
}
data = []
for d in docs:
    q, a = asked[d["id"]]
    context = next(p for p in d["text"].split("\n\n") if a in p)
    qa = {"id": d["id"], "question": q, "answers": [{"text": a, "answer_start": context.index(a)}]}
    data.append({"title": d["title"], "paragraphs": [{"context": context, "qas": [qa]}]})
json.dump({"version": "1.1", "data": data}, open(sys.argv[2], "w", encoding="utf-8"))
EOF
Q="Who was the first woman to win a Nobel Prize?"

# --- indexes
BM25=$WORK/bm25
PHRASE=$WORK/phrase
run "bm25 index" "$AG" index "$D/docs.jsonl" --out "$BM25" --kind bm25 --split paragraph -q
ok "index --kind bm25"
run "phrase index" "$AG" index "$D/docs.jsonl" --out "$PHRASE" --kind phrase --split paragraph -q
ok "index --kind phrase (the shipped phrase model on its graphs)"
refused "index --kind dense" "$AG" index "$D/docs.jsonl" --out "$WORK/dense" --kind dense -q
[[ ! -e "$WORK/dense" ]] || die "the refused dense build left $WORK/dense"

# --- search at every grain: the first hit must hold the answer
# first_hit UNIT FIELD WANT: the first JSON hit in the log is at UNIT and FIELD holds WANT
first_hit() {
  "$PY" - "$1" "$2" "$3" "$LOG" <<'EOF' || die "search --unit $1: the first hit's $2 is not $3"
import json, sys

unit, field, want, log = sys.argv[1:]
hit = json.loads(next(line for line in open(log) if line.startswith("{")))
assert hit["unit"] == unit and want in str(hit[field]), hit
EOF
}
for unit in phrase sentence passage document answer; do
  run "search --unit $unit" "$AG" search "$PHRASE" "$Q" --unit "$unit" --json -k 3
  case $unit in
  phrase | answer) first_hit "$unit" answer "Marie Curie" ;;
  *) first_hit "$unit" doc_id curie ;;
  esac
  ok "search --unit $unit: the answer first"
done
run "bm25 search" "$AG" search "$BM25" "$Q" --json -k 3
first_hit passage doc_id curie
run "bm25 search --unit answer" "$AG" search "$BM25" "$Q" --unit answer --json -k 3
first_hit answer answer "Marie Curie"
ok "search a bm25 index (passages, and the reader's answer)"

# --- evaluation
run "eval" "$AG" eval "$PHRASE" --questions "$D/questions.json" --json -q
[[ $(last_json '["metrics"]["top@1"] > 0') == True ]] || die "eval: no question found"
ok "eval (phrase grain: em, f1, top@k)"
run "eval-reader" "$AG" eval-reader "$PHRASE" --questions "$D/questions.json" -k 2 --json -q
[[ $(last_json '["f1"] > 0') == True ]] || die "eval-reader: F1 0"
ok "eval-reader (the shipped reader end to end)"

# --- serve: one request, then stop it
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
"$AG" serve "$PHRASE" --host 127.0.0.1 --port "$PORT" --threads 1 --log-level warning >"$WORK/serve.log" 2>&1 &
SERVER=$!
"$PY" - "$PORT" "$Q" <<'EOF' >"$LOG" 2>&1 || { cat "$WORK/serve.log" >>"$LOG"; die "serve: no answer on port $PORT"; }
import json, sys, time, urllib.parse, urllib.request

port, q = sys.argv[1:]
url = f"http://127.0.0.1:{port}/search?" + urllib.parse.urlencode({"q": q, "unit": "phrase", "k": 3})
deadline = time.monotonic() + 180
while True:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            hits = json.load(r)["hits"]
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(1)
assert "Marie Curie" in json.dumps(hits[0]), hits
EOF
kill "$SERVER"
wait "$SERVER" 2>/dev/null || true
SERVER=""
ok "serve: GET /search answered, server stopped"

# --- mcp: the SDK is the mcp extra; it must not bring torch
run "pip install the mcp extra" "${PIP_ENV[@]}" "$PY" -m pip install -q -e "$ROOT[mcp]"
for m in torch transformers; do
  if "$PY" -c "import $m" 2>/dev/null; then die "the mcp extra brought $m"; fi
done
run "mcp over stdio" "$PY" - "$AG" "$PHRASE" "$Q" <<'EOF'
import asyncio, json, sys

import mcp

ag, index, q = sys.argv[1:]
params = mcp.StdioServerParameters(command=ag, args=["mcp", index, "--threads", "1"])
major = int(__import__("importlib.metadata").metadata.version("mcp").split(".")[0])


async def call():
    if major >= 2:
        async with mcp.Client(params, read_timeout_seconds=120) as c:
            r = await c.call_tool("search", {"query": q, "k": 1})
            return r.is_error, r.structured_content
    async with mcp.stdio_client(params) as (read, write), mcp.ClientSession(read, write) as c:
        await c.initialize()
        r = await c.call_tool("search", {"query": q, "k": 1})
        return r.isError, r.structuredContent


error, out = asyncio.run(asyncio.wait_for(call(), 240))
assert not error and "Marie Curie" in json.dumps(out), out
EOF
ok "mcp: one search tool call over stdio (the mcp extra, no torch)"

# --- maintenance
run "add" "$AG" add "$PHRASE" "$D/more.jsonl" -q
run "search after add" "$AG" search "$PHRASE" "Who took Photo 51?" --json -k 1
first_hit phrase answer "Rosalind Franklin"
ok "add: the new document encoded on the passage graph and found"
run "delete" "$AG" delete "$PHRASE" --doc curie
run "search after delete" "$AG" search "$PHRASE" "$Q" --unit passage --json -k 5
grep -q '"doc_id": ' "$LOG" || die "delete: no hit left at all"
! grep -q '"doc_id": "curie"' "$LOG" || die "delete: a deleted document was still returned"
ok "delete: the document is no longer returned"
run "verify" "$AG" verify "$PHRASE"
ok "verify: every file matches its checksum"

# --- what needs torch, each refused in one line
refused "train phrase" "$AG" train phrase --train "$D/questions.json" --out "$WORK/m"
refused "train reader" "$AG" train reader --train "$D/questions.json" --out "$WORK/m"
refused "train dpr" "$AG" train dpr --train "$D/questions.json" --out "$WORK/m"
refused "train phrase-query-side" "$AG" train phrase-query-side "$PHRASE" --train "$D/questions.json" --out "$WORK/m"
refused "pack" "$AG" pack "$PHRASE" --out "$WORK/m"
refused "search --runtime torch" "$AG" search "$PHRASE" "$Q" --runtime torch
refused "search --rescore-bf16" "$AG" search "$PHRASE" "$Q" --rescore 2 --rescore-bf16
refused "search --device cuda" "$AG" search "$PHRASE" "$Q" --device cuda
refused "eval --runtime torch" "$AG" eval "$PHRASE" --questions "$D/questions.json" --runtime torch
refused "eval-reader --bf16" "$AG" eval-reader "$PHRASE" --questions "$D/questions.json" --bf16
refused "index --kind hybrid" "$AG" index "$D/docs.jsonl" --out "$WORK/m" --kind hybrid -q
refused "index --bf16" "$AG" index "$D/docs.jsonl" --out "$WORK/m" --kind phrase --bf16 -q
refused "index --runtime torch" "$AG" index "$D/docs.jsonl" --out "$WORK/m" --kind phrase --runtime torch -q
refused "add --runtime torch" "$AG" add "$PHRASE" "$D/more.jsonl" --runtime torch -q
refused "demo --kind dense" "$AG" demo --out "$WORK/m" --kind dense --max-documents 1 -q
refused "serve --question-bf16" "$AG" serve "$PHRASE" --port "$(free_port)" --question-bf16
[[ ! -e "$WORK/m" ]] || die "a refused command wrote $WORK/m"
echo "torch-free install: all checks passed"
