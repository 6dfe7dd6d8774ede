#!/usr/bin/env bash
# Proves the CUDA paths on this machine's GPU and measures it, in parts that fit short GPU loans; a
# summary comes last.
#
#   bash scripts/check_gpu.sh smoke  [MULTI30K_DIR] [OUT_DIR]   # 0. about 1 minute: does it run at all
#   bash scripts/check_gpu.sh speed  [MULTI30K_DIR] [OUT_DIR]   # 1. about 6 minutes, 8 at most
#   bash scripts/check_gpu.sh compile [MULTI30K_DIR] [OUT_DIR]  # 1b. 5 minutes at most
#   bash scripts/check_gpu.sh result [MULTI30K_DIR] [OUT_DIR]   # 2. MINUTES (default 10) + about 2
#   bash scripts/check_gpu.sh extra  [MULTI30K_DIR] [OUT_DIR]   # 3-4. about 5 minutes, after 2
#   (defaults: ../shared/data/multi30k outputs/check_gpu)
#
# Run it with its output going to a file, not through `| tail`: a command stopped by a time limit
# takes its whole pipeline with it, and nothing it printed comes back (2026-11-27: a 9-minute GPU
# loan ended that way with no figure at all). Start a loan with `smoke`.
# 0. smoke: the small model for a few updates (bench_train.py) and tests/test_device_queue.py
# 1. speed: scripts/bench_train.py on the GPU, bf16: small, base and big at 8k and 32k-token batches in
#    one process (tokens/s, MFU, GPU busy fraction, kernels and host read-backs per update, the host's
#    busiest operators, batch making); fp16 with its grad scaler once -> bench_*.json; then the CUDA
#    tests -> cuda_tests.log
# 1b. compile: the small model with compile=true (compiling outlasted 100 s on the H100's host);
#    COMPILE_MODE=reduce-overhead for CUDA graphs
# 2. a result: scripts/reproduce.py multi30k_en_de_gpu for MINUTES minutes -> reproduce.json
#    (PUBLISH=1 adds --publish: results/ and docs/results.md get its row)
# 3. torchrun --nproc_per_node=1 on NCCL: a run stopped at update 20 and resumed equals one that was
#    not (deterministic=true), bit for bit -> ddp.log
# 4. translation on the GPU of part 2's run: PyTorch fp32/bf16/fp16, CTranslate2 fp32/int8, beam 5
#    -> bench_translate_gpu.json
# Needs the dev extra and a CUDA build of torch. A step that fails is reported and the others still run.
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:?usage: check_gpu.sh smoke|speed|compile|result|extra [MULTI30K_DIR] [OUT_DIR]}
data=$(realpath "${2:-../shared/data/multi30k}")
out=$(realpath -m "${3:-outputs/check_gpu}")
minutes=${MINUTES:-10}
mkdir -p "$out"
summary="$out/summary_$part.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

smoke() {
    timeout 120 python scripts/bench_train.py --device cuda --data-dir "$data" --threads 4 --warmup 2 --steps 5 \
        --precision bf16 --set log_every=5 --runs small:8192 --report "$out/bench_train_gpu_smoke.json" \
        >/dev/null 2>"$out/bench_train_gpu_smoke.log"
    note "bench smoke: rc=$?"
    python scripts/gpu_summary.py "$out/bench_train_gpu_smoke.json" | tee -a "$summary"
    timeout 60 python -m pytest -q --tb=short -p no:cacheprovider tests/test_device_queue.py >"$out/smoke_tests.log" 2>&1
    note "smoke tests: rc=$? $(tail -n 1 "$out/smoke_tests.log")"
}

