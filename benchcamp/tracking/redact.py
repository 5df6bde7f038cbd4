"""What may leave the process as MLflow params, tags and config artifacts: see :mod:`benchcamp.secrets`,
the one secrets module (kept importable here for older imports)."""

from benchcamp.secrets import (
           MASK,
           MLFLOW_PARAM_VALUE_MAX,
           argv_secrets,
           is_secret_key,
           mask_argv,
           redact,
           safe_params,
           scrub,
)

__all__ = ["MASK", "MLFLOW_PARAM_VALUE_MAX", "argv_secrets", "is_secret_key", "mask_argv", "redact", "safe_params",
           "scrub"]
