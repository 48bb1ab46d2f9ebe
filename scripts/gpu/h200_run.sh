#!/bin/bash
# epforge's playbooks on the lent one-GPU H200 (device tool kind nvidia-h200), as an air-gapped host that is
# its own controller. Stages run in the order given, e.g.
#   bash scripts/gpu/h200_run.sh setup provision reprovision serve-nograph collect
# Needs the carry .gpu/carry.tar.xz (scripts/gpu/make_carry.sh: every wheel the image lacks, written --stored
# and packed as one tar.xz, carried by the call that runs setup). docs/gpu-runs.md has the calls.
# Output: $OUT/h200-*.tgz (stage collect). Stage tune-start leaves the tune running in its own session (it
# outlives the call) and tune-wait follows it from a later call of the same warm machine; stage background does
# the same for any stages (BG="stop sbs tune"), followed by stage wait.
# A later call finds the same machine only if it starts within the idle release (30 s); on 2026-12-05 a
# call's answer came back 2 min 51 s after it ended and the background went with the machine: plan each call
# to stand alone (setup, provision, a stage) unless a call is known to come back at once.
set -u
REPO=$PWD
PY=/opt/torch/.venv/bin/python3
# Not $OUT: on the lent machine $OUT is /root/out and is emptied before every call, which would take the
# files of work running on in the background with it (2026-12-03). Stage collect packs this folder into $OUT.
O=/root/epforge-out
mkdir -p $O
export ANSIBLE_CONFIG=$REPO/ansible.cfg ANSIBLE_FORCE_COLOR=0 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
# No registry here: every pip run (roles without the wheelhouse role too) installs from the carried wheels.
export PIP_NO_INDEX=1 PIP_FIND_LINKS=/root/wheelhouse
INV=(-i scripts/gpu/h200-inventory.yml -e @/root/stack-h200.json)
T0=$(date +%s)
stamp() { echo "=== $(date -u +%H:%M:%S) +$(( $(date +%s) - T0 )) s: $*"; }
play() {  # name, ansible-playbook args... (a name used before in this folder gets -2, -3, ...: a stage run
  # twice, e.g. reprovision to show changed=0, keeps both outputs)
  local name=$1; shift
  local base=$name n=2
  while [ -e $O/play-$name.txt ]; do name=$base-$n; n=$((n + 1)); done
  stamp "playbook $name: $*"
  local t=$(date +%s)
  $PY -m ansible.cli.playbook "${INV[@]}" "$@" > $O/play-$name.txt 2>&1
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t )) s" | tee -a $O/plays.txt
  grep -E "^(PLAY RECAP|h200 )|FAILED|fatal|summary|^ok:.*msg|Step " $O/play-$name.txt | tail -25
  return $rc
}
for stage in "$@"; do
  case $stage in
  setup)
    stamp setup
    test -f .gpu/carry.tar.xz || { echo "no carry: .gpu/carry.tar.xz is missing"; exit 3; }
    mkdir -p /root/wheelhouse /root/carry && tar -xJf .gpu/carry.tar.xz -C /root/carry && cp -n /root/carry/whl/*.whl /root/wheelhouse/
    ls /root/wheelhouse | wc -l
    $PY -c "import ansible" 2>/dev/null || $PY -m pip install -q --no-index --find-links /root/wheelhouse ansible-core==2.19.14
    # The stack as written, with the lent GPU's arch (sm_90) instead of the target users' 12.0.
    $PY -c "import json,yaml; s=yaml.safe_load(open('stacks/cu130-torch211.yml'))['epforge_stack_spec']; s['arch_list']=['9.0']; json.dump({'epforge_stack_spec': s}, open('/root/stack-h200.json','w'))"
    nvidia-smi --query-gpu=index,name,compute_cap,memory.used --format=csv > $O/gpu.csv
    command -v ninja > $O/ninja-where.txt 2>&1; ls -la /opt/torch/.venv/bin/ninja >> $O/ninja-where.txt 2>&1
    ;;
  provision) play provision playbooks/provision.yml ;;
  reprovision) play reprovision playbooks/provision.yml ;;
  serve-nograph) play serve-nograph playbooks/serve.yml playbooks/benchmark.yml playbooks/summary.yml ;;
  serve-graph) play serve-graph -e @scripts/gpu/h200-server-graph.yml playbooks/serve.yml playbooks/benchmark.yml \
                 playbooks/summary.yml ;;
  old-provision|old-serve)  # the same stage from an older commit's tree (gpu-old/, git archive of OLD_REF, sent
    # untracked with the call), so that this tree's code meets the state an older release left on a real host
    # (sent packed as gpu-old.tar.xz: the call's 64 MiB hold the carry, this tree and little more)
    if [ ! -d gpu-old ] && [ -f gpu-old.tar.xz ]; then mkdir gpu-old && tar -xJf gpu-old.tar.xz -C gpu-old; fi
    test -d gpu-old || { echo "no gpu-old/ tree"; exit 3; }
    stamp "$stage from gpu-old ($(cat gpu-old/.ref 2>/dev/null))"
    old_stage=provision; [ $stage = old-serve ] && old_stage=serve-nograph
    (cd gpu-old && bash scripts/gpu/h200_run.sh $old_stage | sed 's/^/  old: /')
    ;;
  serve-again) play serve-again playbooks/serve.yml playbooks/benchmark.yml playbooks/summary.yml
    grep -cE "TASK \[(Launch and verify|Stop the server that ran before)" $O/play-serve-again.txt | sed 's/^/launch or stop tasks: /'
    grep -E "restarted|started in|already running|kept" $O/play-serve-again.txt | head -5 ;;
  sweep-gsp)  # sweep-new's shared-prefix configuration alone (a lease too short for the whole sweep)
    $PY -c "import json,yaml; s=yaml.safe_load(open('scripts/gpu/h200-sweep-new.yml'))['sglang_benchmark_sweep']; json.dump({'sglang_benchmark_sweep': [c for c in s if c['name'] == 'graphs-32-shared-prefix']}, open('/root/sweep-gsp.json', 'w'))"
    play sweep-gsp -e @/root/sweep-gsp.json playbooks/sweep.yml ;;
  tune-two)  # two candidates in a journal folder of their own (the noise-aware tie rule on a real tune)
    play tune-two -e @scripts/gpu/h200-tune.yml -e @scripts/gpu/h200-tune-stray.yml \
      -e tuner_journal_dir=/var/lib/epforge/tuning-two playbooks/tune.yml ;;
  tune-two-rerun)  # the same tune on the same journal: launches nothing, changed=0 is the aim
    play tune-two-rerun -e @scripts/gpu/h200-tune.yml -e @scripts/gpu/h200-tune-stray.yml \
      -e tuner_journal_dir=/var/lib/epforge/tuning-two playbooks/tune.yml ;;
  bench-only) play bench-only playbooks/benchmark.yml ;;
  bench-cold)  # the first benchmark after a launch against the next ones (2026-12-05: 3478.8 then 5753.4
    # output tok/s on one process; again on an H100 the same day, 3455.3 then 5329.8): GPU clocks, power and
    # throttle reasons every 2 s and the host's top every 5 s beside a launch and three benchmarks
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,temperature.gpu \
      --format=csv -l 2 > $O/gpu-samples.csv 2>&1 &
    smi=$!
    # a field of its own: older drivers name it clocks_throttle_reasons, and one unknown field stops the query
    nvidia-smi --query-gpu=timestamp,clocks_event_reasons.active --format=csv -l 2 > $O/gpu-reasons.csv 2>&1 &
    smi="$smi $!"
    (top -b -d 5 -n 120 -w 200 | grep -A14 "^top -") > $O/top.txt 2>&1 &
    tops=$!
    play serve-cold playbooks/serve.yml playbooks/benchmark.yml
    play bench-only playbooks/benchmark.yml
    play bench-only playbooks/benchmark.yml
    kill $smi $tops 2>/dev/null; pkill -x top 2>/dev/null
    grep -h "DONE  sglang_benchmark" $O/play-serve-cold.txt $O/play-bench-only*.txt ;;
  rerun-graph) play rerun-graph -e @scripts/gpu/h200-server-graph.yml playbooks/serve.yml ;;
  stop) play stop -e sglang_server_state=stopped playbooks/serve.yml ;;
  sweep) play sweep -e @scripts/gpu/h200-sweep.yml playbooks/sweep.yml ;;
  sweep-new) play sweep-new -e @scripts/gpu/h200-sweep-new.yml playbooks/sweep.yml ;;
  tune-start)  # the tune in a session of its own: it outlives this call; tune-wait follows it
    stamp tune-start
    setsid nohup bash scripts/gpu/h200_run.sh tune > $O/tune-driver.txt 2>&1 < /dev/null &
    echo "tune started (pid $!)"
    ;;
  background)  # the stages named in BG (e.g. BG="stop sbs tune") in a session of their own: they outlive this
    # call, and a later call of the same warm machine follows them with stage wait
    stamp "background: ${BG:-}"
    rm -f $O/bg-done.txt
    setsid nohup bash -c "bash scripts/gpu/h200_run.sh ${BG:-}; echo \"background rc=\$?\" > $O/bg-done.txt" \
      > $O/bg-driver.txt 2>&1 < /dev/null &
    echo "background started (pid $!)"
    ;;
  wait)  # until the background stages end or WAIT_S (default 540) pass
    stamp "wait (at most ${WAIT_S:-540} s)"
    # A machine that started no background stages is a bare one: the lease's machine went back (idle release
    # 30 s) and took the work with it. Waiting would spend the budget on nothing (2026-12-04, second lease:
    # 560 s); end the call at once and say so.
    if [ ! -f $O/bg-driver.txt ]; then
      echo "no background stages on this machine: a bare machine (the one that ran them went back)"; exit 4
    fi
    end=$(( $(date +%s) + ${WAIT_S:-540} ))
    while [ ! -f $O/bg-done.txt ] && [ $(date +%s) -lt $end ]; do sleep 5; done
    cat $O/bg-done.txt 2>/dev/null || echo "background still running"
    cat $O/plays.txt 2>/dev/null; tail -3 $O/side-by-side.txt 2>/dev/null; tail -8 /var/log/epforge/tune.log 2>/dev/null
    ;;
  tune) play tune -e @scripts/gpu/h200-tune.yml playbooks/tune.yml; echo "tune rc=$?" > $O/tune-done.txt ;;
  tune-rerun)  # the same tune on the same journal: a finished tune launches nothing and leaves its winner serving
    # (2026-12-04, third lease: it relaunched, the budget counting candidates only; filter tune_spent since)
    play tune-rerun -e @scripts/gpu/h200-tune.yml playbooks/tune.yml
    grep -cE "TASK \[(Launch and verify|Stop the server that ran before)" $O/play-tune-rerun.txt | sed 's/^/launch or stop tasks: /' ;;
  tune-again)  # the same tune again (issue 36 stage 2: the same winner or a declared tie), in a journal folder of
    # its own so that the first tune's finished journal is not simply replayed; this host's epforge_tuning fact
    # (the first decision) orders the plan, as a user's rerun would. LEASE_END (epoch seconds) bounds it: no
    # candidate or relaunch round starts later than AGAIN_SLACK_S (default 150: the winner's launch) before it.
    budget=${AGAIN_BUDGET_S:-660}
    if [ -n "${LEASE_END:-}" ]; then budget=$(( LEASE_END - $(date +%s) - ${AGAIN_SLACK_S:-150} )); fi
    stamp "tune-again, budget $budget s"
    play tune-again -e @scripts/gpu/h200-tune.yml -e tuner_journal_dir=/var/lib/epforge/tuning-again \
      -e tuner_budget_s=$budget playbooks/tune.yml; echo "tune-again rc=$?" > $O/tune-again-done.txt ;;
  tune-wait)  # until the tune ends or WAIT_S (default 540) pass
    stamp tune-wait
    if [ ! -f $O/tune-driver.txt ]; then
      echo "no tune on this machine: a bare machine (the one that ran it went back)"; exit 4
    fi
    end=$(( $(date +%s) + ${WAIT_S:-540} ))
    while [ ! -f $O/tune-done.txt ] && [ $(date +%s) -lt $end ]; do sleep 5; done
    cat $O/tune-done.txt 2>/dev/null || echo "tune still running"
    tail -5 /var/log/epforge/tune.log 2>/dev/null
    ;;
  sbs)  # 1024 prompts: runs of about 10 s (256 gave 2-3 s runs that spread 15-25 %, 2026-12-03); hand-env
    # isolates the module's environment from its launcher. A tune leaves its winner serving on the port the
    # side-by-side needs (2026-12-04, third lease: refused at once), so the server is stopped first.
    play stop-before-sbs -e sglang_server_state=stopped playbooks/serve.yml
    stamp side-by-side
    $PY bench/side_by_side.py --python $PY --model /opt/epforge/models/smoke-qwen3-moe --user sglang \
      --runs 3 --warmups 1 --num-prompts ${SBS_PROMPTS:-1024} --input-len 256 --output-len 128 --concurrency 64 \
      --variants ${SBS_VARIANTS:-hand,module,hand-env,module-root} --workdir /root/sbs --json $O/side-by-side.json -- \
      --attention-backend triton --grammar-backend none --sampling-backend pytorch \
      --enforce-disable-flashinfer-allreduce-fusion > $O/side-by-side.txt 2>&1
    echo "sbs rc=$?"; grep -v '^ ' $O/side-by-side.txt | tail -8
    ;;
  collect)
    stamp collect
    mkdir -p $O/facts/h200 $O/logs
    cp /etc/ansible/facts.d/*.fact $O/facts/h200/ 2>/dev/null
    cp -r /var/log/epforge/. $O/logs/ 2>/dev/null
    cp /root/sbs/*.log $O/logs/ 2>/dev/null
    cp ~/.cache/epforge/wheelhouse.log $O/logs/ 2>/dev/null
    cp /var/lib/epforge/server-jit-*.json $O/ 2>/dev/null
    cp -r /var/lib/epforge/tuning /var/lib/epforge/tuning-again /var/lib/epforge/tuning-stray /var/lib/epforge/tuning-two $O/ 2>/dev/null
    tar czf $OUT/h200-$(date +%H%M%S).tgz -C /root epforge-out
    ls -la $OUT
    ;;
  stray)  # issue 36 stage 3: a stray process takes GPU memory after the first candidate of a two-candidate tune
    # (journal folder of its own); the second candidate's clean slate waits tuner_gpu_memory_wait_s, then fails
    # gpu_memory_not_released with its figures, and the tune decides among those measured
    stamp stray
    rm -rf /var/lib/epforge/tuning-stray
    setsid nohup $PY scripts/gpu/gpu_stray.py --after /var/lib/epforge/tuning-stray/bench/steady-c16-r3.last.jsonl \
      --gib 16 --hold-s 300 > $O/stray.txt 2>&1 < /dev/null &
    stray_pid=$!
    play tune-stray -e @scripts/gpu/h200-tune.yml -e @scripts/gpu/h200-tune-stray.yml playbooks/tune.yml
    echo "tune-stray rc=$?"; kill $stray_pid 2>/dev/null; cat $O/stray.txt
    grep -h -A3 gpu_memory_not_released $O/play-tune-stray.txt | head -12 ;;
  *)  # a stage written during a lease: scripts/gpu/stages/NAME.sh, sent with a later call of the same machine
    if [ -f scripts/gpu/stages/$stage.sh ]; then stamp "stage script $stage"; bash scripts/gpu/stages/$stage.sh
    else echo "unknown stage $stage"; exit 2; fi ;;
  esac
done
stamp done
