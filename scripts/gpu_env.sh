# Sourced first on a bare GPU machine, in the repository root, with the folder that
# scripts/prepare_gpu_copy.py made (.gpu/) carried beside the working tree:
#
#   source scripts/gpu_env.sh && bash scripts/check_gpu.sh smoke .gpu/data/multi30k "$OUT/smoke"
#
# Installs the carried wheels (the packages the machine's image lacks) and this checkout, offline, and
# puts a `python` beside the machine's `python3` (check_gpu.sh and reproduce.py call `python`, and
# reproduce.py starts seq2seq-train from the folder of the Python that runs it).
# DRY_RUN=1 (the suite's check of this file, on the CPU): only says what it would run.
_gpu_env_run() { if [ -n "${DRY_RUN:-}" ]; then echo "would run: $*"; else "$@"; fi; }
_gpu_env_python=$(command -v python3)
_gpu_env_run "$_gpu_env_python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .gpu/whl/*.whl || return 1
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
_gpu_env_run "$_gpu_env_python" -m pip install -q --no-index --no-deps --no-build-isolation -e . || return 1
[ -e "$(dirname "$_gpu_env_python")/python" ] || _gpu_env_run ln -s "$_gpu_env_python" "$(dirname "$_gpu_env_python")/python"
export PYTHONUNBUFFERED=1  # a part stopped at its limit still leaves what it printed
