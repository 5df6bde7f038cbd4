"""An aiohttp application on 127.0.0.1 (a free port), served by an event loop of its own in a background
thread: the lifecycle of the fake servers here (timed_server.py, plain_openai_server.py)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Self

from aiohttp import web


class ThreadedServer:
    """Subclasses build their application (``app``); ``start``/``stop``, or a ``with`` block, run it."""

    name = "server"  # the thread's name, and the error's when it does not start
    runner_options: dict[str, Any] = {}  # for web.AppRunner

    def __init__(self) -> None:
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def app(self) -> web.Application:
        raise NotImplementedError

    def start(self) -> Self:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True, name=self.name)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"{self.name} did not start")
        return self

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None, **self.runner_options)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def stop(self) -> None:
        if self._loop is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)  # type: ignore[union-attr]
        try:
            fut.result(10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)  # type: ignore[union-attr]

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