speed() {
    local common=(--device cuda --data-dir "$data" --threads 4 --warmup 5 --steps 20 --set log_every=20)
    # --report rewrites the JSON after every row, so a process stopped at its limit keeps its rows.
    # The targets' rows first (2026-11-27 on an H100: about 35 s a row for small and base, with the
    # profiler's passes; big did not finish inside 150 s after four rows).
    timeout 240 python scripts/bench_train.py "${common[@]}" --precision bf16 \
        --runs small:8192,base:32768,small:32768,base:8192,big:32768,big:8192 \
        --report "$out/bench_train_gpu_bf16.json" >/dev/null 2>"$out/bench_train_gpu_bf16.log"
    note "bench bf16: rc=$?"
    timeout 60 python scripts/bench_train.py "${common[@]}" --precision fp16 --runs base:32768 \
        --report "$out/bench_train_gpu_fp16.json" >/dev/null 2>"$out/bench_train_gpu_fp16.log"
    note "bench fp16: rc=$?"
    python scripts/gpu_summary.py "$out"/bench_train_gpu_*.json | tee -a "$summary"
    # The GPU's own tests, with their tracebacks: a suite stopped by a time limit prints none.
    timeout 150 python -m pytest -q --tb=short -p no:cacheprovider tests/test_cuda.py tests/test_precision_compile.py \
        tests/test_device.py tests/test_device_queue.py >"$out/cuda_tests.log" 2>&1
    note "CUDA tests: rc=$? $(tail -n 1 "$out/cuda_tests.log")"
    grep -E "^(FAILED|ERROR)" "$out/cuda_tests.log" | tee -a "$summary"
}

compile() {
    timeout 280 python scripts/bench_train.py --device cuda --data-dir "$data" --threads 4 --warmup 5 --steps 20 \
        --set log_every=20 --set compile_mode="${COMPILE_MODE:-default}" --precision bf16 --compile --runs small:8192 \
        --report "$out/bench_train_gpu_compile.json" >/dev/null 2>"$out/bench_train_gpu_compile.log"
    note "bench bf16 compile: rc=$?"
    python scripts/gpu_summary.py "$out/bench_train_gpu_compile.json" | tee -a "$summary"
}

result() {
    timeout $((${minutes%.*} * 60 + 300)) python scripts/reproduce.py multi30k_en_de_gpu --data-dir "$data" \
        --minutes "$minutes" --run-dir "$out/reproduce" ${PUBLISH:+--publish} \
        >"$out/reproduce.json" 2>"$out/reproduce.log"
    note "reproduce ($minutes min): rc=$? $(tail -n 3 "$out/reproduce.log" | tr '\n' ' ')"
    python scripts/gpu_summary.py "$out/reproduce.json" | tee -a "$summary"
}

ddp() { # ddp <run dir> <max_steps> [resume]
    torchrun --standalone --nproc_per_node=1 -m seq2seq.cli.train data.task_train_size=2000 batch_tokens=1024 \
        deterministic=true device=cuda progress=false attention_images=false save_every=10 valid_every=20 \
        max_steps="$2" "hydra.run.dir=$1" ${3:+resume=$1} >>"$out/ddp.log" 2>&1
}

extra() {
    # 3. torchrun with NCCL, stopped and resumed
    rm -rf "$out/ddp_straight" "$out/ddp_resumed"
    ddp "$out/ddp_straight" 40 && ddp "$out/ddp_resumed" 20 && ddp "$out/ddp_resumed" 40 resume
    note "torchrun nproc 1 (NCCL): rc=$? $(python scripts/gpu_summary.py --ddp "$out" 2>&1 | tail -n 1)"
    # 4. translation on the GPU
    timeout 600 python scripts/bench_translate_gpu.py --run "$out/reproduce" --input "$data/test_2016_flickr.en.gz" \
        --reference "$data/test_2016_flickr.de.gz" >"$out/bench_translate_gpu.json" 2>"$out/bench_translate_gpu.log"
    note "translate: rc=$?"
    python scripts/gpu_summary.py "$out/bench_translate_gpu.json" | tee -a "$summary"
}

python -c "import torch; assert torch.cuda.is_available(), 'PyTorch sees no CUDA GPU'" || exit 1
note "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader) torch $(python -c 'import torch; print(torch.__version__)')"
"$part"
echo "== summary ($summary)"
cat "$summary"
