"""Secrets kept out of argv, logs, results and MLflow: the registry of secret-bearing flags and variables
(``redaction``) and references that find a secret again where it is needed (``refs``)."""
