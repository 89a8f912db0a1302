#!/usr/bin/env python3
"""The chat page of waste serve in headless Chromium (Debian's), driven
over the DevTools protocol: type a message, send it, read the streamed
answer back with its speed; then a second turn, which the server resumes
from the state it kept (its /metrics count reused tokens); then thinking and
tool-call chunks shown apart. scripts/openai_check.sh runs it.

    chat_page_test.py WASTE CONTAINER
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import websocket

sys.path.insert(0, os.path.dirname(__file__))
from serve_client_test import free_port, start  # noqa: E402


class Page:
    """One tab, spoken to over its DevTools websocket."""

    def __init__(self, ws_url):
        self.ws = websocket.create_connection(ws_url, timeout=30)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def eval(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expression, seconds=120):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.eval(expression):
                return True
            time.sleep(0.1)
        return False


def metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def main():
    waste, container = sys.argv[1], sys.argv[2]
    browser = shutil.which("chromium")
    if not browser:
        print("FAIL chromium is not installed (scripts/deps.sh installs it)")
        return 1
    proc, port = start(waste, container)
    profile = tempfile.mkdtemp()
    debug = free_port()
    chrome = subprocess.Popen([browser, "--headless=new", "--no-sandbox", "--disable-gpu",
                               f"--remote-debugging-port={debug}", f"--user-data-dir={profile}",
                               "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    failures = []

    def check(name, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail), flush=True)
        if not ok:
            failures.append(name)

    try:
        deadline = time.time() + 60
        targets = None
        while time.time() < deadline and targets is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{debug}/json/list", timeout=2) as r:
                    targets = [t for t in json.load(r) if t["type"] == "page"]
            except OSError:
                time.sleep(0.2)
        page = Page(targets[0]["webSocketDebuggerUrl"])
        page.call("Page.enable")
        page.call("Page.navigate", url=f"http://127.0.0.1:{port}/")
        check("the page loads", page.wait("document.readyState === 'complete' && "
                                          "!!document.getElementById('input')", 30))
        check("the page names the model", page.wait(
            "document.getElementById('model').textContent.startsWith('model: ') && "
            "document.getElementById('model').textContent.length > 7", 30),
            page.eval("document.getElementById('model').textContent"))

        def say(text, turn):
            # Typing: focus the box, insert the text as keystrokes would, press Enter.
            page.eval("document.getElementById('input').focus()")
            page.call("Input.insertText", text=text)
            page.call("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter",
                      windowsVirtualKeyCode=13, text="\r")
            page.call("Input.dispatchKeyEvent", type="keyUp", key="Enter", code="Enter",
                      windowsVirtualKeyCode=13)
            done = page.wait(f"document.querySelectorAll('.turn.assistant[data-done], "
                             f".turn.error[data-done]').length >= {turn}")
            replies = page.eval("[...document.querySelectorAll('.turn')].map("
                                "d => [d.className, d.textContent])")
            return done, replies

        done, turns = say("What does the os module do?", 1)
        check("a first reply is streamed into the page", done and len(turns) == 2 and
              turns[0] == ["turn user", "What does the os module do?"] and
              turns[1][0] == "turn assistant" and len(turns[1][1]) > 0, str(turns))
        speed = page.eval("document.querySelector('.turn.assistant .speed').textContent")
        check("the reply's speed is shown",
              bool(re.fullmatch(r"\d+ tokens, [\d.]+ tok/s", speed or "")), str(speed))
        check("no thinking shown when there was none",
              page.eval("document.querySelector('.turn.assistant .thinking').hidden") is True)
        reused_before = metric(port, "waste_serve_reused_tokens_total")
        done, turns = say("And the sys module?", 2)
        check("a second reply follows it", done and len(turns) == 4 and
              turns[3][0] == "turn assistant" and len(turns[3][1]) > 0, str(turns))
        reused = metric(port, "waste_serve_reused_tokens_total")
        check("the second turn resumed from the kept state", reused is not None and
              reused > (reused_before or 0), f"{reused_before} -> {reused}")
        # Thinking and tool calls, as the server streams them (serve/openai.h's
        # chunks; the demo model writes neither): the thinking folded apart,
        # each call's name and arguments joined as they arrive.
        shown = page.eval("""(() => {
            const t = addReply();
            for (const d of [{reasoning_content: "Two "}, {reasoning_content: "cities."},
                             {content: "Checking."},
                             {tool_calls: [{index: 0, id: "call_a", type: "function",
                                            function: {name: "get_weather", arguments: ""}}]},
                             {tool_calls: [{index: 0, function: {arguments: '{"city": '}}]},
                             {tool_calls: [{index: 1, id: "call_b", type: "function",
                                            function: {name: "get_time", arguments: ""}}]},
                             {tool_calls: [{index: 0, function: {arguments: '"Paris"}'}}]},
                             {tool_calls: [{index: 1, function: {arguments: "{}"}}]}])
              applyDelta(t, d);
            const r = [t.thinking.tagName, t.thinking.hidden, t.thinking.open,
                       t.thought.textContent, t.text.textContent,
                       [...t.calls.children].map(c => c.textContent)];
            t.div.remove();
            return r;
        })()""")
        check("thinking folded apart, tool calls as they stream", shown == [
            "DETAILS", False, False, "Two cities.", "Checking.",
            ['get_weather({"city": "Paris"})', "get_time({})"]], str(shown))
    finally:
        chrome.terminate()
        chrome.wait(30)
        shutil.rmtree(profile, ignore_errors=True)
        proc.terminate()
        proc.wait(30)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
