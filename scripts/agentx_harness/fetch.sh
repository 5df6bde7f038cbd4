#!/usr/bin/env bash
# SemiAnalysis' AgentX harness (agentx-harness 1.0.12 on PyPI, Apache-2.0, an AIPerf fork), pinned, in a
# venv of its own (`make agentx-harness`): the oracle the trace-import conformance tests compare
# benchcamp's importer with (tests/workload/test_agentx_conformance.py runs oracle.py in it).
#
#   $BENCHCAMP_AGENTX_HARNESS_HOME (default ~/.cache/benchcamp/peers/agentx-harness-1.0.12-loader)/
#     bin/python     Python 3.11 with the wheel installed --no-deps, plus only what importing its
#                    trace models and loader needs (requirements.txt: versions within the wheel's
#                    ranges, sha256 hashes); not datasets, transformers, dash, ... (never imported)
#     stamp.json     written last: the wheel's sha256 and requirements.txt's
#
# Every file is hash-checked (uv's --require-hashes); nothing of the harness is committed here.
set -euo pipefail
version=1.0.12
sha256=3d1f06f941bace12ab26c112bb6b5b1727dc160241c696851604e5269d874835  # the py3-none-any wheel on PyPI
here="$(cd "$(dirname "$0")" && pwd)"
# "-loader": not the full install a bench/ script may keep beside it (agentx-harness-<version>)
home="${BENCHCAMP_AGENTX_HARNESS_HOME:-$HOME/.cache/benchcamp/peers/agentx-harness-$version-loader}"
reqs_sha=$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)
stamp="{\"package\": \"agentx-harness\", \"version\": \"$version\", \"sha256\": \"$sha256\", \"requirements_sha256\": \"$reqs_sha\"}"

if [ -f "$home/stamp.json" ] && [ "$(cat "$home/stamp.json")" = "$stamp" ]; then
  echo "agentx-harness $version: up to date in $home"
  exit 0
fi
if [ -e "$home" ] && [ ! -f "$home/stamp.json" ]; then  # never delete what this script did not make
  echo "agentx-harness $version: $home exists but is not this script's venv (no stamp.json); move it away" >&2
  exit 1
fi
rm -rf "$home.tmp" "$home"
mkdir -p "$(dirname "$home")"
uv venv -q --python 3.11 "$home.tmp"
printf 'agentx-harness==%s --hash=sha256:%s\n' "$version" "$sha256" >"$home.tmp/harness.txt"
# uv pip: the project's own installer (no pip needed in the venv); the venv is moved into place only when
# complete, so a failed install leaves nothing that looks usable
VIRTUAL_ENV="$home.tmp" uv pip install -q --require-hashes --no-deps --only-binary :all: \
  -r "$here/requirements.txt" -r "$home.tmp/harness.txt"
mv "$home.tmp" "$home"
"$home/bin/python" -c "import aiperf.dataset.loader.weka_trace" || {
  echo "agentx-harness $version: installed in $home but its loader does not import; delete it and retry" >&2
  exit 1
}
echo "$stamp" >"$home/stamp.json"
echo "agentx-harness $version: in $home (Apache-2.0; the trace loader only, see scripts/agentx_harness/)"
