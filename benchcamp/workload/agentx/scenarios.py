"""AgentX's two scenarios, as SemiAnalysis' harness defines them, and what makes a run a valid submission.

Source: ``agentx-harness`` 1.0.12 on PyPI (SemiAnalysis' fork of AIPerf; read 2026-12-02 from the wheel
agentx_harness-1.0.12-py3-none-any.whl):

- aiperf/common/scenario/inferencex_agentx_mvp.py: ``INFERENCEX_AGENTX_MVP`` and ``AGENTX`` (its copy with
  ``cli_defaults``), registered in aiperf/common/scenario/registry.py; ``agentx`` is the harness's default.
- aiperf/common/scenario/validator.py: which settings are locks (a differing value is a violation; only
  ``--unsafe-override`` lets the run go on, stamped ``submission_valid=false``) and which are defaults an
  explicit value replaces; the pinned corpus ``semianalysisai/cc-traces-weka-062126``; a local ``weka_trace``
  folder is never valid.
- aiperf/common/environment.py (``Environment.AGENTX``): the context-overflow substrings and the 1% limit
  (strictly greater than invalidates); aiperf/common/scenario/context_overflow.py matches them case-insensitively
  in the raw body and in the OpenAI ``error.message``.
- aiperf/records/records_manager.py: the failure abort (``failed_request_threshold``, armed after
  ``max(concurrency, 10)`` records) and the coverage check (skipped below the 900 s floor);
  aiperf/metrics/accumulator.py ``profile_metric_duration_coverage`` and record_models.py ``passed``: the
  latest TTFT (first token) or ITL (end of a streamed answer with >= 2 tokens) observation's distance from the
  window's start over its length; TTFT *or* ITL at the ratio passes.
- aiperf/timing/strategies/agentic_replay.py: the per-lane warm-up (primers at the recorded length for every
  live stream, then ``warmup_requests_per_lane`` more at ``_WARMUP_MAX_TOKENS = 1`` with zero idle delay);
  a failed warm-up request aborts the run (``TrajectoryWarmupFailedError``).
- aiperf/timing/strategies/cache_bust.py: the ``[rid:<12 hex>]`` marker, sha256 of
  ``benchmark_id:recycle_pass:trajectory_index:trace_id``, one per trace tree, first plays included.

benchcamp is stricter than the harness in one way: every setting of a scenario is a named override
when set away from it, a default the harness lets an explicit flag replace as much as a lock; ``LOCKED`` says
which the harness itself locks, so the reason names both.
"""

from __future__ import annotations

import re
from typing import Any

SCENARIOS = ("agentx", "inferencex-agentx-mvp")
DEFAULT_SCENARIO = "agentx"  # registry.py: AGENTX is the harness's default scenario

# benchcamp's setting -> (agentx, inferencex-agentx-mvp), from inferencex_agentx_mvp.py (1.0.12)
_TABLE: dict[str, tuple[Any, Any]] = {
    "start_min_ratio": (0.25, 0.0),  # default_trajectory_start_min_ratio
    "start_max_ratio": (0.75, 1.0),  # default_trajectory_start_max_ratio
    "duration_s": (3600.0, 1800.0),  # default_benchmark_duration_seconds
    "min_duration_s": (900.0, 900.0),  # min_benchmark_duration_seconds
    "warmup_per_lane": (True, True),  # agentic_replay: every stream live at t* replays its last turn before t*
    "primer_max_tokens": (0, 0),  # 0: the recorded length (the harness overrides max_tokens only after primers)
    "warmup_requests_per_lane": (10, 0),  # cli_defaults.warmup_requests_per_lane (mvp: none)
    "cache_bust": (True, True),  # require_cache_bust = FIRST_TURN_PREFIX
    "idle_gap_cap_s": (10.0, 10.0),  # system_idle_gap_cap_seconds
    "trace_idle_gap_cap_s": (300.0, None),  # cli_defaults.trace_idle_gap_cap_seconds (mvp: none)
    "streaming": (True, True),  # require_streaming
    "ignore_eos": (True, True),  # require_ignore_eos
    "max_input_tokens": (None, None),  # forbid_input_truncation
    "max_context_overflow_rate": (0.01, 0.01),  # Environment.AGENTX.CONTEXT_OVERFLOW_RATE_LIMIT
    "failed_request_threshold": (0.10, None),  # cli_defaults.failed_request_threshold (mvp: none)
    "min_metric_coverage": (0.95, 0.95),  # minimum_profile_metric_coverage_ratio
    # weka_trace.py WekaTraceLoader._resolved_context_mode: DELTAS_WITH_RESPONSES, the recorded answers
    "context": ("recorded", "recorded"),
}

# the settings the harness's validator locks (validator.py: a differing explicit value is a violation)
LOCKED = frozenset(
    {"min_duration_s", "cache_bust", "idle_gap_cap_s", "streaming", "ignore_eos", "max_input_tokens",
     "min_metric_coverage", "warmup_per_lane", "primer_max_tokens", "context"}
)  # fmt: skip
# the harness sends AgentX traces as chat (the agentx scenario's cli_defaults endpoint_type "chat"; its completions
# endpoint takes one turn of texts, openai_completions.py, and cannot replay a trace's messages): token ids are
# benchcamp's own form, an unsafe override
HARNESS_API = "chat"


