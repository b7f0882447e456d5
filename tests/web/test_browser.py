"""A person at the console, in a real browser (headless Chromium driven by Playwright).

A run parks for approval; signed in, the inbox shows it; a click approves it; a real
``tether worker`` finishes it, and the run's page says ``done`` without being reloaded. A tool
result holding a script does not run; a stranger is sent to sign in; a form posted from
another origin is refused. The same test takes the screenshots the README shows
(``TETHER_SCREENSHOTS=docs`` writes them to ``docs/``).

The browser is the system's Chromium (``/usr/bin/chromium``; ``.ci/run`` installs it), never
one Playwright downloads. Without it the test is skipped, unless ``TETHER_REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

import http.server
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import pytest

from tether import ScriptedModel, operate
from tether.journal import Decision, ModelResponse, RunStarted
from tether.models import Message
from tether.supervisor import RunStatus, Supervisor
from tether.supervisor._loop import Runtime, build_manifest
from tether.supervisor._reply import SAFE_CALL_ID
from tether.testing._pgserver import free_port

from ..cli._stores import APPROVE, REFUND_CALL, Env
from .test_security import xss_run

REPO = pathlib.Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TOKEN = "priya-browser-token-0123456789"
WAIT_MS = 30_000

pytestmark = pytest.mark.timeout(180)


def _sync(function: Any, *args: Any) -> Any:
    """``anyio.run(function, *args)`` on a thread of its own: Playwright's synchronous API
    keeps an event loop of its own running on this one."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(anyio.run(function, *args)))
    thread.start()
    thread.join()
    assert out, "the call raised (see the thread's traceback above)"
    return out[0]


def _browser_missing() -> str | None:
    if not os.path.exists(CHROMIUM):
        return f"no {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed"
    return None


