# Several compiled bundles on one GPU, each run by its own launch.sh on its own loopback Ray head (sourced by
# benchmarks/offline/run_h200_megatron.sh and benchmarks/offline/run_h200_sglang.sh).
#
# A RUN is LABEL=BUNDLE[,OVERRIDE...]: .rl/bundles/BUNDLE/launch.sh with the OVERRIDEs appended (launch.sh passes
# "$@" to verl after its own overrides); RUN>>RUN is a lane, its runs one after the other (a stop and a resume).
# Settings (environment): RL_TAG, RL_DIR, PORT_BASE keep two run sets on one machine apart (own folder, ports and
# Ray temp dirs); RUN_TIMEOUT_S per run, STAGGER_S between lane starts, RL_GPU (one index, or several: 0,1,2,3)
# and RL_NUM_GPUS (how many of them each run's Ray head offers; default 1); RL_EXTRA (an array) is appended to every
# run. Logs, checkpoint listings and summarize.py's tables land in the run folder.

rl_one_run() {  # DIR PORT LABEL=BUNDLE[,OVERRIDE...]
  local dir=$1 p=$2 run=$3 label rest bundle start parts
  label=${run%%=*}; rest=${run#*=}; IFS=, read -r -a parts <<< "$rest"; bundle=${parts[0]}
  start=$(date +%s)
  # Worker ports stay below the next run's head ports (+500 for the next run of a lane, +1000 for the next lane).
  python3 -m ray.scripts.scripts start --head --node-ip-address=127.0.0.1 --port="$p" \
    --ray-client-server-port=$((p + 1)) --dashboard-agent-listen-port=$((p + 2)) \
    --dashboard-agent-grpc-port=$((p + 3)) --metrics-export-port=$((p + 4)) --node-manager-port=$((p + 5)) \
    --object-manager-port=$((p + 6)) --runtime-env-agent-port=$((p + 7)) --min-worker-port=$((p + 100)) \
    --max-worker-port=$((p + 450)) --include-dashboard=false --num-gpus="${RL_NUM_GPUS:-1}" --num-cpus=16 \
    --temp-dir="/tmp/ray-$RL_TAG$label" --disable-usage-stats > "$dir/ray-head-$label.log" 2>&1
  CUDA_VISIBLE_DEVICES=${RL_GPU:-0} RAY_ADDRESS="127.0.0.1:$p" timeout "${RUN_TIMEOUT_S:-420}" \
    bash ".rl/bundles/$bundle/launch.sh" "${parts[@]:1}" "${RL_EXTRA[@]}" > "$dir/$label.log" 2>&1
  echo "$label: bundle=$bundle rc=$? $(( $(date +%s) - start ))s" | tee -a "$dir/summary.txt"
  # only this run's head: 'ray stop' would stop every Ray process on the machine, the other runs' too
  # (Ray's monitor and GCS outlive SIGTERM for a while: KILL what is left after a grace period)
  pkill -f -- "/tmp/ray-$RL_TAG$label/" > /dev/null 2>&1
  sleep 5
  pkill -KILL -f -- "/tmp/ray-$RL_TAG$label/" > /dev/null 2>&1
  cp -r "/tmp/ray-$RL_TAG$label/session_latest/logs" "$dir/ray-logs-$label" 2> /dev/null
}

rl_lanes() {  # DIR LANE...: every lane at once, then the checkpoint listing, errors and tables; DIR/DONE last
  local dir=$1 i=0 lane
  shift
  for lane in "$@"; do
    (
      local j=0 run
      while IFS= read -r run; do
        [[ -n $run ]] && rl_one_run "$dir" $((PORT_BASE + 1000 * i + 500 * j)) "$run"
        j=$((j + 1))
      done < <(printf '%s\n' "${lane//>>/$'\n'}")
    ) &
    i=$((i + 1))
    sleep "${STAGGER_S:-20}"
  done
  sleep 30; nvidia-smi --query-gpu=memory.used,memory.total --format=csv > "$dir/gpu-mem.txt" 2>&1
  wait
  { ls -lR /tmp/fp8spec-rl/checkpoints 2>&1 | head -n 300; du -sh /tmp/fp8spec-rl/checkpoints/* 2>&1; } \
    > "$dir/checkpoints.txt"
  for f in "$dir"/*.log; do
    echo "== $f"; grep -E "Traceback|Error|error:" "$f" | grep -v -E "Warning|warn" | cut -c1-300 | tail -n 6
  done > "$dir/errors.txt"
  python3 -m benchmarks.rl_run.summarize "$dir" --json "$dir/summary.json" > "$dir/tables.md" 2>&1
  touch "$dir/DONE"
}

rl_pack() {  # DIR: DIR's logs into $OUT/rl$RL_TAG.tgz (what comes back from the device)
  rm -rf "$OUT/rl$RL_TAG" && cp -r "$1" "$OUT/rl$RL_TAG" && rm -f "$OUT/rl$RL_TAG/DONE"
  tar czf "$OUT/rl$RL_TAG.tgz" -C "$OUT" "rl$RL_TAG" && rm -rf "${OUT:?}/rl$RL_TAG"
}

rl_foreground() {  # SCRIPT RUN...: SCRIPT's rl-body in this call, logs back in $OUT/rl$RL_TAG.tgz
  local script=$1
  shift
  bash "$script" rl-body "$OUT/rl-fg" "$@"
  cat "$OUT/rl-fg/errors.txt" "$OUT/rl-fg/tables.md"
  rl_pack "$OUT/rl-fg" && rm -rf "$OUT/rl-fg"
}

rl_start() {  # SCRIPT RUN...: SCRIPT's rl-body detached (it survives the call while the machine stays warm)
  local script=$1
  shift
  rm -rf "$RL_DIR" && mkdir -p "$RL_DIR"
  setsid nohup bash "$script" rl-body "$RL_DIR" "$@" > "$RL_DIR/driver.log" 2>&1 < /dev/null &
  echo "rl-start: $# lanes started"
}

rl_wait() {  # SECONDS: wait for rl_start's runs; then (or when out of time) bring back what is there
  for _ in $(seq "${1:-500}"); do [[ -f $RL_DIR/DONE ]] && break; sleep 1; done
  grep -h -o -E "step:[0-9]+ - " "$RL_DIR"/*.log 2> /dev/null | sort | uniq -c | tail -n 20
  cat "$RL_DIR/summary.txt" 2> /dev/null
  if [[ -f $RL_DIR/DONE ]]; then
    cat "$RL_DIR/errors.txt" "$RL_DIR/tables.md"
    rl_pack "$RL_DIR"
  else
    echo "rl-wait: still running"; tail -n 3 "$RL_DIR"/*.log 2> /dev/null | cut -c1-200
  fi
}
