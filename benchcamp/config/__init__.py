"""The campaign configuration: one typed, validated schema for params.yaml.

Everything downstream receives a resolved :class:`Config`; nothing reads
params.yaml twice. Unknown keys and wrong types are errors that name the key and
the fix. ``--set a.b=value`` overrides are parsed as YAML scalars/lists.

The fingerprint is the sha256 of the canonical JSON of the resolved config,
without the sections that do not change what is measured (``tracking``,
``results``): logging to another MLflow server is the same benchmark. Workload
paths are hashed relative to the project (as params.yaml writes them), so a
config whose paths a worker made absolute, or the same params in another
checkout, has the same fingerprint.

Three modules, imported here so callers name only ``benchcamp.config``: ``sections`` (each section's
model, its bounds and defaults, what the fingerprint leaves out), ``model`` (:class:`Config`, the checks
across sections, the fingerprint) and ``loading`` (params.yaml and overrides to a Config, the one-line
errors, the topology a config describes).
"""

from __future__ import annotations

from benchcamp.config.loading import (
    apply_overrides,
    from_dict,
    load_config,
    parse_override,
    read_params,
    show,
    topology_of,
)
from benchcamp.config.model import (
    Config,
    canonical_json,
    default_engine_profile,
    flatten,
    project_dirs,
    project_relative,
)
from benchcamp.config.sections import (
    AGENTX_DEFAULTS,
    DEFAULT_ENGINE_PROFILE,
    DEFAULT_ENGINE_PROFILE_BY_GPU,
    DEFAULT_NESTED_NOT_FINGERPRINTED,
    DEFAULT_PARAMS,
    DEFAULT_TIERS,
    KV_CACHE_DTYPES,
    LEVEL_MAX,
    MAX_SESSIONS,
    NON_FINGERPRINT_KEYS,
    NON_FINGERPRINT_SECTIONS,
    PINNED_VLLM,
    PROJECT_DIR_ENV,
    PROJECT_RELATIVE_KEYS,
    UNSET_NOT_FINGERPRINTED,
    UNSET_SECTIONS_NOT_FINGERPRINTED,
    WEEK_S,
    AgentxRules,
    Baselines,
    Campaign,
    CapacitySearch,
    CapacityTier,
    Ec2Provider,
    EndpointProvider,
    Engine,
    Hardware,
    KvCacheDtype,
    Load,
    LocalProvider,
    Prices,
    Pricing,
    Provider,
    Regression,
    Results,
    Section,
    Slo,
    SlurmProvider,
    SteadyState,
    Tracking,
    Workload,
)
from benchcamp.errors import ConfigError

__all__ = [
    "LEVEL_MAX",
    "Section",
    "AGENTX_DEFAULTS",
    "AgentxRules",
    "Baselines",
    "Campaign",
    "CapacitySearch",
    "CapacityTier",
    "Config",
    "ConfigError",
    "DEFAULT_ENGINE_PROFILE",
    "DEFAULT_ENGINE_PROFILE_BY_GPU",
    "DEFAULT_NESTED_NOT_FINGERPRINTED",
    "DEFAULT_PARAMS",
    "DEFAULT_TIERS",
    "Ec2Provider",
    "EndpointProvider",
    "Engine",
    "Hardware",
    "KV_CACHE_DTYPES",
    "KvCacheDtype",
    "Load",
    "LocalProvider",
    "MAX_SESSIONS",
    "NON_FINGERPRINT_KEYS",
    "NON_FINGERPRINT_SECTIONS",
    "PINNED_VLLM",
    "PROJECT_DIR_ENV",
    "PROJECT_RELATIVE_KEYS",
    "Prices",
    "Pricing",
    "Provider",
    "Regression",
    "Results",
    "Slo",
    "SlurmProvider",
    "SteadyState",
    "Tracking",
    "UNSET_NOT_FINGERPRINTED",
    "UNSET_SECTIONS_NOT_FINGERPRINTED",
    "WEEK_S",
    "Workload",
    "apply_overrides",
    "canonical_json",
    "default_engine_profile",
    "flatten",
    "from_dict",
    "load_config",
    "parse_override",
    "project_dirs",
    "project_relative",
    "read_params",
    "show",
    "topology_of",
]