def prompt_form(api: str, context: str) -> str:
    """How a point's AgentX turns went on the wire: ``chat_recorded`` (the harness's), ``chat_live`` or
    ``token_ids`` (summary key ``agentx_prompt``)."""
    return f"chat_{context}" if api == "chat" else "token_ids"


def prompt_override(api: str) -> str | None:
    """Why ``load.api`` makes an AgentX run an unsafe override (None: it is the harness's)."""
    if api == HARNESS_API:
        return None
    return (
        f"load.api={api} (token ids: the harness sends chat messages, endpoint_type chat; set load.api=chat "
        "to measure as it does)"
    )


# agentic_replay.py: _WARMUP_MAX_TOKENS, the output cap of the extra warm-up requests
WARMUP_MAX_TOKENS = 1
# cli_defaults.warmup_grace_period of agentx: the longest the warm-up barrier waits (agentic_warmup_grace_period;
# the mvp scenario sets none and waits indefinitely: benchcamp's virtual clock waits this long in both)
WARMUP_GRACE_S = 1800.0
# records_manager.py: the failure abort is armed once max(concurrency, 10) records are in
FAILURE_GRACE_FLOOR = 10


def scenario(name: str) -> dict[str, Any]:
    """The settings of scenario ``name`` (a fresh dict)."""
    col = SCENARIOS.index(name)
    return {k: v[col] for k, v in _TABLE.items()}


def overrides(name: str, settings: dict[str, Any]) -> list[str]:
    """``settings`` set away from scenario ``name``, one line each (each makes the run invalid)."""
    want = scenario(name)
    out = []
    for k, v in want.items():
        got = settings.get(k, v)
        if k == "duration_s":  # the harness's floor is the lock; any other window is still a default changed
            if got < want["min_duration_s"]:
                out.append(f"load.agentx.duration_s={got:g} (below the harness's {want['min_duration_s']:g} s floor)")
                continue
        if got != v:
            how = "locked by the harness" if k in LOCKED else "the harness's default"
            out.append(f"load.agentx.{k}={got!r} ({name}: {v!r}, {how})")
    return out


# Environment.AGENTX.CONTEXT_OVERFLOW_SUBSTRINGS (1.0.12), matched case-insensitively
CONTEXT_OVERFLOW_SUBSTRINGS = ("context length", "maximum context", "context_length_exceeded", "prompt is too long")
CONTEXT_OVERFLOW = re.compile("|".join(re.escape(s) for s in CONTEXT_OVERFLOW_SUBSTRINGS), re.IGNORECASE)

# The pinned corpus (validator.py: _AGENTX_WEKA_HF_REPO, the harness's only valid source besides its
# public-dataset aliases of the same corpus; plugins.yaml: 393 v7 traces, split train, revision main).
# The harness pins it by name only; benchcamp cannot download it here (no network to the Hugging Face Hub),
# so no content digest of it is known: ``PINNED_SHA256`` holds the read_agentx ``trace_sha256`` digests of
# copies verified to be it (none yet). A local copy is valid when its digest is there, or when it is a
# Hugging Face snapshot of the repo (``datasets--semianalysisai--cc-traces-weka-062126/snapshots/<commit>``,
# what ``huggingface-cli download --repo-type dataset`` writes) holding the corpus's 393 traces.
PINNED_CORPUS = "semianalysisai/cc-traces-weka-062126"
PINNED_TRACES = 393
PINNED_SHA256: frozenset[str] = frozenset()
_SNAPSHOT = re.compile(r"datasets--semianalysisai--cc-traces-weka-062126/snapshots/([0-9a-f]{40})(/|$)")


def corpus_verdict(source: str, spec_path: str, meta: dict[str, Any] | None) -> str | None:
    """None when the workload is the pinned corpus, else why not (one line: the harness's unsafe_override)."""
    if source != "agentx":
        return (
            f"the workload is not an AgentX trace (source {source or 'generated'}); only the pinned corpus "
            f"{PINNED_CORPUS} is a valid submission (the harness needs --unsafe-override)"
        )
    meta = meta or {}
    digest = str(meta.get("trace_sha256") or "")
    if digest and digest in PINNED_SHA256:
        return None
    traces = (meta.get("agentx") or {}).get("traces") if isinstance(meta.get("agentx"), dict) else None
    snap = _SNAPSHOT.search(str(spec_path).replace("\\", "/"))
    if snap and (traces is None or int(traces) == PINNED_TRACES):
        return None
    return (
        f"local trace {spec_path} (sha256 {digest[:12] or '?'}) is not the pinned corpus {PINNED_CORPUS} "
        f"({PINNED_TRACES} traces): benchcamp cannot download it here; point workload.spec at a Hugging Face "
        "snapshot of it (the harness needs --unsafe-override for a local folder)"
    )
