"""The sections of params.yaml, one pydantic model each (campaign, provider, engine, hardware, workload, load,
pricing, slo, baselines, regression, tracking, results), their bounds and defaults, and the rules of what the
fingerprint leaves out. :class:`benchcamp.config.model.Config` puts them together."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from benchcamp.errors import ConfigError

DEFAULT_PARAMS = "params.yaml"
# The vLLM version benchcamp tracks: the version of the `vllm` extra in uv.lock (tests/test_vllm_pin.py keeps the two
# equal). It is the default engine.version: the EC2 image tag (vllm/vllm-openai:v<version>), the pip pin, the
# simulated engine's /version. A local real engine is checked against the vLLM it finds (benchcamp.deploy.vllm_install).
PINNED_VLLM = "0.33.0"
# Sections that describe where results go, not what is measured.
NON_FINGERPRINT_SECTIONS = ("tracking", "results")
# Keys that say where a secret lives, not what is measured (and the same run from another vault is the same run).
NON_FINGERPRINT_KEYS = (("engine", "hf_token_ref"),)
# Fields added after fingerprints were in use, left out of the fingerprint while unset (their default), so the
# fingerprint of a config that does not set them is the one it had before they existed.
UNSET_NOT_FINGERPRINTED: tuple[tuple[str, str, Any], ...] = (
    ("engine", "engine_profile", ""),
    ("engine", "data_parallel_size_local", None),
    ("engine", "num_gpu_blocks_override", None),
    ("engine", "long_prefill_token_threshold", 0),
    ("load", "session_header", "X-Session-ID"),
    ("load", "agentx", None),
    ("load", "shards", 1),
    ("load", "shard_barrier_timeout_s", 300.0),
    ("load", "trials", 1),
)
# Whole sections added after fingerprints were in use, left out while unset (None): a config without a
# ``topology:`` is the one-role deployment of its engine + hardware sections, fingerprinted as before.
UNSET_SECTIONS_NOT_FINGERPRINTED = (("topology", None),)
# Settings added inside an optional section after its fingerprints were in use, left out at their default:
# a load.agentx from before load.agentx.context (chat with the recorded answers) keeps its fingerprint.
DEFAULT_NESTED_NOT_FINGERPRINTED = (("load", "agentx", "context", "recorded"),)
# Paths hashed relative to the project (the folder of params.yaml and workloads/), not where it is checked out.
PROJECT_RELATIVE_KEYS = (("workload", "spec"), ("workload", "data"))
PROJECT_DIR_ENV = "BENCHCAMP_PROJECT_DIR"  # the Airflow DAGs' project folder (benchcamp.campaign.form)
# The engine profile of hardware.gpu when engine.engine_profile is empty (Config.engine_profile).
DEFAULT_ENGINE_PROFILE = "vllm"
DEFAULT_ENGINE_PROFILE_BY_GPU = {"cpu": "vllm-cpu"}

# vLLM's KV-cache dtypes (CacheDType in vllm/config/cache.py, vllm-project/vllm commit
# 002f10e0cfa1373a19a0d2756598a34b700d20e5, read 2026-11-30).
KV_CACHE_DTYPES = (
    "auto",
    "float16",
    "bfloat16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
    "nvfp4_ds_mla",
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "int4_per_token_head",
    "int8_per_token_head",
    "fp8_per_token_head",
    "nvfp4",
    "nvfp4_4over6",
)
KvCacheDtype = Literal[KV_CACHE_DTYPES]  # type: ignore[valid-type]

WEEK_S = 7 * 24 * 3600.0
MAX_SESSIONS = 100_000


def _le(default: Any, le: float, why: str, **kw: Any) -> Any:
    """A bounded field; ``why`` is what the error says when the bound is passed."""
    return Field(default, le=le, json_schema_extra={"why": why}, **kw)


_DURATION_WHY = "at most 7 days (604800 s): a benchmark step longer than that is a typo"


class Section(BaseModel):
    # allow_inf_nan=False: `.inf` / `.nan` in YAML are errors that name the field.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class Campaign(Section):
    name: str = Field("agentic-smoke", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    description: str = ""


class LocalProvider(Section):
    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535, description="0 picks a free port")
    startup_timeout_s: float = _le(120.0, WEEK_S, _DURATION_WHY, gt=0)


class Ec2Provider(Section):
    region: str = "us-east-1"
    instance_types: list[str] = Field(default_factory=lambda: ["p5en.48xlarge", "p5e.48xlarge"])
    availability_zones: list[str] = Field(default_factory=list)
    ami_id: str = ""
    subnet_ids: list[str] = Field(default_factory=list)
    vpc_id: str = ""
    key_name: str = ""
    orchestrator_cidr: str = Field(
        "", description="CIDR allowed to reach the engine port; empty = this machine's address /32"
    )
    associate_public_ip: bool = False
    install: Literal["container", "pip"] = "container"
    container_image: str = "vllm/vllm-openai"
    owner: str = "benchcamp"
    ttl_hours: float = _le(
        6.0, 168, "at most 168 hours (7 days): the node is reaped after this; a longer TTL is a typo", gt=0
    )
    engine_port: int = Field(8000, ge=1, le=65535)
    startup_timeout_s: float = _le(1800.0, WEEK_S, _DURATION_WHY, gt=0)
    secrets_via: Literal["ssm", "userdata"] = Field(
        "ssm", description="how the node gets the engine's secrets: SSM Parameter Store (SecureString) or user data"
    )
    instance_profile: str = Field(
        "",
        description="IAM instance profile whose role may ssm:GetParameter "
        "parameter/benchcamp/engine-env/*; required with secrets_via=ssm",
    )


class EndpointProvider(Section):
    url: str = ""
    api_key_env: str = "BENCHCAMP_API_KEY"
    airflow_conn_id: str = ""


class SlurmProvider(Section):
    """A Slurm job per engine (benchcamp.provision.slurm); the empty fields are left to the cluster's defaults."""

    partition: str = ""
    account: str = ""
    qos: str = ""
    gpus_per_node: int = Field(0, ge=0, le=64, description="GRES gpu:N per node; 0 asks for none")
    gres_type: str = Field("", description="the GPU type in gres=gpu:TYPE:N (e.g. h100); empty for any")
    cpus_per_task: int = Field(1, ge=1, le=1024)
    mem: str = Field("", pattern=r"^$|^[0-9]+[KMGT]?$", description="--mem, e.g. 64G; empty: the partition's default")
    time_limit_min: int = Field(
        360, ge=1, le=10080, json_schema_extra={"why": "at most 10080 minutes (7 days): a longer limit is a typo"}
    )
    constraint: str = ""
    exclusive: bool = False
    env: dict[str, str] = Field(default_factory=dict, description="extra environment of the engine (no secrets)")
    engine_port: int = Field(8000, ge=1, le=65535)
    startup_timeout_s: float = _le(1800.0, WEEK_S, _DURATION_WHY, gt=0)
    queue_timeout_s: float = _le(86400.0, WEEK_S, _DURATION_WHY, gt=0)
    poll_s: float = Field(2.0, gt=0, le=600)
    python: str = Field("", description="the Python that runs benchcamp on the compute node; empty: this one's")
    env_dir: str = Field(
        "",
        description="a folder the compute node reads (a shared filesystem on a real cluster) for the job's 0600 "
        "env file; empty: ~/.cache/benchcamp/slurm",
    )


