#!/usr/bin/env bash
# Proves the CUDA paths on this machine's GPU and measures them, in parts that each end within 5 minutes,
# so any part fits a short GPU loan and a loan's limit never takes more than the part it stopped.
#
#   bash scripts/check_gpu.sh PART [MULTI30K_DIR] [OUT_DIR]
#   smoke    about 1 minute: a few updates of the small model, the device-queue tests
#   speed    the training bench, bf16: small and base at 8k and 32k tokens, eager; fp16 once
#   big      the training bench, bf16: big at 32k and 8k tokens
#   compile  the small model compiled (COMPILE_MODE=reduce-overhead for CUDA graphs)
#   tests    the CUDA tests
#   result   scripts/reproduce.py multi30k_en_de_gpu for MINUTES (default 3; 7 at most in one 10-minute call);
#            its reproduce.json is published back home by scripts/publish_result.py
#   extra    torchrun on NCCL stopped and resumed; translation speed of result's run
#   (defaults: ../shared/data/multi30k outputs/check_gpu)
#
# Every step writes its own JSON and log into OUT_DIR as it goes (the benches rewrite their JSON after
# each row), and the part's summary_PART.txt gets a line per step as it ends: nothing goes through a
# pipe, so a part stopped by a time limit still leaves everything it measured. Run dirs go to
# /tmp/check_gpu_runs, so OUT_DIR holds only the few files a GPU loan sends back.
# On a bare GPU machine: `source scripts/gpu_env.sh` first (scripts/prepare_gpu_copy.py made its copy).
#
# DEVICE=cpu is the dry run: every part's every command, with the tiny model on a few sentences, on the
# CPU (tests/test_check_gpu.py runs it), so a typo costs no GPU time.
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:?usage: check_gpu.sh smoke|speed|big|compile|tests|result|extra [MULTI30K_DIR] [OUT_DIR]}
data=$(realpath "${2:-../shared/data/multi30k}")
out=$(realpath -m "${3:-outputs/check_gpu}")
runs=${RUNS_DIR:-/tmp/check_gpu_runs}
minutes=${MINUTES:-3}
device=${DEVICE:-cuda}
mkdir -p "$out" "$runs"
summary="$out/summary_$part.txt"
: >"$summary"
note() { echo "$*" >>"$summary"; }
summarise() { python scripts/gpu_summary.py "$@" >>"$summary" 2>&1; }

if [ "$device" = cpu ]; then # the dry run: the same commands, tiny
    smoke_row=tiny:256 speed_rows=tiny:256,tiny:512 fp16_row=tiny:256 fp16=fp32 big_rows=tiny:512
    bench_steps=(--warmup 1 --steps 1 --vocab 300 --peak-seconds 0.05 --set log_every=2) threads=1 tests=(--collect-only) beam=(--beam 1 --lines 20)
    search=(--beam 1 --length-penalties 1.0)
    # result's run is bounded by its updates: a few seconds of max_minutes make none on a busy machine
    train_size=(model=tiny batch_tokens=256 data.vocab_size=300 max_steps=4) ddp_steps=(4 2) ddp_save=2
    slower=5 # a shared CPU may be far slower than a GPU's host: the dry run checks commands, not time
else
    smoke_row=small:8192 speed_rows=small:8192,base:32768,base:8192,small:32768 fp16_row=base:32768 fp16=fp16
    big_rows=big:32768,big:8192 bench_steps=(--warmup 5 --steps 20 --set log_every=20) threads=4 tests=() beam=() search=() train_size=()
    ddp_steps=(40 20) ddp_save=10 slower=1
fi
limit() { timeout $(($1 * slower)) "${@:2}"; } # limit SECONDS COMMAND...: a step's time limit
bench=(python scripts/bench_train.py --device "$device" --data-dir "$data" --threads "$threads"
    "${bench_steps[@]}")

