#!/bin/bash
# By-hand fixture capture on one lent H200 (tests/fixtures/sglang_h200). Wheels: part A in /root/carry-a
# (sglang, trimmed sglang-kernel, flashinfer-python), part B in .gpu/b/whl (docs/gpu-runs.md, 2026-12-01).
set -u
C=/root/cap; mkdir -p $C
test -d /root/carry-a || { echo "COLD MACHINE: part A is missing"; exit 3; }
export PYTHONUNBUFFERED=1
PY=/opt/torch/.venv/bin/python3
T0=$(date +%s)
nvidia-smi > $C/nvidia-smi.txt 2>&1; nvidia-smi topo -m > $C/topo.txt 2>&1; nvidia-smi topo -p2p r > $C/p2p.txt 2>&1
nvidia-smi -L > $C/list.txt 2>&1; nvidia-smi --version > $C/version.txt 2>&1
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,compute_cap,memory.total,driver_version --format=csv > $C/query.csv 2>&1
nproc > $C/nproc.txt; uname -a > $C/uname.txt; ulimit -a > $C/ulimit.txt; cat /proc/self/status | grep -i cpus_allowed > $C/affinity.txt
ls /run/systemd/system > $C/systemd.txt 2>&1; ps -p 1 -o comm= >> $C/systemd.txt
$PY -m pip list --format json > $C/pip-list-image.json 2>/dev/null
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir /root/carry-a/*.whl .gpu/b/whl/*.whl 2>&1 | tail -3
echo "install $(( $(date +%s)-T0 )) s"
$PY -m pip list --format json > $C/pip-list-after.json 2>/dev/null
$PY -m pip check > $C/pip-check.txt 2>&1
S=$($PY -c "import json,sys; sys.path.insert(0,'.gpu/b'); import epforge_smoke_model as m; print(json.dumps(m.DEFAULTS))")
mkdir -p /root/smoke && $PY .gpu/b/epforge_smoke_model.py /root/smoke "$S" > $C/smoke-manifest.json
echo "smoke $(( $(date +%s)-T0 )) s"
$PY -m sglang.launch_server --help > $C/launch-help.txt 2>&1
FLAGS="--attention-backend triton --grammar-backend none --sampling-backend pytorch --enforce-disable-flashinfer-allreduce-fusion"
up() {  # tag, extra flags...
  local tag=$1; shift
  local t=$(date +%s.%N)
  setsid $PY -m sglang.launch_server --model-path /root/smoke --host 127.0.0.1 --port 30000 $FLAGS "$@" > $C/$tag-server.log 2>&1 &
  PID=$!
  for i in $(seq 1 ${MAXI:-1200}); do
    if ! kill -0 $PID 2>/dev/null; then wait $PID; echo "$tag: exited rc=$? after $(awk "BEGIN{print $(date +%s.%N)-$t}") s"; return 1; fi
    if $PY -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:30000/health',timeout=2).status==200 else 1)" 2>/dev/null; then
      echo "$tag: healthy after $(awk "BEGIN{print $(date +%s.%N)-$t}") s"; return 0; fi
    sleep 0.25
  done; echo "$tag: timeout"; return 2
}
down() { kill -TERM -- -$PID 2>/dev/null; for i in $(seq 1 120); do kill -0 $PID 2>/dev/null || break; sleep 0.5; done; kill -KILL -- -$PID 2>/dev/null; sleep 3; }
bench() {  # tag
  $PY -m sglang.bench_serving --backend sglang --base-url http://127.0.0.1:30000 --dataset-name random-ids \
    --tokenizer /root/smoke --random-input-len 128 --random-output-len 64 --random-range-ratio 1.0 \
    --num-prompts 64 --max-concurrency 16 --output-file $C/$1-bench.jsonl > $C/$1-bench-stdout.txt 2>&1
  echo "$1 bench rc=$?"; tail -c 600 $C/$1-bench.jsonl
}
if up tp1-nograph --tp-size 1 --disable-cuda-graph; then
  $PY scripts/gpu/http_capture.py http://127.0.0.1:30000 $C tp1-nograph; bench tp1-nograph; bench tp1-nograph-2
fi
down
if up tp1-graph --tp-size 1 --cuda-graph-max-bs 32; then
  $PY scripts/gpu/http_capture.py http://127.0.0.1:30000 $C tp1-graph; bench tp1-graph
fi
down
echo "=== crash: tp 2 on one GPU"; MAXI=360 up crash-tp2 --tp-size 2 --disable-cuda-graph; down
echo "=== crash: deepep normal, bf16, no deep_ep"; MAXI=360 up crash-deepep-normal --tp-size 1 --ep-size 1 --moe-a2a-backend deepep --deepep-mode normal --disable-cuda-graph; down
echo "total $(( $(date +%s)-T0 )) s"