# provider.slurm came after fingerprints were in use: left out while it is all defaults (the fingerprint of a
# config that does not set it is the one it had before; with provider.kind=slurm it is set in practice).
UNSET_NOT_FINGERPRINTED = (*UNSET_NOT_FINGERPRINTED, ("provider", "slurm", SlurmProvider().model_dump(mode="json")))


class Provider(Section):
    kind: Literal["local", "ec2", "endpoint", "slurm"] = "local"
    local: LocalProvider = Field(default_factory=LocalProvider)
    ec2: Ec2Provider = Field(default_factory=Ec2Provider)
    endpoint: EndpointProvider = Field(default_factory=EndpointProvider)
    slurm: SlurmProvider = Field(default_factory=SlurmProvider)


class Engine(Section):
    kind: Literal["vllm", "simulated"] = "simulated"
    version: str = PINNED_VLLM
    model: str = "deepseek-ai/DeepSeek-V3"
    served_model_name: str = ""
    # Which performance profile (benchcamp/profiles/models/*.yaml) the
    # simulated engine uses for `model`.
    model_profile: str = "deepseek-v3"
    # Which engine profile (front end, step and per-sequence overheads: profiles/engines/*.yaml, or a
    # BENCHCAMP_PROFILE_PATH folder's engines/, e.g. one `benchcamp calibrate` wrote) the simulated engine
    # uses. "" = the default for the hardware (Config.engine_profile): vllm-cpu on hardware.gpu=cpu, else vllm.
    engine_profile: str = Field(
        "",
        description="simulated engine's engine profile; empty = vllm-cpu on hardware.gpu=cpu, else vllm",
    )
    tensor_parallel_size: int = _le(1, 1024, "at most 1024 GPUs per engine", ge=1)
    data_parallel_size: int = _le(8, 1024, "at most 1024 engine replicas", ge=1)
    data_parallel_size_local: int | None = _le(
        None,
        1024,
        "at most 1024 engine replicas per node",
        ge=1,
        description="DP ranks per node (vLLM --data-parallel-size-local); fewer than data_parallel_size is vLLM's "
        "multi-node launch: a head and --headless peers (the local provider starts them all on loopback)",
    )
    enable_expert_parallel: bool = True
    max_num_seqs: int = _le(256, 1_000_000, "at most 1,000,000 sequences per batch", ge=1)
    max_num_batched_tokens: int = _le(8192, 100_000_000, "at most 100M tokens per step", ge=1)
    max_model_len: int | None = _le(None, 100_000_000, "at most 100M tokens of context", ge=1)
    block_size: int = _le(16, 4096, "at most 4096 tokens per KV block", ge=1)
    enable_prefix_caching: bool = True
    kv_cache_dtype: KvCacheDtype = "auto"
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    kv_offloading_size_gib: float = _le(
        0.0,
        1_000_000,
        "at most 1,000,000 GiB of host memory per engine",
        ge=0,
        description="CPU KV tier per engine (vLLM --kv-offloading-size); 0 = off",
    )
    num_gpu_blocks_override: int | None = _le(
        None,
        1_000_000_000,
        "at most 1e9 KV blocks",
        ge=2,
        description="KV blocks per engine instead of the measured memory (vLLM --num-gpu-blocks-override); "
        "one of them is vLLM's null block",
    )
    long_prefill_token_threshold: int = _le(
        0,
        100_000_000,
        "at most 100M tokens",
        ge=0,
        description="a prefill chunk's cap while other requests run or wait (vLLM --long-prefill-token-threshold); "
        "0 = off",
    )
    extra_args: list[str] = Field(default_factory=list)
    hf_token_ref: str = Field(
        "",
        description="where the Hugging Face token lives (env:NAME, file:/path, airflow-variable:KEY, "
        "airflow-conn:ID); the engine gets it as HF_TOKEN. Never the token itself",
    )

    @field_validator("hf_token_ref")
    @classmethod
    def _a_reference(cls, ref: str) -> str:
        if not ref:
            return ref
        from benchcamp.secrets.redaction import check_ref

        try:
            return check_ref("engine.hf_token_ref", ref)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None