bench_part() { # bench_part NAME SECONDS PRECISION RUNS [more flags]
    local name=$1 seconds=$2 precision=$3 rows=$4
    shift 4
    limit "$seconds" "${bench[@]}" --precision "$precision" --runs "$rows" "$@" \
        --report "$out/bench_$name.json" >"$out/bench_$name.log" 2>&1
    note "bench $name: rc=$?"
    summarise "$out/bench_$name.json"
}

pytest_part() { # pytest_part NAME SECONDS FILES...
    local name=$1 seconds=$2
    shift 2
    limit "$seconds" python -m pytest -q --tb=short -p no:cacheprovider "${tests[@]}" "$@" >"$out/$name.log" 2>&1
    note "$name: rc=$? $(tail -n 1 "$out/$name.log")"
    grep -E "^(FAILED|ERROR)" "$out/$name.log" >>"$summary"
}

smoke() {
    bench_part smoke 90 bf16 "$smoke_row"
    pytest_part smoke_tests 60 tests/test_device_queue.py
}

speed() { # the targets' rows first: 2026-11-27 on an H100, about 35 s a row with the profiler's passes
    bench_part bf16 200 bf16 "$speed_rows"
    bench_part fp16 70 "$fp16" "$fp16_row"
}

big() {
    bench_part big 280 bf16 "$big_rows"
}

compile() { # compiling outlasted 100 s on the H100's host; the dry run checks the command, not the compiler
    [ "$device" = cpu ] && export TORCH_COMPILE_DISABLE=1
    bench_part compile 280 bf16 "$smoke_row" --compile --set compile_mode="${COMPILE_MODE:-default}"
}

tests() {
    pytest_part cuda_tests 280 tests/test_cuda.py tests/test_precision_compile.py tests/test_device.py \
        tests/test_device_queue.py
}

result() {
    limit $(((${minutes%.*} + 1) * 60 + 100)) python scripts/reproduce.py multi30k_en_de_gpu --data-dir "$data" \
        --minutes "$minutes" --run-dir "$runs/reproduce" "${search[@]}" ${PUBLISH:+--publish} \
        device="$device" "${train_size[@]}" >"$out/reproduce.json" 2>"$out/reproduce.log"
    note "reproduce ($minutes min): rc=$? $(tail -n 1 "$out/reproduce.log")"
    summarise "$out/reproduce.json"
}

ddp() { # ddp <run dir> <max_steps> [resume]
    limit 80 torchrun --standalone --nproc_per_node=1 -m seq2seq.cli.train data.task_train_size=2000 \
        batch_tokens=1024 deterministic=true device="$device" progress=false attention_images=false save_every="$ddp_save" \
        valid_every=20 max_steps="$2" "hydra.run.dir=$1" ${3:+resume=$1} >>"$out/ddp.log" 2>&1
}

extra() {
    rm -rf "$runs/ddp_straight" "$runs/ddp_resumed"
    : >"$out/ddp.log"
    ddp "$runs/ddp_straight" "${ddp_steps[0]}" && ddp "$runs/ddp_resumed" "${ddp_steps[1]}" &&
        ddp "$runs/ddp_resumed" "${ddp_steps[0]}" resume
    note "torchrun nproc 1: rc=$? $(python scripts/gpu_summary.py --ddp "$runs" "$out/ddp.log" 2>&1 | tail -n 1)"
    limit 150 python scripts/bench_translate_gpu.py --device "$device" --run "$runs/reproduce" \
        --input "$data/test_2016_flickr.en.gz" --reference "$data/test_2016_flickr.de.gz" "${beam[@]}" \
        --report "$out/bench_translate_gpu.json" >/dev/null 2>"$out/bench_translate_gpu.log"
    note "translate: rc=$?"
    summarise "$out/bench_translate_gpu.json"
}

if [ "$device" = cuda ]; then
    python -c "import torch; assert torch.cuda.is_available(), 'PyTorch sees no CUDA GPU'" || exit 1
    note "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader) torch $(python -c 'import torch; print(torch.__version__)')"
fi
"$part"
cat "$summary"
