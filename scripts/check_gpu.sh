#!/usr/bin/env bash
# Proves the CUDA paths on this machine's GPU and measures it, in one command; a summary comes last.
#
#   bash scripts/check_gpu.sh [MULTI30K_DIR] [OUT_DIR]      # defaults: ../shared/data/multi30k outputs/check_gpu
#
# 1. speed: scripts/bench_train.py on the GPU (small, base, big; bf16, fp32, compile) -> bench_*.json
# 2. a result: scripts/reproduce.py multi30k_en_de_gpu for MINUTES (default 10) minutes -> reproduce.json
#    (PUBLISH=1 adds --publish: results/ and docs/results.md get its row), while the test suite runs
#    beside it with CUDA visible (the CPU does the tests, the GPU the training) -> suite.log
# 3. torchrun --nproc_per_node=1 on NCCL: a run stopped at update 20 and resumed equals one that was
#    not (deterministic=true), bit for bit -> ddp.txt
# 4. translation on the GPU: PyTorch fp32/bf16/fp16, CTranslate2 fp32/int8, beam 5 -> bench_translate_gpu.json
# Needs the dev extra and a CUDA build of torch. A step that fails is reported and the others still run.
set -uo pipefail
cd "$(dirname "$0")/.."
data=$(realpath "${1:-../shared/data/multi30k}")
out=$(realpath -m "${2:-outputs/check_gpu}")
minutes=${MINUTES:-10}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
field() { python -c "import json,sys; d=json.load(open(sys.argv[1])); print(*(d.get(k) for k in sys.argv[2:]))" "$@" 2>/dev/null; }

python -c "import torch; assert torch.cuda.is_available(), 'PyTorch sees no CUDA GPU'" || exit 1
note "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader) torch $(python -c 'import torch; print(torch.__version__)')"

# 1. training speed, the GPU to itself
while read -r model precision tokens extra; do
    name="bench_train_${model}_${precision}_${tokens}${extra:+_compile}"
    timeout 180 python scripts/bench_train.py --device cuda --data-dir "$data" --model "$model" \
        --precision "$precision" --batch-tokens "$tokens" --warmup 5 --steps 20 --threads 4 $extra \
        >"$out/$name.json" 2>"$out/$name.log"
    note "$name: rc=$? tgt_tok/s, s/update, mfu (own peak), peak GPU MB: $(field "$out/$name.json" tgt_tokens_per_s seconds_per_update mfu_vs_own_precision_peak peak_gpu_memory_mb)"
done <<'EOF'
small bf16 16384
base bf16 32768
big bf16 16384
base fp32 32768
base bf16 32768 --compile
EOF

# 2. the 10-minute result on the GPU, with the whole suite on the CPU beside it
publish=${PUBLISH:+--publish}
(timeout $(( ${minutes%.*} * 60 + 660 )) python scripts/reproduce.py multi30k_en_de_gpu --data-dir "$data" \
    --minutes "$minutes" --run-dir "$out/reproduce" $publish >"$out/reproduce.json" 2>"$out/reproduce.log"
 echo $? >"$out/reproduce.rc") &
trainer=$!
# The GPU's own tests first, with their tracebacks: a suite stopped by a time limit prints none.
timeout 900 python -m pytest -q --tb=short -p no:cacheprovider tests/test_cuda.py tests/test_precision_compile.py \
    tests/test_device.py >"$out/cuda_tests.log" 2>&1
note "CUDA tests: rc=$? $(tail -n 1 "$out/cuda_tests.log")"
timeout "${SUITE_SECONDS:-1200}" python -m pytest -v --tb=short -p no:cacheprovider -m 'not slow' >"$out/suite.log" 2>&1
note "suite: rc=$? $(tail -n 1 "$out/suite.log")"
grep -E "^tests/.* (FAILED|ERROR)" "$out/suite.log" | tee -a "$summary"
grep -E "^tests/test_cuda.py|^tests/test_device.py::.*cuda|^tests/test_precision_compile.py::.*cuda" "$out/suite.log" >>"$summary"

# 3. torchrun with NCCL, stopped and resumed (the GPU is shared with the training: speed does not matter here)
ddp() {  # ddp <run dir> <max_steps> [resume]
    torchrun --standalone --nproc_per_node=1 -m seq2seq.cli.train data.task_train_size=2000 batch_tokens=1024 \
        deterministic=true device=cuda progress=false attention_images=false save_every=10 valid_every=20 \
        max_steps="$2" "hydra.run.dir=$1" ${3:+resume=$1} >>"$out/ddp.log" 2>&1
}
rm -rf "$out/ddp_straight" "$out/ddp_resumed"
ddp "$out/ddp_straight" 40 && ddp "$out/ddp_resumed" 20 && ddp "$out/ddp_resumed" 40 resume
note "torchrun nproc 1 (NCCL): rc=$? $(python - "$out" <<'EOF' 2>&1 | tail -n 1
import sys, torch
from seq2seq.checkpoint import load_checkpoint
a, b = (load_checkpoint(f"{sys.argv[1]}/{d}/checkpoints/last.pt") for d in ("ddp_straight", "ddp_resumed"))
same = all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
log = open(f"{sys.argv[1]}/ddp.log").read()
print(f"steps {a['step']}/{b['step']}, resumed: {'resumed ' in log}, nccl: {'nccl backend' in log}, bitwise equal: {same}")
EOF
)"

wait "$trainer"
note "reproduce ($minutes min): rc=$(cat "$out/reproduce.rc") $(tail -n 3 "$out/reproduce.log" | tr '\n' ' ')"
python - "$out/reproduce.json" <<'EOF' | tee -a "$summary"
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as err:
    sys.exit(f"reproduce.json: {err}")
print({k: r[k] for k in r if k not in ("validation_curve", "machine", "candidates")})
EOF

# 4. translation on the GPU
timeout 600 python scripts/bench_translate_gpu.py --run "$out/reproduce" --input "$data/test_2016_flickr.en.gz" \
    --reference "$data/test_2016_flickr.de.gz" >"$out/bench_translate_gpu.json" 2>"$out/bench_translate_gpu.log"
note "translate: rc=$?"
python - "$out/bench_translate_gpu.json" <<'EOF' | tee -a "$summary"
import json, sys
for row in json.load(open(sys.argv[1]))["rows"]:
    print(row)
EOF
echo "== summary ($summary)"
cat "$summary"