class Hardware(Section):
    # A GPU profile's name (benchcamp/profiles/gpus/*.yaml, or a BENCHCAMP_PROFILE_PATH folder's
    # gpus/, e.g. one `benchcamp calibrate` wrote); checked when the config is loaded (_check_names).
    # cpu: the real CPU build of vLLM on this machine's cores (`make real-engine`); one "GPU" per engine.
    gpu: str = Field("h200", description="GPU profile name (profiles/gpus/*.yaml or BENCHCAMP_PROFILE_PATH)")
    gpu_count: int = _le(8, 100_000, "at most 100,000 GPUs", ge=1)
    usd_per_gpu_hour: float = _le(3.5, 10_000, "at most $10,000 per GPU-hour: larger is a units mistake", ge=0)


class Workload(Section):
    name: str = "agentic-coding"
    spec: str = "workloads/agentic-coding.yaml"
    data: str = "workloads/data/agentic-coding.parquet"


# Service tiers for `load.mode: capacity` (max concurrent agents that meet each).
# agentperf-20: AA-AgentPerf's easiest published tier, 20 tokens/s per agent and TTFT 10 s
#   (Artificial Analysis, https://artificialanalysis.ai/methodology/agentperf, June 2026, as quoted in issue 13).
#   agentperf-local 0.3.4 (AA's client) has no tier thresholds in its source, and defines its per-run speed
#   as pooled sum(out-1)/sum(decode time) over streamed text turns and TTFT as p50/p95: see README
#   "AA-AgentPerf's recorded trajectories" for where those definitions differ from these P90 tests.
# interactive-50 / interactive-100: benchcamp's faster interactive tiers (an assumption, not published tiers);
#   AA's published tiers for DeepSeek V4 Pro span 20 to 180 tokens/s
#   (https://www.aib.vote/en/news/artificial-analysis-launches-aa-agentperf-benchmark, 2026-06-12).
DEFAULT_TIERS = (
    {"name": "agentperf-20", "p90_user_tok_s": 20.0, "p90_ttft_s": 10.0},
    {"name": "interactive-50", "p90_user_tok_s": 50.0, "p90_ttft_s": 5.0},
    {"name": "interactive-100", "p90_user_tok_s": 100.0, "p90_ttft_s": 2.0},
)


