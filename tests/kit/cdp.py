"""A minimal headless-Chromium driver over the DevTools protocol (tests and benchmarks/service/site.py).

Uses the system `chromium` and `websocket-client`; downloads nothing. One browser per instance,
a fresh profile in a temporary folder, no network features.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--remote-allow-origins=*",
    "--remote-debugging-port=0",
]


def find_chromium() -> str | None:
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


class Browser:
    def __init__(self, binary: str | None = None, width: int = 1400, height: int = 900) -> None:
        import websocket  # test dependency (websocket-client)

        binary = binary or find_chromium()
        if binary is None:
            raise RuntimeError("chromium not found")
        self.profile = tempfile.mkdtemp(prefix="regress-chromium-")
        self.proc = subprocess.Popen(
            [
                binary,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        port = self._port()
        deadline = time.time() + 20
        page = None
        while page is None and time.time() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as resp:
                targets = json.load(resp)
            page = next((t for t in targets if t.get("type") == "page"), None)
            if page is None:
                time.sleep(0.1)
        if page is None:
            self.close()
            raise RuntimeError("chromium opened no page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def _port(self) -> int:
        assert self.proc.stderr is not None
        deadline = time.time() + 30
        seen = []
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                if self.proc.poll() is not None:
                    break
                continue
            seen.append(line)
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                return int(m.group(1))
        self.close()
        raise RuntimeError("chromium did not start: " + "".join(seen[-5:]))

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_event(self, method: str, timeout: float = 20) -> dict[str, Any]:
        deadline = time.time() + timeout
        for i, ev in enumerate(self.events):
            if ev["method"] == method:
                return self.events.pop(i)
        while time.time() < deadline:
            self.ws.settimeout(max(0.1, deadline - time.time()))
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                if msg["method"] == method:
                    return msg
                self.events.append(msg)
        raise TimeoutError(method)

    def open(self, path: Path | str) -> None:
        """Navigates to a file (or URL) and waits for its load event."""
        url = path if isinstance(path, str) and "://" in path else Path(path).resolve().as_uri()
        self.events = [e for e in self.events if e["method"] != "Page.loadEventFired"]
        self.send("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def eval(self, expression: str) -> Any:
        res = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"page exception: {res['exceptionDetails']}")
        return res["result"].get("value")

    def drain(self) -> None:
        """Collects pending events (console messages arrive asynchronously)."""
        self.ws.settimeout(0.2)
        try:
            while True:
                msg = json.loads(self.ws.recv())
                if "method" in msg:
                    self.events.append(msg)
        except Exception:
            pass
        finally:
            self.ws.settimeout(30)

    def console_errors(self) -> list[str]:
        self.drain()
        errors = []
        for ev in self.events:
            p = ev.get("params", {})
            if ev["method"] == "Runtime.exceptionThrown":
                errors.append(
                    str(
                        p.get("exceptionDetails", {}).get("exception", {}).get("description")
                        or p.get("exceptionDetails")
                    )
                )
            elif ev["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif ev["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                errors.append(f"{p['entry'].get('text')} {p['entry'].get('url', '')}")
        return errors

    def clear_events(self) -> None:
        self.drain()
        self.events = []

    def mouse_move(self, x: float, y: float) -> None:
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)

    def screenshot(self, path: Path, full_page: bool = False) -> None:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            h = self.eval("document.documentElement.scrollHeight")
            w = self.eval("document.documentElement.scrollWidth")
            params["clip"] = {"x": 0, "y": 0, "width": w, "height": min(h, 4000), "scale": 1}
        data = self.send("Page.captureScreenshot", **params)["data"]
        Path(path).write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
