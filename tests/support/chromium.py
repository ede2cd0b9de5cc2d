"""Headless Chromium driven over the DevTools protocol (a websocket, ``websockets``' sync client), for
tests that look at pages as a person sees them. Debian's package ``chromium`` provides the browser."""

from __future__ import annotations

import base64
import itertools
import json
import os
import signal
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)  # fmt: skip


class Chromium:
    """One browser process with a fresh profile in ``profile``; stop it with :meth:`stop`."""

    def __init__(self, profile: Path, width: int = 1400, height: int = 1000) -> None:
        from websockets.sync.client import connect

        profile.mkdir(parents=True, exist_ok=True)
        active = profile / "DevToolsActivePort"
        active.unlink(missing_ok=True)  # a profile's earlier browser left it
        self.log = profile.parent / f"{profile.name}.log"
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                 f"--window-size={width},{height}", "about:blank"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while not (active.exists() and len(active.read_text().splitlines()) >= 2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Chromium did not start:\n{self.log.read_text()[-2000:]}")
            time.sleep(0.1)
        port, path = active.read_text().splitlines()[:2]
        self._connection = ExitStack()
        try:
            self.socket = self._connection.enter_context(
                connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=30)
            )
        except Exception:
            self.stop()
            raise
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 60) -> dict[str, Any]:  # fmt: skip
        """Send a command (to a page's ``session``) and return its result; its error raises."""
        message_id = next(self._ids)
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.socket.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self.socket.recv(timeout=max(deadline - time.monotonic(), 0.01)))
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def new_page(self) -> Page:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        page.call("Page.enable")
        page.call("Runtime.enable")
        return page

    def stop(self) -> None:
        connection = getattr(self, "_connection", None)
        if connection is not None:
            connection.close()
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=20)


class Page:
    """A tab of :class:`Chromium`."""

    def __init__(self, browser: Chromium, session: str) -> None:
        self.browser = browser
        self.session = session

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.call(method, params, self.session)

    def set_cookie(self, name: str, value: str, url: str) -> None:
        self.call("Network.setCookie", {"name": name, "value": value, "url": url, "path": "/"})

    def clear_cookies(self) -> None:
        self.call("Network.clearBrowserCookies")

    def navigate(self, url: str) -> None:
        result = self.call("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise RuntimeError(f"navigating to {url}: {result['errorText']}")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-able values)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}…: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 90, what: str = "") -> Any:
        """The first truthy value of ``expression``, polled until ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except RuntimeError:
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                shown = self.evaluate("document.documentElement.outerHTML.slice(0, 3000)")
                raise AssertionError(f"waited {timeout:.0f} s for {what or expression}; the page:\n{shown}")
            time.sleep(0.25)

    def screenshot(self, *paths: Path, scale: float = 1.0) -> bytes:
        """A PNG of the viewport (``scale``: its size, 1 for full), written to each of ``paths``."""
        params: dict[str, Any] = {"format": "png"}
        if scale != 1.0:
            viewport = self.call("Page.getLayoutMetrics")["cssLayoutViewport"]
            params["clip"] = {"x": 0, "y": 0, "width": viewport["clientWidth"],
                              "height": viewport["clientHeight"], "scale": scale}  # fmt: skip
        data = base64.b64decode(self.call("Page.captureScreenshot", params)["data"])
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return data