class CapacityTier(Section):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    p90_user_tok_s: float = _le(
        ...,
        100_000,
        "at most 100,000 tokens/s per user",
        gt=0,
        description="P90 per-user rate must be at least this (tokens/s)",
    )
    p90_ttft_s: float = _le(
        ..., 3600, "at most an hour to the first token", gt=0, description="P90 TTFT must be at most this (s)"
    )


_SEARCH_WHY = f"capacity levels are concurrent sessions, at most {MAX_SESSIONS:,}"


class CapacitySearch(Section):
    start: int = _le(
        8, MAX_SESSIONS, _SEARCH_WHY, ge=1, description="first closed-loop level probed; doubled until a tier fails"
    )
    max: int = _le(4096, MAX_SESSIONS, _SEARCH_WHY, ge=1, description="highest level probed")
    resolution_sessions: int = _le(
        1, MAX_SESSIONS, _SEARCH_WHY, ge=1, description="stop bisecting when the bracket is this narrow"
    )
    resolution_rel: float = Field(0.0, ge=0, lt=1, description="... or this fraction of the level met")
    retries: int = Field(
        2, ge=0, le=5, description="re-runs of an invalid probe (window x2 each) before it is reported"
    )


class AgentxRules(Section):
    """AgentX's replay rules: ``scenario`` names one of the harness's two (``agentx``, its default, or
    ``inferencex-agentx-mvp``) and fills every setting left unset with that scenario's value; a setting
    given away from it is a named override, and a run with any override is never a valid submission.
    The table and its sources (agentx-harness 1.0.12): ``benchcamp.workload.agentx.scenarios``."""

    scenario: Literal["agentx", "inferencex-agentx-mvp"] = Field(
        "agentx", description="the harness's scenario whose parameters the unset settings take"
    )
    start_min_ratio: float = Field(
        0.25, ge=0, le=1, description="each lane's start t* is at least this far into its tree's recorded time"
    )
    start_max_ratio: float = Field(0.75, ge=0, le=1, description="... and at most (agentx 0.75; mvp 0-1)")
    warmup_per_lane: bool = Field(
        True, description="before the window, each lane sends the turn before its t* once (with its prefix)"
    )
    primer_max_tokens: int = _le(
        0, 1_000_000, "at most 1,000,000 tokens", ge=0, description="max_tokens of that primer; 0: recorded"
    )
    warmup_requests_per_lane: int = _le(
        10,
        1_000_000,
        "at most 1,000,000 requests",
        ge=0,
        description="then this many more of the lane's turns, max_tokens=1 and no idle delay (agentx 10; mvp 0)",
    )
    cache_bust: bool = Field(
        True,
        description="every play of a tree, first plays included, gets fresh blocks after its tool+system prefix "
        "(first_turn_prefix), from a digest of the point's benchmark id, the play and the tree",
    )
    idle_gap_cap_s: float | None = _le(
        10.0, WEEK_S, _DURATION_WHY, gt=0, description="no request running: pending turns move up to start by then"
    )
    trace_idle_gap_cap_s: float | None = _le(
        300.0, WEEK_S, _DURATION_WHY, gt=0, description="a tree idle longer than this: its next turn starts then"
    )
    context: Literal["recorded", "live"] = Field(
        "recorded",
        description="load.api chat: each turn's assistant messages hold the recorded answers (the harness's "
        "deltas_with_responses) or the answers the server streamed in this play (live: an override; "
        "benchcamp.loadgen.chat_context)",
    )
    streaming: Literal[True] = Field(True, description="benchcamp's client always streams")
    ignore_eos: bool = Field(True, description="ignore_eos (and min_tokens) so every output is its recorded length")
    max_input_tokens: int | None = _le(
        None,
        MAX_SESSIONS * 100,
        "at most 1e7 tokens",
        ge=1,
        description="input truncation (forbidden): drop turns above",
    )
    duration_s: float = _le(3600.0, WEEK_S, _DURATION_WHY, gt=0, description="profiling window (agentx 3600; mvp 1800)")
    min_duration_s: float = _le(900.0, WEEK_S, _DURATION_WHY, ge=0, description="the harness's shortest valid window")
    max_context_overflow_rate: float = Field(0.01, ge=0, le=1, description="above it: submission_valid false")
    failed_request_threshold: float | None = Field(
        0.10, ge=0, le=1, description="the run stops (invalid) once failures pass this share (agentx 0.10; mvp none)"
    )
    min_metric_coverage: float = Field(
        0.95, gt=0, le=1, description="invalid unless TTFT or ITL samples reach this far into the window"
    )

    @model_validator(mode="before")
    @classmethod
    def _scenario_values(cls, data: Any) -> Any:
        """Unset settings take the scenario's values (the harness's auto-fill)."""
        if not isinstance(data, dict):
            return data
        from benchcamp.workload.agentx.scenarios import SCENARIOS, scenario

        name = data.get("scenario", "agentx")
        if name not in SCENARIOS:
            return data  # the Literal names the choices
        return {**scenario(name), **data}

    def overrides(self) -> list[str]:
        """The settings away from the scenario's (each one makes a submission invalid), one line each."""
        from benchcamp.workload.agentx.scenarios import overrides

        return overrides(self.scenario, self.model_dump())


