#!/usr/bin/env bash
# The GPU hand-off's checks and measurements (issue 46), in one device call of under 10 minutes.
#
# Here, once: bash ../shared/device/prepare.sh   (builds .device-site/)
# There (carry: [".device-site"]):
#   source .device-site/env.sh; bash benchmarks/gpu_check.sh [stage ...]
# Stages, in order of need (default: all): tests frames pong acting ppo pong16
# Each writes under $OUT/gpu/ as it goes, so a run cut short still brings back what it finished.
set -uo pipefail
out=${OUT:-device-results}/gpu
mkdir -p "$out"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(tests frames pong acting ppo pong16)
{
    git rev-parse --short HEAD 2>/dev/null || echo "no git"
    nproc
    python3 --version
    python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
} > "$out/context.txt" 2>&1
bench=(python3 -m vecshm.bench --device cuda --no-floor -q)
# Pong's rows: 64 ALE envs per system are slow to build, so not every host row of the frames runs
pong_rows=("SB3 SubprocVecEnv" "EnvPool" "EnvPool async (batch n/2)" "vecshm ShmVectorEnv + .to(cuda)"
           "vecshm ShmVectorEnv pin_memory + .to(cuda)" "vecshm ShmVectorEnv device=cuda"
           "vecshm ShmVectorEnv pin_memory + NumpyToTorch" "vecshm ShmVectorEnv async (batch n/2) + .to(cuda)"
           "vecshm ShmVectorEnv async (batch n/2) pin_memory + .to(cuda)"
           "vecshm ShmVectorEnv async (batch n/2) device=cuda")
for stage in "${stages[@]}"; do
    start=$(date +%s)
    case "$stage" in
    tests)  # the CUDA tests, and the CPU half beside them
        timeout 200 python3 -m pytest tests/test_cuda.py -q -p no:cacheprovider \
            > "$out/tests.txt" 2>&1 ;;
    frames)  # step + to GPU at 16 and 64 zero-compute frames envs
        timeout 150 "${bench[@]}" -w frames -n 16 64 -r 2 --seconds 1 -o "$out/frames" > "$out/frames.txt" 2>&1 ;;
    pong)
        timeout 200 "${bench[@]}" -w pong -n 64 -r 2 --seconds 1 -s "${pong_rows[@]}" -o "$out/pong" \
            > "$out/pong.txt" 2>&1 ;;
    pong16)
        timeout 100 "${bench[@]}" -w pong -n 16 -r 2 --seconds 1 -s "${pong_rows[@]}" -o "$out/pong16" \
            > "$out/pong16.txt" 2>&1 ;;
    acting)  # the acting loop at 64 envs, batch 32, raw Pong frames: vecshm device=cuda against EnvPool async
        timeout 100 python3 examples/acting_loop.py --n-envs 64 --batch 32 --seconds 5 --rounds 2 --profile \
            > "$out/acting.txt" 2>&1
        # two envs per worker: a batch of 32 spread over 16 workers instead of 8 (docs/gpu.md)
        timeout 100 python3 examples/acting_loop.py --n-envs 64 --batch 32 --seconds 5 --rounds 2 --profile \
            --envs-per-worker 2 > "$out/acting_epw2.txt" 2>&1
        # pipelined (the next batch received while the GPU works), with four batches out
        timeout 100 python3 examples/acting_loop.py --n-envs 64 --batch 16 --seconds 5 --rounds 2 --pipeline --profile \
            > "$out/acting_pipelined.txt" 2>&1 ;;
    ppo)  # CleanRL-style PPO on async batches, both backends
        timeout 120 python3 examples/cleanrl_ppo_atari.py --n-envs 64 --batch 32 --total-timesteps 60000 \
            > "$out/ppo.txt" 2>&1 ;;
    *) echo "unknown stage $stage" >> "$out/context.txt" ;;
    esac
    echo "$stage: rc=$? in $(( $(date +%s) - start )) s" >> "$out/context.txt"
done
cat "$out/context.txt"
