"""What a person sees and can do on the job console, read from a real Chromium tab over CDP.

``ConsolePage`` wraps ``tests.integration.cdp.Page`` with the questions a tester asks of a page:
which buttons are shown (laid out, visible after CSS, opacity and every ancestor, with a box of
their own), which of them a click at their centre would reach (nothing drawn over them, not
disabled), which text a person reads (``innerText``: rendered text only), which fields are shown
and what they say. Clicks and typing go through CDP's input events, as a person's would. A probe
installed before every document records Content-Security-Policy violations (markup that tried to
run) and whether the page's layout is wider than the window.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.integration.cdp import Browser, Page

PROBE = r"""
window.__probe = (() => {
  const violations = [];
  document.addEventListener("securitypolicyviolation", (e) =>
    violations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sample || ""}`));
  const norm = (s) => (s || "").replace(/\s+/g, " ").trim();
  const shown = (el) => {
    if (!el || !el.isConnected) return false;
    if (!el.checkVisibility({ checkOpacity: true, checkVisibilityCSS: true })) return false;
    const r = el.getBoundingClientRect();
    return r.width > 1 && r.height > 1;
  };
  const label = (el) => norm(el.innerText || el.value || el.getAttribute("aria-label") || el.title);
  const buttons = () =>
    [...document.querySelectorAll("button, input[type=submit], input[type=button], [role=button]")]
      .filter(shown);
  const describe = (el) => norm([
    el.getAttribute("placeholder"), el.getAttribute("aria-label"), el.name, el.type,
    ...[...(el.labels || [])].map((l) => l.innerText),
  ].filter(Boolean).join(" | "));
  const fields = () =>
    [...document.querySelectorAll("textarea, select, input")]
      .filter((f) => !["hidden", "submit", "button"].includes(f.type) && shown(f));
  const reach = (el) => {
    el.scrollIntoView({ block: "center", inline: "center" });
    const r = el.getBoundingClientRect();
    const x = r.left + r.width / 2, y = r.top + r.height / 2;
    const hit = document.elementFromPoint(x, y);
    return { x, y, hit: !!hit && (el === hit || el.contains(hit)), disabled: !!el.disabled,
             // on the page's first screen across: reached without scrolling sideways
             inside: r.left + window.scrollX >= 0
               && r.right + window.scrollX <= document.documentElement.clientWidth + 1 };
  };
  const findButton = (name, nth) => buttons().filter((b) => label(b) === name)[nth || 0];
  const findField = (pattern, nth) => {
    const re = new RegExp(pattern, "i");
    return fields().filter((f) => re.test(describe(f)))[nth || 0];
  };
  const wide = () =>
    [...document.querySelectorAll("body *")]
      .filter((e) => shown(e) && e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
      .map((e) => {
        const right = Math.round(e.getBoundingClientRect().right);
        return `${e.tagName.toLowerCase()}.${e.className} right=${right} "${norm(e.innerText).slice(0, 40)}"`;
      })
      .slice(0, 8);
  return {
    wide, violations, norm, shown, label, buttons, describe, fields, reach, findButton, findField,
    view: () => ({
      text: document.body ? document.body.innerText : "",
      buttons: buttons().map(label),
      fields: fields().map((f) => ({ what: describe(f), value: f.value, tag: f.tagName.toLowerCase() })),
      width: document.documentElement.scrollWidth,
      window: document.documentElement.clientWidth,
      violations: violations.slice(),
      pwned: window.__pwned || null,
      hostile: [...document.querySelectorAll("[id^=pwned-], [onerror]")]
        .map((e) => e.outerHTML.slice(0, 120)),
    }),
  };
})();
"""


class ConsolePage:
    """One console tab: read what it shows, click and type as a person does, take screenshots."""

    def __init__(self, page: Page, shots: Path, target: str | None = None) -> None:
        self.page = page
        self.target = target
        """The tab's CDP target id, for a tab this test opened (closed by ``close``)."""
        self.shots = shots
        self.dialogs: list[dict[str, str]] = []
        """The dialogs the page opened (``type``, ``message``), in order."""
        self.port = 0
        self.replies: list[str | bool] = []
        """How to answer the next dialogs: a prompt's text, ``True`` (OK) or ``False`` (Cancel)."""
        page.call("Page.enable")
        page.call("Page.addScriptToEvaluateOnNewDocument", source=PROBE)

    @classmethod
    def first_tab(cls, browser: Browser, shots: Path) -> ConsolePage:
        """The browser's first tab."""
        return cls(browser.page(), shots)

    @classmethod
    def new_tab(cls, browser: Browser, url: str, shots: Path) -> ConsolePage:
        """A second tab of the same browser (same profile, so the same stored token)."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{browser.port}/json/new?about:blank", method="PUT"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            target = json.load(response)
        tab = cls(Page(target["webSocketDebuggerUrl"]), shots, target["id"])
        tab.port = browser.port
        if url:
            tab.goto(url)
        return tab

    def goto(self, url: str) -> None:
        """Navigate and wait until the document has loaded."""
        self.page.call("Page.navigate", url=url)
        self._loaded()

    def reload(self) -> None:
        """Reload as a person does (F5) and wait until the document has loaded."""
        self.page.evaluate("window.__probe && (window.__probe.stale = true)")
        self.page.call("Page.reload", ignoreCache=True)
        self._loaded()

    def _loaded(self) -> None:
        self.page.wait_for(
            "document.readyState === 'complete' && !!window.__probe && !window.__probe.stale", 60
        )

    def js(self, expression: str) -> Any:
        """Evaluate JavaScript in the page (``P`` is the probe)."""
        return self.page.evaluate(f"(() => {{ const P = window.__probe; return ({expression}); }})()")

    def view(self) -> dict[str, Any]:
        """What the page shows now: ``text``, ``buttons``, ``fields``, ``width`` (the layout's),
        ``window`` (the viewport's, without its scroll bar), ``violations``, ``pwned``, ``hostile``
        (elements made of hostile markup)."""
        return dict(self.js("P.view()"))

    def text(self) -> str:
        return str(self.js("P.view().text"))

    def buttons(self) -> list[str]:
        return list(self.js("P.view().buttons"))

    def wait(self, check: str, timeout: float = 90, what: str = "") -> Any:
        """Wait until the JavaScript ``check`` (``P`` is the probe, ``V`` the view) is truthy."""
        expression = (
            "(() => { const P = window.__probe; if (!P) return null; const V = P.view(); "
            f"return ({check}); }})()"
        )
        try:
            return self.page.wait_for(expression, timeout)
        except TimeoutError:
            self.shot(f"timeout-{int(time.time())}")
            raise AssertionError(
                f"the page never showed {what or check} in {timeout:g} s; it shows: {self.view()}"
            ) from None

    def wait_text(self, needle: str, timeout: float = 90) -> None:
        """Wait until ``needle`` is part of the text a person reads."""
        self.wait(f"V.text.includes({json.dumps(needle)})", timeout, f"the text {needle!r}")

    def wait_button(self, name: str, shown: bool = True, timeout: float = 90) -> None:
        """Wait until the button ``name`` is shown (or gone, with ``shown=False``)."""
        test = "" if shown else "!"
        self.wait(
            f"{test}V.buttons.includes({json.dumps(name)})",
            timeout,
            f"{'' if shown else 'no '}{name!r} button",
        )

    def clickable(self, name: str, nth: int = 0) -> dict[str, Any] | None:
        """Where the ``nth`` shown button ``name`` is, scrolled into view: ``hit`` (a click at its
        centre reaches it), ``disabled``, ``inside`` (within the window's width without scrolling
        sideways), ``x``/``y``; ``None`` when no such button is shown."""
        found = self.js(
            f"(() => {{ const b = P.findButton({json.dumps(name)}, {nth}); "
            "return b ? P.reach(b) : null; })()"
        )
        return None if found is None else dict(found)

    def click(self, name: str, nth: int = 0) -> None:
        """Click the ``nth`` shown button ``name`` with the mouse, where a person would, once the
        page shows it (a panel may render a moment after the state that opens it)."""
        self.wait(f"!!P.findButton({json.dumps(name)}, {nth})", 60, f"a {name!r} button")
        where = self.clickable(name, nth)
        assert where is not None, f"no {name!r} button is shown; the buttons are {self.buttons()}"
        assert where["hit"] and not where["disabled"], f"the {name!r} button cannot be clicked: {where}"
        self._mouse(where["x"], where["y"])

    def click_text(self, needle: str) -> None:
        """Click the innermost shown element whose text holds ``needle`` (an item of the list)."""
        where = self.js(
            f"""(() => {{
              const all = [...document.querySelectorAll("body *")].filter((e) =>
                P.shown(e) && (e.innerText || "").includes({json.dumps(needle)}));
              const inner = all.filter((e) => !all.some((o) => o !== e && e.contains(o)));
              return inner.length ? P.reach(inner[0]) : null; }})()"""
        )
        assert where is not None, f"no shown element holds {needle!r}: {self.text()[:2000]}"
        self._mouse(where["x"], where["y"])

    def click_on(self, selector: str) -> None:
        """Click the first shown element matching the CSS ``selector`` at its centre, once a click
        there reaches it (nothing drawn over it)."""
        where = self.wait(
            f"(() => {{ const e = [...document.querySelectorAll({json.dumps(selector)})].find(P.shown); "
            "if (!e) return null; const at = P.reach(e); return at.hit ? at : null; })()",
            60,
            f"a clickable {selector}",
        )
        self._mouse(where["x"], where["y"])

    def _mouse(self, x: float, y: float) -> None:
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """A CDP command; a dialog the page opens meanwhile (``alert``, ``confirm``, ``prompt``) is
        recorded in ``dialogs`` and answered with ``reply`` (the next of ``replies``, else
        accepted with no text)."""
        ws = self.page.ws
        self.page._next += 1
        mine = self.page._next
        ws.send(json.dumps({"id": mine, "method": method, "params": params}))
        while True:
            message = json.loads(ws.recv())
            if message.get("method") == "Page.javascriptDialogOpening":
                dialog = message["params"]
                self.dialogs.append({"type": dialog["type"], "message": dialog["message"]})
                reply = self.replies.pop(0) if self.replies else True
                self.page._next += 1
                answer: dict[str, Any] = {"accept": reply is not False}
                if isinstance(reply, str):
                    answer["promptText"] = reply
                ws.send(
                    json.dumps(
                        {"id": self.page._next, "method": "Page.handleJavaScriptDialog", "params": answer}
                    )
                )
            elif message.get("id") == mine:
                if "error" in message:
                    raise RuntimeError(f"{method} failed: {message['error']}")
                return dict(message.get("result", {}))

    def fields(self) -> list[dict[str, Any]]:
        return list(self.js("P.view().fields"))

    def fill(self, pattern: str, text: str, nth: int = 0) -> None:
        """Replace the text of the ``nth`` shown field whose placeholder, label or name matches the
        regular expression ``pattern``, typing as a person does."""
        where = self.js(
            f"(() => {{ const f = P.findField({json.dumps(pattern)}, {nth}); if (!f) return null; "
            "const at = P.reach(f); f.focus(); if (f.select) f.select(); return at; })()"
        )
        assert where is not None, f"no shown field matches {pattern!r}: {self.fields()}"
        assert where["hit"], f"the field {pattern!r} is covered: {where}"
        self.page.call("Input.insertText", text=text)

    def press_enter(self) -> None:
        """Press Enter in the focused element."""
        for kind in ("keyDown", "keyUp"):
            self.page.call(
                "Input.dispatchKeyEvent",
                type=kind,
                key="Enter",
                code="Enter",
                windowsVirtualKeyCode=13,
                **({"text": "\r"} if kind == "keyDown" else {}),
            )

    def show_overflow(self) -> bool:
        """Scroll the first element wider than the window into view (for a screenshot)."""
        return bool(
            self.js(
                "(() => { const w = document.documentElement.clientWidth; "
                "const e = [...document.querySelectorAll('body *')]"
                ".find((e) => P.shown(e) && e.getBoundingClientRect().right > w + 1); "
                "if (e) { e.scrollIntoView({ block: 'center' }); window.scrollTo(0, window.scrollY); } "
                "return !!e; })()"
            )
        )

    def block_event_streams(self) -> None:
        """From now on, hold every request for job events unanswered (a stalled event stream)."""
        self.page.call("Fetch.enable", patterns=[{"urlPattern": "*/events*", "requestStage": "Request"}])

    def shot(self, name: str, full: bool = True) -> Path:
        """Save a PNG of the page (the whole page with ``full``) as ``<shots>/<name>.png``."""
        import base64

        data = self.page.call("Page.captureScreenshot", format="png", captureBeyondViewport=full)["data"]
        path = self.shots / f"{name}.png"
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        """Disconnect; a tab opened by ``new_tab`` is closed too."""
        self.page.close()
        if self.target is not None:
            base = f"http://127.0.0.1:{self.port}/json"
            with urllib.request.urlopen(f"{base}/close/{self.target}", timeout=10):
                pass
            # Closing is asynchronous: until the tab is gone, /json/list may still name it first,
            # and the next test's first tab would be this closing one.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                with urllib.request.urlopen(f"{base}/list", timeout=10) as response:
                    if not any(t.get("id") == self.target for t in json.load(response)):
                        return
                time.sleep(0.1)
            raise AssertionError(f"chromium never closed the tab {self.target}")