class SteadyState(Section):
    """How a closed loop reaches a steady state and shows it (every workload, both clocks; see
    ``benchcamp.loadgen.agentx``, whose rules these generalise). Under ``load.agentx`` its own
    start ratios, primer and cache bust replace lane_start .. replay_salt; the check applies to both."""

    lane_start: Literal["sampled", "first_turn"] = Field(
        "sampled",
        description="sampled: each lane's first play is a session drawn by its turns, started at a seeded turn "
        "with the context primed by a 1-token request (AgentX's t*); first_turn: every lane starts session j at "
        "turn 0 at t=0 (a burst of cold prefills)",
    )
    start_min_ratio: float = Field(0.0, ge=0, le=1, description="sampled start: at least this far into the session")
    start_max_ratio: float = Field(1.0, ge=0, le=1, description="... and at most this far")
    replay_salt: bool = Field(
        True,
        description="a recycled play of a session (a level above the workload's sessions, or a lane that cycles) "
        "gets its own salt after the prefix all sessions share, so it never hits an earlier play's cache",
    )
    window_opens: Literal["at_warmup", "after_primers", "after_turnover"] = Field(
        "after_turnover",
        description="virtual clock: when the window opens (never before load.warmup_s). at_warmup: at "
        "load.warmup_s; after_primers: once every lane's primer has been answered (AgentX's barrier); "
        "after_turnover: after that, once the loop has finished turnover_sessions sessions per lane (what the "
        "start left behind has been replaced by the loop's own state). The wall clock opens it at load.warmup_s",
    )
    turnover_sessions: float = _le(
        1.0, 100, "at most 100 sessions per lane", gt=0, description="after_turnover: finished sessions per lane"
    )
    max_warmup_s: float = _le(
        1800.0,
        WEEK_S,
        _DURATION_WHY,
        ge=0,
        description="the window opens by load.warmup_s + this at the latest (and the point says it was not steady)",
    )
    tolerance: float = Field(
        0.10, gt=0, le=1, description="steady: the window's two halves' tokens/s/GPU within this fraction of their mean"
    )
    hit_tolerance: float = Field(
        0.02, gt=0, le=1, description="... and their client cache hit rates within this (absolute)"
    )

    def replay_rules(self) -> dict[str, Any]:
        """These settings as the lane rules ``benchcamp.loadgen.agentx.AgentxReplay`` takes."""
        return {
            "lane_start": self.lane_start,
            "start_min_ratio": self.start_min_ratio,
            "start_max_ratio": self.start_max_ratio,
            "warmup_per_lane": self.lane_start == "sampled",
            "primer_max_tokens": 1,
            "cache_bust": self.replay_salt,
            "idle_gap_cap_s": None,
            "max_input_tokens": None,
            "barrier": self.window_opens != "at_warmup",
            "turnover_sessions": self.turnover_sessions if self.window_opens == "after_turnover" else 0.0,
            "max_warmup_s": self.max_warmup_s,
            "length_biased": self.lane_start == "sampled",
        }


