"""From params.yaml and ``--set`` overrides to a resolved :class:`~benchcamp.config.model.Config`: reading the
file, applying dotted overrides, the one-line errors that name the key and the fix, and the topology a config
describes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from benchcamp.config.model import Config
from benchcamp.config.sections import DEFAULT_PARAMS
from benchcamp.errors import ConfigError
from benchcamp.topology.model import Role, Topology


def parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. --set engine.max_num_seqs=256")
    key, _, raw = text.partition("=")
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {text!r}: the key must be dotted section.field, e.g. engine.max_num_seqs")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML ({exc.__class__.__name__})") from exc
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str] | dict[str, Any]) -> dict[str, Any]:
    """Return a copy of ``data`` with dotted overrides applied.

    Paths are checked against the schema so a typo names the valid keys.
    """
    data = copy.deepcopy(data)
    items = (
        overrides.items()
        if isinstance(overrides, dict)
        else ((".".join(p), v) for p, v in map(parse_override, overrides))
    )
    for dotted, value in items:
        path = dotted.split(".")
        _check_path(path)
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{dotted}: {part} is not a section")
        node[path[-1]] = value
    return data


def _check_path(path: list[str]) -> None:
    model: Any = Config
    for i, part in enumerate(path):
        fields = getattr(model, "model_fields", None)
        if fields is None:
            # a free-form dict field (e.g. regression.per_metric): anything goes below
            return
        if part not in fields:
            where = ".".join(path[:i]) or "the top level"
            raise ConfigError(
                f"{'.'.join(path)}: unknown key {part!r} in {where}; valid keys: {', '.join(sorted(fields))}"
            )
        model = _model_of(fields[part].annotation)


def _model_of(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _format_errors(exc: ValidationError, source: str) -> str:
    lines = [f"invalid configuration in {source}:"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        kind = err["type"]
        if kind == "extra_forbidden":
            parent = ".".join(str(p) for p in err["loc"][:-1])
            lines.append(
                f"  {loc}: unknown key; remove it or check the spelling"
                f"{' (see the ' + parent + ' section in params.yaml)' if parent else ''}"
            )
        elif kind == "value_error":
            lines.append(f"  {str(err['msg']).removeprefix('Value error, ')}")
        elif kind == "finite_number":
            lines.append(f"  {loc}: must be a finite number, got {err.get('input')!r}; give a number")
        elif kind in ("less_than_equal", "less_than") and (why := _why(err["loc"])):
            lines.append(f"  {loc}={err.get('input')}: {why}")
        else:
            lines.append(f"  {loc}: {err['msg']} (got {err.get('input')!r})")
    return "\n".join(lines)


def _why(loc: tuple[Any, ...]) -> str:
    """The ``why`` of the bounded field at ``loc`` ('' when it has none)."""
    model: Any = Config
    info = None
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            break
        info = fields[part]
        model = _model_of(info.annotation)
    extra = getattr(info, "json_schema_extra", None)
    return str(extra.get("why", "")) if isinstance(extra, dict) else ""


# The topology a config deploys: its ``topology:`` section, else the one-role unified topology of the flat
# ``engine`` + ``hardware`` sections.
def topology_of(cfg: Config) -> Topology:
    """``cfg.topology`` when set; else one unified engine of engine.tensor_parallel_size x data_parallel_size on
    hardware.gpu_count GPUs (data_parallel_size_local ranks per node when set: vLLM's multi-node launch)."""
    if cfg.topology is not None:
        return cfg.topology
    e = cfg.engine
    local = e.data_parallel_size_local or e.data_parallel_size
    role = Role(
        instances=1,
        nodes_per_instance=e.data_parallel_size // local,
        gpus_per_node=local * e.tensor_parallel_size,
        tensor_parallel_size=e.tensor_parallel_size,
        data_parallel_size=e.data_parallel_size,
        data_parallel_size_local=e.data_parallel_size_local,
        enable_expert_parallel=e.enable_expert_parallel,
        max_num_seqs=e.max_num_seqs,
        max_num_batched_tokens=e.max_num_batched_tokens,
        kv_offloading_size_gib=e.kv_offloading_size_gib,
        gpu=cfg.hardware.gpu,
        extra_args=list(e.extra_args),
    )
    return Topology(unified=role)


def from_dict(data: dict[str, Any], source: str = "config") -> Config:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of sections at the top level, got {type(data).__name__}")
    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source)) from None
    _check_names(cfg, source)
    from benchcamp.topology.validate import check as check_topology

    try:
        check_topology(cfg.topology, cfg.hardware.gpu_count, cfg.engine.model_profile)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return cfg


def _check_names(cfg: Config, source: str) -> None:
    """Names that point into the shipped data files: a typo fails now, not after the sweep."""
    from benchcamp.pricing import list_profiles
    from benchcamp.profiles import check_profile
    from benchcamp.verdicts.baselines import list_published

    try:
        check_profile("gpus", "hardware.gpu", cfg.hardware.gpu)
        if cfg.engine.engine_profile:
            check_profile("engines", "engine.engine_profile", cfg.engine.engine_profile)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None

    if cfg.pricing.usd_per_mtok is None and cfg.pricing.profile not in list_profiles():
        raise ConfigError(
            f"{source}: pricing.profile={cfg.pricing.profile!r} is unknown; use one of "
            f"{', '.join(list_profiles())}, or set pricing.usd_per_mtok"
        )
    unknown = [n for n in cfg.baselines.published if n not in list_published()]
    if unknown:
        raise ConfigError(
            f"{source}: baselines.published: {', '.join(unknown)} unknown; published baselines "
            f"are {', '.join(list_published())} (benchcamp/data/baselines.yaml)"
        )


def read_params(path: str | Path = DEFAULT_PARAMS) -> dict[str, Any]:
    """The params file as a dict. Only the default ``params.yaml`` may be absent (embedded
    defaults, so commands run in any folder); a path given explicitly must exist."""
    p = Path(path)
    if not p.exists():
        if str(path) == DEFAULT_PARAMS:
            return {}
        raise ConfigError(
            f"--params {p}: no such file; give an existing params file, or omit --params to use "
            f"{DEFAULT_PARAMS} (the embedded defaults where it is absent)"
        )
    if p.is_dir():
        raise ConfigError(f"--params {p}: is a folder; give a params YAML file")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of sections at the top level")
    return data


def load_config(
    path: str | Path | None = DEFAULT_PARAMS, overrides: list[str] | dict[str, Any] | None = None
) -> Config:
    """params file + overrides -> Config. ``path=None``: the embedded defaults; a missing
    ``params.yaml`` (the default name) too; any other missing path is a ConfigError."""
    data = read_params(path) if path else {}
    source = str(path or "defaults")
    if overrides:
        data = apply_overrides(data, overrides)
        # the bad value may be an override: say so, not just "in params.yaml"
        source += " with --set overrides" if isinstance(overrides, list) else " with overrides"
    return from_dict(data, source)


def show(cfg: Config) -> str:
    body = yaml.safe_dump(cfg.to_dict(), sort_keys=False)
    return f"{body}# fingerprint: {cfg.fingerprint()}\n"