@pytest.fixture
def browser_page() -> Iterator[Any]:
    missing = _browser_missing()
    if missing is not None:
        if os.environ.get("TETHER_REQUIRE_BROWSER") == "1":
            pytest.fail(f"the browser tests are required here, but {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 820})
            try:
                yield context.new_page()
            finally:
                context.close()
        finally:
            browser.close()


def _start(argv: list[str], root: pathlib.Path, log: pathlib.Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TETHER_TEST_ROOT": str(root), "PYTHONPATH": str(REPO)}
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tether.cli", *argv], cwd=REPO, env=env, stdout=out, stderr=out
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def served(tmp_path: pathlib.Path) -> Iterator[tuple[str, Env, list[subprocess.Popen[bytes]]]]:
    """A store with parked, escalated, done, failed and hostile runs, and ``tether serve``."""
    env = Env(tmp_path / "store")
    _sync(env.build)
    _sync(xss_run, env)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"priya:{TOKEN}\n")
    tokens.chmod(0o600)
    port = free_port()
    procs = [
        _start(
            [
                "serve",
                "--root",
                env.r,
                "--port",
                str(port),
                "--token-file",
                str(tokens),
                "--poll-interval",
                "0.2",
            ],
            env.root,
            tmp_path / "serve.log",
        )
    ]
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx2.get(f"{base}/login", timeout=2).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert procs[0].poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "tether serve did not start"
            time.sleep(0.1)
        yield base, env, procs
    finally:
        for proc in procs:
            _stop(proc)


class _Hostile(http.server.BaseHTTPRequestHandler):
    """Another origin whose page posts a form to the console as soon as it loads."""

    target = ""

    def do_GET(self) -> None:
        page = (
            f'<form id="f" method="post" action="{self.target}">'
            '<input name="note" value="from another site"></form>'
            "<script>document.getElementById('f').submit()</script>"
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hostile_site() -> Iterator[tuple[str, type[_Hostile]]]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", _Hostile
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _shots() -> pathlib.Path | None:
    return REPO / "docs" if os.environ.get("TETHER_SCREENSHOTS") == "docs" else None


@pytest.mark.slow
def test_approve_in_the_inbox_and_watch_the_run_finish(
    served: tuple[str, Env, list[subprocess.Popen[bytes]]],
    browser_page: Any,
    hostile_site: tuple[str, type[_Hostile]],
    tmp_path: pathlib.Path,
) -> None:
    page = browser_page
    base, env, procs = served
    shots = _shots() or tmp_path
    shots.mkdir(exist_ok=True)
    page.set_default_timeout(WAIT_MS)

    # A stranger is sent to sign in; the API refuses one too.
    page.goto(f"{base}/inbox")
    assert "/login?next=" in page.url
    assert httpx2.get(f"{base}/api/inbox").status_code == 401

    page.fill("input[name=token]", TOKEN)
    page.click("form.login button[type=submit]")
    page.wait_for_url(f"{base}/inbox")
    call = page.locator(f"section[data-run='{APPROVE}'][data-call='{REFUND_CALL}']")
    assert "issue_refund" in call.inner_text()
    assert '"order": "o-1"' in call.inner_text()
    page.screenshot(path=str(shots / "console-inbox.png"), full_page=True)

    # A form posted from another origin, with the signed-in browser's cookie: refused.
    url, handler = hostile_site
    handler.target = f"{base}/runs/{APPROVE}/calls/{REFUND_CALL}/reject"
    page.goto(url)
    page.wait_for_url(handler.target)
    assert page.locator("h1").inner_text() == "Refused"
    assert not [e for e in _sync(env.events, APPROVE) if isinstance(e, Decision)]

    # Approve with a click; a worker finishes the run; its page says done by itself.
    page.goto(f"{base}/inbox")
    call.locator("input[name=note]").fill("refund approved, customer is right")
    call.locator("button[data-action=approve]").click()
    page.wait_for_selector("p.flash.ok")
    assert "recorded: approved toolu_r1" in page.locator("p.flash.ok").inner_text()
    page.goto(f"{base}/runs/{APPROVE}")
    page.evaluate("window.__not_reloaded = true")
    page.wait_for_selector("#live-state:not([hidden])")
    procs.append(
        _start(
            ["worker", "--root", env.r, "--app", "tests.web._browser_app:app", "--quiet"],
            env.root,
            tmp_path / "worker.log",
        )
    )
    page.wait_for_selector("#run-status .s-done", timeout=WAIT_MS)  # swapped in live
    assert page.evaluate("window.__not_reloaded") is True
    (decision,) = [e for e in _sync(env.events, APPROVE) if isinstance(e, Decision)]
    assert (decision.by, decision.approved) == ("priya", True)
    page.screenshot(path=str(shots / "console-run.png"), full_page=True)

    # A tool result holding a script shows as text and runs nothing.
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.goto(f"{base}/runs/run-xss")
    assert "<script>window.__xss = 1</script>" in page.locator("main").inner_text()
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert dialogs == []

    page.goto(f"{base}/")
    page.wait_for_selector("table.runs")
    page.screenshot(path=str(shots / "console-runs.png"), full_page=True)


HIJACK = f"x/../../../{APPROVE}/calls/{REFUND_CALL}"
"""A call id a model could give, which a form's action would turn into another run's URL."""


async def _hostile_runs(env: Env) -> None:
    """Two runs whose model named a call ``HIJACK``: one journaled as an older tether would
    have (the id as given), one driven by today's supervisor (the id renamed at the
    boundary). Both wait for approval of a refund."""
    tools = env.tools()
    rt = Runtime(model=env.model(), tools=tools, load_blob=_no_blob)
    use = ScriptedModel.tool_use(HIJACK, "issue_refund", {"order": "o-9"})
    await env.craft(
        "run-hostile-old",
        [
            RunStarted(
                run_id="run-hostile-old",
                manifest=build_manifest(rt, system=None, app_version=""),
                messages=[{"role": "user", "content": "refund o-9"}],
            ),
            ModelResponse(message={"role": "assistant", "content": [use]}),
        ],
    )

    def answer(messages: list[Message]) -> Any:
        return [[use], "done"][len(messages) // 2]

    model = ScriptedModel(answer)
    async with Supervisor(env.store(), model=model, tools=tools, resume=False) as sup:
        await sup.start("run-hostile-new", "refund o-9")
        status = await sup.wait("run-hostile-new", timeout=10)
        assert status is RunStatus.WAITING_FOR_APPROVAL


async def _no_blob(ref: Any) -> Any:
    raise AssertionError("no blob here")


def test_a_hostile_call_id_cannot_approve_another_runs_call(
    served: tuple[str, Env, list[subprocess.Popen[bytes]]], browser_page: Any
) -> None:
    """Clicking Approve on a call whose id the model chose never approves another run's call
    (the browser would resolve ``x/../../../VICTIM/calls/toolu_b`` in a form's action)."""
    page = browser_page
    base, env, _procs = served
    _sync(_hostile_runs, env)
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{base}/login")
    page.fill("input[name=token]", TOKEN)
    page.click("form.login button[type=submit]")
    page.wait_for_url(f"{base}/")

    # Journaled before ids were checked: the form posts to this run's own (unknown) call.
    page.goto(f"{base}/runs/run-hostile-old")
    form = page.locator("form.answer", has=page.locator("button[data-action=approve]"))
    action = form.get_attribute("action")
    page.locator("button[data-action=approve]").click()
    page.wait_for_load_state()
    victim = [e for e in _sync(env.events, APPROVE) if isinstance(e, Decision)]
    assert victim == []
    assert f"/runs/{APPROVE}/" not in page.url
    assert action is not None
    assert "%2F" in action
    assert "/../" not in action

    # Journaled today: the call was renamed before it was journaled, and approving it
    # approves exactly that call of that run.
    (response,) = [e for e in _sync(env.events, "run-hostile-new") if isinstance(e, ModelResponse)]
    renamed = response.message["content"][0]["id"]
    assert renamed != HIJACK
    assert SAFE_CALL_ID.fullmatch(renamed)
    page.goto(f"{base}/runs/run-hostile-new")
    page.locator("button[data-action=approve]").click()
    page.wait_for_selector("p.flash.ok")
    (decision,) = [e for e in _sync(env.events, "run-hostile-new") if isinstance(e, Decision)]
    assert decision.call_id == renamed
    assert [e for e in _sync(env.events, APPROVE) if isinstance(e, Decision)] == []


async def _approve(env: Env) -> None:
    async with env.store() as store:
        await operate.decide(store, APPROVE, REFUND_CALL, approved=True, by="sam")


def test_a_live_update_keeps_the_rows_a_person_opened(
    served: tuple[str, Env, list[subprocess.Popen[bytes]]], browser_page: Any
) -> None:
    """The page swaps in new content when the run changes; what a person opened stays open and
    nothing else opens (it used to be matched by position, and an approval shifts positions)."""
    page = browser_page
    base, env, _procs = served
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{base}/login")
    page.fill("input[name=token]", TOKEN)
    page.click("form.login button[type=submit]")
    page.wait_for_url(f"{base}/")
    page.goto(f"{base}/runs/{APPROVE}")
    page.wait_for_selector("#live-state:not([hidden])")
    answer = page.locator("details[data-key='event 1'] > summary")
    answer.click()
    assert page.locator("details[data-key='event 1']").get_attribute("open") is not None
    assert page.locator("details[data-key='event 0']").get_attribute("open") is None
    page.evaluate("window.__not_reloaded = true")
    _sync(_approve, env)  # another person approves: the run changes, the page follows
    deadline = time.monotonic() + 30
    while "by sam" not in page.locator("#live").inner_text():
        assert time.monotonic() < deadline, "the page did not follow the run"
        time.sleep(0.1)
    assert page.evaluate("window.__not_reloaded") is True
    assert page.locator("details[data-key='event 1']").get_attribute("open") is not None
    assert page.locator("details[data-key='event 0']").get_attribute("open") is None
