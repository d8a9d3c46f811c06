#!/usr/bin/env bash
# The 16-core measurements issue 11 asks for, in stages that each fit one device call (<10 min).
#
# Here, once: bash ../shared/device/prepare.sh   (builds .device-site/, see ../shared/device/README.md)
# There, one stage per `run` call (carry: [".device-site"]):
#   source .device-site/env.sh; bash benchmarks/device_run.sh pong     # bench: Pong, 64 envs, vs EnvPool
#   source .device-site/env.sh; bash benchmarks/device_run.sh probe    # arrangements: envs per worker x mode
#   source .device-site/env.sh; bash benchmarks/device_run.sh frames   # zero-compute frames, 64 envs
#   source .device-site/env.sh; bash benchmarks/device_run.sh parent   # the balance (vecshm.balance), wake-ups, at 64 envs
#   source .device-site/env.sh; bash benchmarks/device_run.sh train    # SB3 PPO Atari, GPU learner, 16 envs
#   source .device-site/env.sh; bash benchmarks/device_run.sh pong-ab   # Pong, 64 envs: the tree in before/ then this one
#   source .device-site/env.sh; bash benchmarks/device_run.sh multiagent  # Pistonball x16, simple_spread x64, vs SuperSuit
#     (multiagent needs benchmarks/device_multiagent_site.sh run here after prepare.sh; pong-ab a before/
#      folder holding an older vecshm/, e.g. git archive <commit> vecshm | tar -x -C before, carried too)
#     (no OpenCV there: the stage uses the Pillow stand-in in benchmarks/device_cv2/ where cv2 is missing)
# Results go under $OUT (the device tool brings that folder back), one folder per stage, with the
# commit and the machine noted beside them.
set -euo pipefail
stage=${1:?stage: pong, probe, frames, parent, train, pong-ab or multiagent}
out=${OUT:-device-results}/$stage
mkdir -p "$out"
{
    git rev-parse --short HEAD 2>/dev/null || echo "no git"
    nproc
    python3 --version
} > "$out/context.txt"

case "$stage" in
pong)  # the first target: async batch 32 >= 90% of the ideal and >= 1.3x EnvPool async; sync >= 75%
    python3 -m vecshm.bench -w pong -n 64 -s "vecshm ShmVecEnv" "ShmVectorEnv async" \
        EnvPool "EnvPool async (batch n/2)" "SB3 SubprocVecEnv" -r 3 --seconds 2 --no-floor -q -o "$out" ;;
probe)  # does a second worker per core lift async batches (docs/benchmark-notes.md, "What the batch structure alone costs")?
    python3 benchmarks/lab/manycore_probe.py 64 --rounds 2 --seconds 3 \
        --only "epw=default" "async b=32 epw=2" "sync epw=2" "envpool async" --json "$out/probe.json" \
        | tee "$out/probe.txt" ;;
frames)  # overhead at scale, sync and async (the ring lends async batches since the last device run)
    python3 -m vecshm.bench -w frames -n 64 -s "vecshm ShmVecEnv" "vecshm ShmVectorEnv" "ShmVectorEnv async" \
        "SB3 SubprocVecEnv" "Gymnasium AsyncVectorEnv" -r 3 --seconds 1 --no-floor -q -o "$out" ;;
parent)  # does giving the parent a core during async batches help or hurt with 16 cores (calibrated on 2)?
    python3 benchmarks/lab/parent_core.py -n 64 -w frames vector busy40 pong -r 3 --seconds 1 | tee "$out/parent.txt"
    # and how often the parent wakes to a batch still short (the case for coalescing doorbells)
    python3 benchmarks/lab/parent_wakeups.py pong 64 --batch 32 --envs-per-worker 4 2 --seconds 5 | tee "$out/wakeups.txt" ;;
train)  # end to end, the learner on the GPU, reported with the time split
    # SB3's Atari recipe needs OpenCV, which the device lacks and cannot carry (benchmarks/device_cv2/cv2.py)
    if ! python3 -c "import cv2" 2>/dev/null; then
        export PYTHONPATH=$PWD/benchmarks/device_cv2${PYTHONPATH:+:$PYTHONPATH}
        echo "cv2: Pillow stand-in (benchmarks/device_cv2)" >> "$out/context.txt"
    fi
    python3 -m vecshm.bench.train -n 16 -t 16384 -r 2 -s "vecshm ShmVecEnv" "SB3 SubprocVecEnv" \
        | tee "$out/train.txt" ;;
pong-ab)  # a hot-path change at 16 cores: the same bench on the older tree (before/), then on this one
    pong_rows=("vecshm ShmVecEnv" "ShmVectorEnv async" "EnvPool async (batch n/2)")
    PYTHONPATH=$PWD/before:$PYTHONPATH python3 -m vecshm.bench -w pong -n 64 -s "${pong_rows[@]}" -r 3 --seconds 2 \
        --no-floor -q -o "$out/before"
    python3 -m vecshm.bench -w pong -n 64 -s "${pong_rows[@]}" -r 3 --seconds 2 --no-floor -q -o "$out/after" ;;
multiagent)  # PettingZoo's envs as rows at 16 cores: vecshm against SuperSuit in one process and on 16
    python3 -m vecshm.bench -w pistonball -n 16 -r 3 --seconds 2 --no-floor -q -o "$out/pistonball"
    python3 -m vecshm.bench -w simple_spread -n 64 -r 3 --seconds 1 --no-floor -q -o "$out/simple_spread" ;;
*)
    echo "unknown stage $stage (pong, probe, frames, parent, train, pong-ab, multiagent)" >&2
    exit 2 ;;
esac
