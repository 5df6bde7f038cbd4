"""The endpoint provider: an engine someone else runs, at a URL.

Nothing is created or destroyed. The API key comes from the caller (tasks/
reads it from the Airflow connection ``provider.endpoint.airflow_conn_id``)
or from the environment variable ``provider.endpoint.api_key_env``; it is
resolved in ``deploy`` and never stored on the node.
"""

from __future__ import annotations

from urllib.parse import urlparse

from benchcamp.config import Config
from benchcamp.errors import ConfigError
from benchcamp.provision.base import Node, Provider, check_execution_id


class EndpointProvider(Provider):
    kind = "endpoint"

    def __init__(self, cfg: Config):
        self.cfg = cfg

    def provision(self, execution_id: str) -> Node:
        check_execution_id(execution_id)
        url = self.cfg.provider.endpoint.url.rstrip("/")
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(
                f"provider.endpoint.url={url!r}: expected http(s)://host[:port]; give the server's base URL without /v1"
            )
        if parsed.path.rstrip("/").endswith("/v1"):
            raise ConfigError(f"provider.endpoint.url={url!r}: drop the trailing /v1; benchcamp adds the paths")
        return Node(kind="endpoint", host=url, node_id=parsed.netloc, meta={"execution_id": execution_id})

    def deprovision(self, node: Node) -> None:
        return None  # not ours to stop
