"""A page in headless Chromium driven over the DevTools protocol (aiohttp websocket): load a
file, click, evaluate JavaScript, and collect console messages, exceptions and every network
request the page made."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from tests.test_report import CHROMIUM


class Page:
    """One Chromium page; events are kept in ``console``, ``errors`` and ``requests``."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0
        self.console: list[str] = []
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.loaded = False

    def _event(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params") or {}
        if method == "Runtime.consoleAPICalled":
            self.console.append(f"{params.get('type')}: {params.get('args')}")
        elif method == "Runtime.exceptionThrown":
            self.errors.append(str(params.get("exceptionDetails")))
        elif method == "Log.entryAdded":
            entry = params.get("entry") or {}
            if entry.get("level") in ("error", "warning"):
                self.errors.append(f"{entry.get('source')}: {entry.get('text')}")
        elif method == "Network.requestWillBeSent":
            self.requests.append(str((params.get("request") or {}).get("url")))
        elif method == "Page.loadEventFired":
            self.loaded = True

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        wanted = self.next_id
        await self.ws.send_str(json.dumps({"id": wanted, "method": method, "params": params}))
        while True:
            message = json.loads((await self.ws.receive(timeout=60)).data)
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result") or {})
            self._event(message)

    async def wait_loaded(self) -> None:
        while not self.loaded:
            self._event(json.loads((await self.ws.receive(timeout=60)).data))

    async def evaluate(self, expression: str, *, awaitPromise: bool = False) -> Any:  # noqa: N803
        result = await self.send(
            "Runtime.evaluate",
            expression=expression,
            returnByValue=True,
            awaitPromise=awaitPromise,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(str(result["exceptionDetails"]))
        return result["result"].get("value")


def drive(url: str, profile: Path, script: Callable[[Page], Any]) -> tuple[Any, Page]:
    """Start Chromium, open ``url`` with every event collected, run ``await script(page)``."""
    process = subprocess.Popen(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 90
        port = None
        while port is None and time.monotonic() < deadline:
            line = process.stderr.readline()
            found = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if found:
                port = int(found.group(1))
            elif not line and process.poll() is not None:
                break
        assert port is not None, "Chromium did not open its DevTools port"
        return asyncio.run(_session(port, url, script))
    finally:
        process.kill()
        process.wait()


async def _session(port: int, url: str, script: Callable[[Page], Any]) -> tuple[Any, Page]:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/json/list") as response:
            targets = await response.json()
        ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
        async with http.ws_connect(ws_url, max_msg_size=0) as ws:
            page = Page(ws)
            for domain in ("Page", "Runtime", "Log", "Network"):
                await page.send(f"{domain}.enable")
            await page.send("Page.navigate", url=url)
            await page.wait_loaded()
            return await script(page), page
