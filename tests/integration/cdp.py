"""cdp.py: a small driver for Debian's headless chromium over the Chrome DevTools
Protocol, for the browser tests (test_dashboard.py) and bench/dashboard_cost.py.
It needs only chromium and python3-websocket (both Debian packages installed by
scripts/install-deps): nothing else is downloaded.

One Chromium object is one chromium process with a throwaway profile directory
and one page. Every wait is bounded; close() (or leaving a `with` block) always
kills chromium and removes its profile, whatever happened before.

While it talks to the page it records what a test checks afterwards:
  errors    console errors, uncaught exceptions and error log entries, as text
  requests  the URL of every request the page made
"""

import base64
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

try:
    import websocket  # python3-websocket (websocket-client)
except ImportError:  # the caller says so, with the fix
    websocket = None


class CdpError(Exception):
    """chromium could not be started or driven, or a wait ran out."""


def find_chromium():
    """The chromium executable on PATH, or None."""
    for name in ("chromium", "chromium-browser"):
        p = shutil.which(name)
        if p:
            return p
    return None


def _js(value):
    """A Python value as a JavaScript literal."""
    return json.dumps(value)


class Chromium:
    """A headless chromium with one page, driven over its DevTools socket.

    Invariants: after start() returns, self.proc is running chromium, self.ws is
    connected to the page target, and self.profile exists; after close() none of
    them remain. Message ids increase by one per command; events read while
    waiting for a command's answer are handled (recorded) in arrival order."""

    def __init__(self, executable=None, width=1280, height=900, start_timeout_s=60.0,
                 command_timeout_s=30.0):
        self.executable = executable or find_chromium()
        self.width, self.height = width, height
        self.start_timeout_s = start_timeout_s
        self.command_timeout_s = command_timeout_s
        self.proc = None
        self.ws = None
        self.profile = None
        self.log_path = None
        self._log = None
        self._next_id = 0
        self._events = []          # events not yet asked for by wait_event
        self.errors = []
        self.requests = []
        self._doc_status = {}      # loaderId -> HTTP status of the document

    # ---- life ----

    def start(self):
        if not self.executable:
            raise CdpError("chromium is not installed (scripts/install-deps installs it)")
        if websocket is None:
            raise CdpError("python3-websocket is not installed "
                           "(scripts/install-deps installs it)")
        try:
            self._launch()
            self._attach()
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.send(f"{domain}.enable")
            self.send("Emulation.setDeviceMetricsOverride",
                      {"width": self.width, "height": self.height,
                       "deviceScaleFactor": 1, "mobile": False})
        except BaseException:
            self.close()
            raise
        return self

    def _launch(self):
        self.profile = tempfile.mkdtemp(prefix="gpuq-chromium-")
        self.log_path = os.path.join(self.profile, "chromium.log")
        self._log = open(self.log_path, "wb")
        env = dict(os.environ, HOME=self.profile, XDG_CONFIG_HOME=self.profile,
                   XDG_CACHE_HOME=self.profile)
        args = [self.executable, "--headless=new", "--remote-debugging-port=0",
                "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--metrics-recording-only",
                f"--window-size={self.width},{self.height}",
                f"--user-data-dir={os.path.join(self.profile, 'data')}", "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=self._log, env=env, start_new_session=True)

    def log_tail(self, n=3000):
        """The end of chromium's own output, for error messages."""
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except (OSError, TypeError):
            return ""

    def _attach(self):
        deadline = time.monotonic() + self.start_timeout_s
        pattern = re.compile(rb"DevTools listening on (ws://[^\s]+)")
        browser_url = None
        while browser_url is None:
            with open(self.log_path, "rb") as f:
                m = pattern.search(f.read())
            if m:
                browser_url = m.group(1).decode()
                break
            if self.proc.poll() is not None:
                raise CdpError(f"chromium exited ({self.proc.returncode}) before it listened: "
                               f"{self.log_tail()}")
            if time.monotonic() > deadline:
                raise CdpError(f"chromium did not say where it listens in "
                               f"{self.start_timeout_s:.0f} s: {self.log_tail()}")
            time.sleep(0.05)
        port = int(re.match(r"ws://[^:/]+:(\d+)/", browser_url).group(1))
        page_url = None
        while page_url is None:
            for t in self._targets(port):
                if t.get("type") == "page" and t.get("webSocketDebuggerUrl"):
                    page_url = t["webSocketDebuggerUrl"]
                    break
            else:
                if time.monotonic() > deadline:
                    raise CdpError("chromium shows no page target")
                time.sleep(0.05)
        left = max(1.0, deadline - time.monotonic())
        # No Origin header: chromium refuses DevTools sockets from other origins.
        self.ws = websocket.create_connection(page_url, timeout=left, suppress_origin=True,
                                              http_no_proxy=["127.0.0.1", "localhost"])

    @staticmethod
    def _targets(port):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", "/json/list")
            r = conn.getresponse()
            body = r.read()
            if r.status != 200:
                raise CdpError(f"GET /json/list answered {r.status}")
            return json.loads(body)
        finally:
            conn.close()

    def close(self):
        """Kills chromium and removes its profile; safe to call more than once."""
        if self.ws is not None:
            try:
                self.ws.close(timeout=1)
            except Exception:  # the socket may already be gone
                pass
            self.ws = None
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGTERM)
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
                except ProcessLookupError:
                    self.proc.wait()
            # Helpers left in chromium's process group go too.
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.profile is not None:
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    # ---- protocol ----

    def _read(self, deadline, what):
        """One message from the page socket, waiting until deadline at most."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise CdpError(f"timed out waiting for {what}")
        self.ws.settimeout(left)
        try:
            raw = self.ws.recv()
        except websocket.WebSocketTimeoutException:
            raise CdpError(f"timed out waiting for {what}") from None
        except (websocket.WebSocketException, OSError) as e:
            raise CdpError(f"the DevTools socket failed while waiting for {what}: {e}; "
                           f"{self.log_tail()}") from None
        return json.loads(raw)

    def send(self, method, params=None, timeout_s=None):
        """Runs one command and returns its result; events met meanwhile are recorded."""
        self._next_id += 1
        mid = self._next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params or {}}))
        deadline = time.monotonic() + (timeout_s or self.command_timeout_s)
        while True:
            msg = self._read(deadline, f"the answer to {method}")
            if msg.get("id") == mid:
                if "error" in msg:
                    raise CdpError(f"{method}: {msg['error'].get('message')}")
                return msg.get("result", {})
            if "method" in msg:
                self._event(msg)

    def _event(self, msg):
        method, p = msg["method"], msg.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") == "error":
            parts = [str(a.get("value", a.get("description", ""))) for a in p.get("args", [])]
            self.errors.append("console: " + " ".join(parts))
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            text = d.get("exception", {}).get("description") or d.get("text", "")
            self.errors.append("page error: " + text)
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            e = p["entry"]
            self.errors.append(f"log ({e.get('source')}): {e.get('text')} {e.get('url', '')}")
        elif method == "Network.requestWillBeSent":
            self.requests.append(p.get("request", {}).get("url", ""))
        elif method == "Network.responseReceived" and p.get("type") == "Document":
            self._doc_status[p.get("loaderId")] = p.get("response", {}).get("status")
        self._events.append(msg)

    def wait_event(self, method, timeout_s, match=None):
        """The first event named method (and matching match(params)) since the last
        wait_event that took one; events before it are dropped from the backlog."""
        deadline = time.monotonic() + timeout_s
        while True:
            while self._events:
                msg = self._events.pop(0)
                if msg["method"] == method and (match is None or match(msg.get("params", {}))):
                    return msg.get("params", {})
            msg = self._read(deadline, f"the event {method}")
            if "method" in msg:
                self._event(msg)

    # ---- page ----

    def navigate(self, url, timeout_s=30.0):
        """Loads url and waits for its load event; returns the document's HTTP status."""
        self._events.clear()
        r = self.send("Page.navigate", {"url": url}, timeout_s)
        if r.get("errorText"):
            raise CdpError(f"navigating to {url}: {r['errorText']}")
        self.wait_event("Page.loadEventFired", timeout_s)
        return self._doc_status.get(r.get("loaderId"))

    def evaluate(self, expression, timeout_s=None):
        """The value of a JavaScript expression in the page (promises awaited)."""
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True}, timeout_s)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            text = d.get("exception", {}).get("description") or d.get("text", "")
            raise CdpError(f"evaluating {expression!r}: {text}")
        return r.get("result", {}).get("value")

    def wait_for(self, expression, timeout_s, what=None, interval_s=0.05):
        """Polls expression until it is truthy and returns its value; bounded."""
        deadline = time.monotonic() + timeout_s
        while True:
            v = self.evaluate(expression)
            if v:
                return v
            if time.monotonic() > deadline:
                raise CdpError(f"timed out after {timeout_s:.0f} s waiting for "
                               f"{what or expression}")
            time.sleep(interval_s)

    def _center(self, selector):
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({_js(selector)});"
            f" if (!e) return null; e.scrollIntoView({{block: 'center'}});"
            f" const r = e.getBoundingClientRect();"
            f" return {{x: r.x + r.width / 2, y: r.y + r.height / 2,"
            f" w: r.width, h: r.height}}; }})()")
        if not box:
            raise CdpError(f"no element matches {selector}")
        if box["w"] == 0 or box["h"] == 0:
            raise CdpError(f"{selector} is not visible")
        return box["x"], box["y"]

    def type(self, selector, text):
        """Focuses the element and types text into it as keyboard input would."""
        ok = self.evaluate(f"(() => {{ const e = document.querySelector({_js(selector)});"
                           f" if (!e) return false; e.focus();"
                           f" return document.activeElement === e; }})()")
        if not ok:
            raise CdpError(f"cannot focus {selector}")
        self.send("Input.insertText", {"text": text})

    def click(self, selector):
        """A left click at the middle of the element, as a mouse would."""
        x, y = self._center(selector)
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent",
                      {"type": kind, "x": x, "y": y, "button": "left",
                       "clickCount": 0 if kind == "mouseMoved" else 1})

    def url(self):
        return self.evaluate("location.href")

    def screenshot(self, path, full_page=True):
        """Saves the page as a PNG (all of it with full_page); returns its size."""
        params = {"format": "png"}
        if full_page:
            m = self.send("Page.getLayoutMetrics")
            size = m.get("cssContentSize") or m["contentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": max(size["width"], 1),
                              "height": max(size["height"], 1), "scale": 1}
            params["captureBeyondViewport"] = True
        data = base64.b64decode(self.send("Page.captureScreenshot", params)["data"])
        with open(path, "wb") as f:
            f.write(data)
        return len(data)