# Whole numbers, as a user writes them: the default config's fingerprint depends on it.
_DEFAULT_LEVELS: list[float] = [8, 32]


class Load(Section):
    mode: Literal["closed", "open", "trace", "capacity"] = "closed"
    # closed: concurrent sessions; open: session arrivals per second; trace: time scale.
    levels: list[float] = Field(default_factory=lambda: list(_DEFAULT_LEVELS))
    arrival: Literal["poisson", "gamma"] = "poisson"
    gamma_shape: float = _le(1.0, 1000, "at most 1000 (larger is a fixed-interval process)", gt=0)
    warmup_s: float = _le(10.0, WEEK_S, _DURATION_WHY, ge=0)
    duration_s: float = _le(40.0, WEEK_S, _DURATION_WHY, gt=0)
    max_requests: int | None = _le(
        None,
        1_000_000_000,
        "at most 1e9 requests per window",
        ge=1,
        description="end the window after this many requests",
    )
    drain_s: float = _le(30.0, WEEK_S, _DURATION_WHY, ge=0)
    request_timeout_s: float = _le(300.0, WEEK_S, _DURATION_WHY, gt=0)
    workers: int = _le(
        0,
        1024,
        "at most 1024 client processes",
        ge=0,
        description="client processes; 0 = one per core less one (at least 1)",
    )
    # One point from several client hosts (benchcamp.loadgen.shards): each shard runs load.workers processes on its
    # own load-generator host (the DAG's sweep shard tasks), all started at one agreed wall time.
    shards: int = _le(
        1,
        64,
        "at most 64 load-generator hosts per point",
        ge=1,
        description="load-generator shards (hosts) a point is split across; >1 needs load.workers >= 1",
    )
    shard_barrier_timeout_s: float = _le(
        300.0, WEEK_S, _DURATION_WHY, gt=0, description="how long a shard waits for the others at a point's start"
    )
    # Each point measured this many times, interleaved across points (benchcamp.results.trials): the point's
    # figure is the mean over trials with a t-interval at regression.confidence.
    trials: int = _le(
        1,
        100,
        "at most 100 trials per point",
        ge=1,
        description="times each point is measured, interleaved across points (c4 c8 c4 c8 ...)",
    )
    min_requests: int = _le(20, 1_000_000_000, "at most 1e9 requests", ge=1)
    max_error_rate: float = Field(0.01, ge=0, le=1)
    max_incomplete_rate: float = Field(0.05, ge=0, le=1, description="requests still running when the drain ends")
    max_sched_lag_p99_ms: float = _le(50.0, 3_600_000, "at most one hour", gt=0)
    max_client_cpu: float = Field(0.9, gt=0, le=1)
    api: Literal["completions", "chat"] = "completions"
    seed: int = Field(0, ge=0, le=2**32 - 1, description="numpy seeds are 32-bit")
    # -- capacity search and clock (benchcamp.planning.capacity, benchcamp.sim.clock.virtual_point) --
    tiers: list[CapacityTier] = Field(default_factory=lambda: [CapacityTier(**t) for t in DEFAULT_TIERS])
    capacity: CapacitySearch = Field(default_factory=lambda: CapacitySearch())
    clock: Literal["wall", "virtual"] = Field("wall", description="virtual: the simulated engine in virtual time")
    # Session affinity (benchcamp.router.affinity): each request carries its session tree's id in this header,
    # for a router in front of several replicas (the simulated engine's DP router honors it).
    session_header: str = Field(
        "X-Session-ID",
        max_length=128,
        description="header carrying the per-session routing key (X-Session-ID, X-SMG-Routing-Key ...); '' = none",
    )

    @model_validator(mode="after")
    def _shards_agree(self) -> Load:
        # Every shard builds the same global plan: it must not depend on a host's cores or on shared memory.
        if self.shards > 1 and self.workers < 1:
            raise ValueError(f"load.shards={self.shards} needs load.workers >= 1 (client processes per shard)")
        if self.shards > 1 and self.max_requests is not None:
            raise ValueError(f"load.shards={self.shards}: load.max_requests counts on one host; leave it unset")
        if self.shards > 1 and self.mode == "capacity":
            raise ValueError(f"load.shards={self.shards}: load.mode=capacity runs on one host; use load.shards=1")
        if self.trials > 1 and self.mode == "capacity":
            raise ValueError(
                f"load.trials={self.trials}: load.mode=capacity searches levels, it repeats no point; "
                "use load.trials=1 (or a closed-loop sweep at the levels found)"
            )
        if self.trials > 1 and self.shards > 1:
            raise ValueError(f"load.trials={self.trials} runs on one load-generator host; use load.shards=1")
        return self

    @field_validator("session_header")
    @classmethod
    def _header_name(cls, v: str) -> str:
        from benchcamp.router.affinity import check_header_name

        why = check_header_name(v)
        if why:
            raise ValueError(f"{why}; use a header name such as X-Session-ID, or '' for none")
        return v

    # closed loop and capacity: where lanes start, recycled plays' salts, and the window's steadiness check
    steady: SteadyState = Field(default_factory=lambda: SteadyState())
    # AgentX's replay rules (closed loop and capacity: levels are live session trees); unset: benchcamp's replay
    agentx: AgentxRules | None = None

    @model_validator(mode="before")
    @classmethod
    def _agentx_sends_chat(cls, data: Any) -> Any:
        """Under load.agentx an unset load.api is the harness's (chat messages, its only AgentX endpoint), so the
        defaults are the harness's; token ids stay one setting away (an override: never a valid submission)."""
        if isinstance(data, dict) and data.get("agentx") is not None and "api" not in data:
            from benchcamp.workload.agentx.scenarios import HARNESS_API

            return {**data, "api": HARNESS_API}
        return data


