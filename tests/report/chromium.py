"""Open a local HTML file in a real headless Chromium over the DevTools protocol and report
what a reader would see: JavaScript errors, console errors, every request the page made, and
each image's decoded and displayed size. Used by the report tests (and by hand for a screenshot).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import psutil

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-quic", "--remote-debugging-port=0",
         "--window-size=1280,900"]
IMAGES_JS = """JSON.stringify(Array.from(document.images).map(i => ({
  plot: i.closest('figure') ? i.closest('figure').dataset.plot : null,
  complete: i.complete, natural_w: i.naturalWidth, natural_h: i.naturalHeight,
  shown_w: i.getBoundingClientRect().width, shown_h: i.getBoundingClientRect().height,
  src_scheme: i.src.split(':')[0]})))"""


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


@dataclass
class PageReport:
    title: str = ""
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    images: list[dict] = field(default_factory=list)
    tables: int = 0
    screenshot_png: bytes = b""


class _Cdp:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse, report: PageReport) -> None:
        self.ws, self.report, self.next_id = ws, report, 0
        self.pending: dict[int, asyncio.Future] = {}
        self.loaded = asyncio.Event()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
                continue
            method, params = data.get("method"), data.get("params", {})
            if method == "Runtime.exceptionThrown":
                d = params["exceptionDetails"]
                what = d.get("exception", {}).get("description") or d["text"]
                self.report.errors.append(f"exception: {what}")
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                self.report.errors.append(f"console.{params['type']}: {params['args']}")
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                self.report.errors.append(f"log: {params['entry']['text']}")
            elif method == "Network.requestWillBeSent":
                self.report.requests.append(params["request"]["url"][:80])
            elif method == "Network.loadingFailed":
                self.report.errors.append(f"loading failed: {params.get('errorText')}")
            elif method == "Page.loadEventFired":
                self.loaded.set()

    async def call(self, method: str, **params) -> dict:
        self.next_id += 1
        fut = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = fut
        await self.ws.send_str(json.dumps({"id": self.next_id, "method": method, "params": params}))
        data = await asyncio.wait_for(fut, 30)
        if "error" in data:
            raise RuntimeError(f"{method}: {data['error']}")
        return data.get("result", {})


async def _drive(port: int, page: Path, report: PageReport) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/json/list") as resp:
            targets = await resp.json()
        ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        async with http.ws_connect(ws_url, max_msg_size=0) as ws:
            cdp = _Cdp(ws, report)
            for domain in ("Runtime", "Log", "Page", "Network"):
                await cdp.call(f"{domain}.enable")
            await cdp.call("Page.navigate", url=page.resolve().as_uri())
            await asyncio.wait_for(cdp.loaded.wait(), 60)
            await asyncio.sleep(0.5)  # late errors, image decoding
            evaluate = await cdp.call("Runtime.evaluate", expression=IMAGES_JS, returnByValue=True)
            report.images = json.loads(evaluate["result"]["value"])
            title = await cdp.call("Runtime.evaluate", expression="document.title", returnByValue=True)
            report.title = title["result"]["value"]
            count_tables = "document.querySelectorAll('table').length"
            tables = await cdp.call("Runtime.evaluate", expression=count_tables, returnByValue=True)
            report.tables = tables["result"]["value"]
            shot = await cdp.call("Page.captureScreenshot", format="png")
            report.screenshot_png = base64.b64decode(shot["data"])
            cdp.reader.cancel()


def open_page(page: Path, chromium: str, timeout_s: float = 120) -> PageReport:
    """Start Chromium headless, load `page` from file://, and report what happened."""
    report = PageReport()
    # its renderer, zygote and crashpad children may still write the profile when the browser is
    # killed: kill its whole process group, wait for it, and never fail a test on the temp dir
    with tempfile.TemporaryDirectory(prefix="satbench-chromium-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            port = None
            for line in proc.stderr:  # "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/…"
                if m := re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line):
                    port = int(m.group(1))
                    break
            if port is None:
                raise RuntimeError(f"chromium exited (code {proc.wait()}) without a DevTools port")
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep its pipe drained
            asyncio.run(asyncio.wait_for(_drive(port, page, report), timeout_s))
        finally:
            _kill_group(proc)
    return report


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL Chromium's process group (it leads its own session) and wait until none of it is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = [p for p in psutil.process_iter(["pid", "status"])
                if p.info["status"] != psutil.STATUS_ZOMBIE and _pgid(p.info["pid"]) == proc.pid]
        if not left:
            return
        time.sleep(0.05)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None