AGENTX_DEFAULTS = AgentxRules().model_dump()  # the agentx scenario (the harness's default)

_PRICE_WHY = "at most $100,000 per million tokens: larger is a units mistake"


class Prices(Section):
    cached_input: float = _le(..., 100_000, _PRICE_WHY, ge=0)
    uncached_input: float = _le(..., 100_000, _PRICE_WHY, ge=0)
    output: float = _le(..., 100_000, _PRICE_WHY, ge=0)


class Pricing(Section):
    profile: str = "deepseek-v3-offpeak"
    # Set to override the profile's prices ($ per million tokens).
    usd_per_mtok: Prices | None = None


class Slo(Section):
    ttft_s: float = _le(10.0, WEEK_S, _DURATION_WHY, gt=0)
    tpot_s: float = _le(0.05, WEEK_S, _DURATION_WHY, gt=0)


class Baselines(Section):
    published: list[str] = Field(default_factory=lambda: ["agentx-vllm-deepseek"])
    history_runs: int = _le(5, 10_000, "at most 10,000 earlier runs", ge=0)
    run_id: str = ""


class Regression(Section):
    relative_threshold: float = _le(0.05, 100, "at most 100 (= 10,000%)", ge=0)
    per_metric: dict[str, float] = Field(default_factory=dict)
    confidence: float = Field(0.95, gt=0.5, lt=1)
    bootstrap_samples: int = _le(1000, 1_000_000, "at most 1,000,000 resamples", ge=100)


class Tracking(Section):
    mlflow_uri: str = "sqlite:///mlflow.db"
    experiment: str = ""
    # also write each point as llm-d's Benchmark Report v0.2.1 when tracking (`benchcamp export --format llmd-br`):
    # <execution>/benchmark_report/<point>.br.json in the results store and the campaign run's artifacts
    benchmark_report: bool = False


class Results(Section):
    store: str = "results"


# The largest level per load mode, and why.
LEVEL_MAX = {
    "closed": (
        MAX_SESSIONS,
        (
            f"closed-loop levels are concurrent sessions, at most {MAX_SESSIONS:,} (the client "
            "keeps one coroutine and its prompts per session: more exhausts its memory)"
        ),
    ),
    "open": (MAX_SESSIONS, f"open-loop levels are session arrivals per second, at most {MAX_SESSIONS:,}/s"),
    "trace": (1000.0, "trace levels are time scales (2 = twice as fast), at most 1000"),
}
LEVEL_MAX["capacity"] = LEVEL_MAX["closed"]  # the search probes closed-loop levels; load.levels are unused
