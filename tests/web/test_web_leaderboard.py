"""The web leaderboard in a real browser: coordinator + worker (fake engine) on loopback, jobs
submitted with the pkb CLI, pages read by headless Chromium over the DevTools protocol.

PKB_WEB_SCREENSHOT_DIR=dir writes the screenshots there (docs/ keeps the checked-in ones)."""
import base64
import json
import os
import pathlib
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
import websocket

REPO = pathlib.Path(__file__).resolve().parents[2]


def _bin(var, default):
    path = os.environ.get(var) or str(REPO / default)
    if not os.path.exists(path):
        pytest.fail(f"{var}: {path} does not exist")
    return path


def _wait_file(path, seconds=15):
    end = time.time() + seconds
    while time.time() < end:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


class Service:
    def __init__(self, tmp):
        self.tmp, self.procs = tmp, []
        self.cli = _bin("PKB_CLI_BIN", "build/client/pkb")
        engine = _bin("PKB_FAKE_ENGINE", "tests/service/fake_pkb_eval.sh")
        env = dict(os.environ, FAKE_PKB_EVAL_DELAY="0.01")
        log = open(tmp / "service.log", "ab")
        self.procs.append(subprocess.Popen(
            [_bin("PKB_COORDINATOR_BIN", "build/server/pkb-coordinator"), "--listen", "127.0.0.1:0",
             "--db", str(tmp / "jobs.db"), "--engine", engine, "--port-file", str(tmp / "port"),
             "--http-listen", "127.0.0.1:0", "--http-port-file", str(tmp / "http_port")],
            stdout=log, stderr=log, env=env))
        self.grpc = f"127.0.0.1:{_wait_file(tmp / 'port')}"
        self.http = f"http://127.0.0.1:{_wait_file(tmp / 'http_port')}"
        self.procs.append(subprocess.Popen(
            [_bin("PKB_WORKER_BIN", "build/worker/daemon/pkb-worker"), "--coordinator", self.grpc,
             "--worker-id", "w1", "--engine", engine, "--scratch", str(tmp), "--gpu-class", "cpu"],
            stdout=log, stderr=log, env=env))

    def submit(self, source, problem=1, *args):
        return self.submit_events(source, problem, *args)[0]

    def submit_events(self, source, problem=1, *args):
        """(job id, every event as the submitter's own stream shows it)."""
        path = self.tmp / f"cand{len(list(self.tmp.glob('cand*')))}.cu"
        path.write_text(source)
        # An OK result ranks once its confirmation run is done: the CLI follows that run too.
        out = subprocess.run([self.cli, "--coordinator", self.grpc, "--json", "submit", str(path),
                              "-p", str(problem), "-w", "2", "--wait-confirmation", *args],
                             capture_output=True, text=True, timeout=60)
        events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        assert events and events[-1]["stage"] == "DONE", out.stdout + out.stderr
        job = events[0]["jobId"]
        return job, [e for e in events if e["jobId"] == job]

    def get(self, path):
        with urllib.request.urlopen(self.http + path, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()

    def stop(self):
        for p in reversed(self.procs):
            p.kill()
            p.wait()


class Chromium:
    """Headless Chromium driven over the DevTools protocol (one page)."""

    def __init__(self, tmp):
        exe = os.environ.get("PKB_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
        if not exe:
            pytest.fail("chromium is not installed (scripts/install-deps.sh installs it)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--window-size=1280,900",
             f"--remote-debugging-port={port}", "--remote-allow-origins=*",
             f"--user-data-dir={tmp / 'chrome'}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=open(tmp / "chromium.log", "ab"))
        end, target = time.time() + 60, None
        while time.time() < end and target is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                    target = next((t for t in json.load(r) if t["type"] == "page"), None)
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.2)
        assert target, "chromium did not open its DevTools port:\n" + (tmp / "chromium.log").read_text()
        self.ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=60,
                                              suppress_origin=True)
        self.next_id = 0
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.errors = []

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("method") == "Runtime.exceptionThrown":
                self.errors.append(msg["params"]["exceptionDetails"])
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return msg["result"]

    def js(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, awaitPromise=True,
                      returnByValue=True)
        if "exceptionDetails" in r:
            raise AssertionError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expression, seconds=20):
        end = time.time() + seconds
        while time.time() < end:
            if self.js(expression):
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {expression}: " +
                             str(self.js("document.body && document.body.innerText.slice(0, 500)")))

    def goto(self, url):
        self.js("document.body && (document.body.dataset.ready = '0')")
        self.call("Page.navigate", url=url)
        self.wait("!!document.body && document.body.dataset.ready === '1'")

    def rows(self, table_id, column):
        return self.js(f"""[...document.querySelectorAll('#{table_id} tbody tr')]
            .map(r => r.cells[{column}] && r.cells[{column}].textContent)""")

    def click(self, selector):
        self.js(f"document.querySelector({json.dumps(selector)}).click()")

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self):
        self.ws.close()
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("web")
    svc = Service(tmp)
    jobs = {
        "alice": svc.submit("FAKE_OK FAKE_SPEEDUP=2.4", 1, "--submitter", "alice", "--model",
                            "model-a", "--agent", "loop/1", "--tag", "exp1"),
        "bob": svc.submit("FAKE_OK FAKE_SPEEDUP=1.3", 1, "--submitter", "bob", "--model", "model-b"),
        "carol": svc.submit("FAKE_OK FAKE_SPEEDUP=0.7", 1, "--submitter", "carol", "--model",
                            "model-c"),
        "alice2": svc.submit("FAKE_OK FAKE_SPEEDUP=1.6", 2, "--submitter", "alice", "--model",
                             "model-a"),
        "bob2": svc.submit("FAKE_OK FAKE_SPEEDUP=3.1", 2, "--submitter", "bob", "--model",
                           "model-b"),
        "ce": svc.submit("FAKE_COMPILE_ERROR", 1, "--submitter", "dave", "--model", "model-d"),
    }
    chrome = Chromium(tmp)
    yield svc, chrome, jobs
    chrome.close()
    svc.stop()


def test_json_and_csv_endpoints_serve_public_data_only(world):
    svc, _, jobs = world
    status, headers, body = svc.get("/api/v1/leaderboard?problem=1")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    board = json.loads(body)["boards"][0]
    assert [e["submitter"] for e in board["entries"]] == ["alice", "bob", "carol"]
    _, headers, csv = svc.get("/api/v1/leaderboard?problem=1&format=csv")
    assert headers["Content-Type"].startswith("text/csv")
    assert csv.splitlines()[1].startswith("1,1_allreduce,2,bfloat16,cpu,1,alice,model-a,loop/1,2.4,")
    _, _, suite = svc.get("/api/v1/suite?world_size=2&format=csv")
    assert suite.splitlines()[0] == "model,tasks,tasks_correct,geomean_speedup,fast_0,fast_1,fast_1.5,fast_2"
    _, _, sub = svc.get(f"/api/v1/submissions/{jobs['ce']}")
    assert "FAKE_COMPILE_ERROR" not in sub and "expected ;" not in sub  # no source, no diagnostics
    assert json.loads(sub)["job"]["result"]["status"] == "COMPILE_ERROR"
    for path, code in [("/api/v1/submissions/nope", 404), ("/api/v1/leaderboard?problem=x", 400),
                       ("/api/v1/leaderboard?seeds=maybe", 400), ("/nothing", 404)]:
        with pytest.raises(urllib.error.HTTPError) as e:
            svc.get(path)
        assert e.value.code == code, path
    req = urllib.request.Request(svc.http + "/api/v1/leaderboard", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(req, timeout=10)


def test_suite_page_shows_models_chart_and_problems(world):
    svc, chrome, _ = world
    chrome.goto(svc.http + "/#/?world_size=2")
    assert chrome.rows("suite-table", 0) == ["model-b", "model-a", "model-c"]  # by fast_1
    assert chrome.rows("suite-table", 1) == ["2 / 2", "2 / 2", "1 / 2"]
    assert chrome.js("document.querySelectorAll('#speedup-chart rect.bar').length") == 5
    assert chrome.rows("problems-table", 1) == ["1_allreduce", "2_allgather"]
    chrome.click("#suite-table th[data-key='geomean']")  # sorts by geomean, best first
    assert chrome.rows("suite-table", 0) == ["model-b", "model-a", "model-c"]
    chrome.click("#suite-table th[data-key='geomean']")
    assert chrome.rows("suite-table", 0) == ["model-c", "model-a", "model-b"]
    chrome.click("#suite-table th[data-key='model']")
    assert chrome.rows("suite-table", 0) == ["model-a", "model-b", "model-c"]
    if os.environ.get("PKB_WEB_SCREENSHOT_DIR"):
        chrome.click("#suite-table th[data-key='fast_1']")
        chrome.screenshot(pathlib.Path(os.environ["PKB_WEB_SCREENSHOT_DIR"]) / "leaderboard-suite.png")
    assert not chrome.errors


def test_problem_board_sorts_and_filters(world):
    svc, chrome, _ = world
    chrome.goto(svc.http + "/#/problem/1")
    assert chrome.rows("board-0", 1) == ["alice", "bob", "carol"]   # best first
    assert chrome.rows("board-0", 4) == ["2.400×", "1.300×", "0.700×"]
    assert chrome.rows("board-0", 5)[0] == "confirmed (2.400×, then 2.400×)"
    chrome.click("#board-0 th[data-key='speedup']")                 # same column: ascending
    assert chrome.rows("board-0", 1) == ["carol", "bob", "alice"]
    chrome.click("#board-0 th[data-key='submitter']")
    assert chrome.rows("board-0", 1) == ["alice", "bob", "carol"]
    chrome.click("#board-0 th[data-key='submitter']")
    assert chrome.rows("board-0", 1) == ["carol", "bob", "alice"]
    assert "sort=submitter" in chrome.js("location.hash")           # the view is linkable
    chrome.js("""(() => { const f = document.getElementById('filter');
                 f.value = 'model-b'; f.dispatchEvent(new Event('input')); })()""")
    assert chrome.rows("board-0", 1) == ["bob"]
    chrome.goto(svc.http + "/#/problem/1?q=carol")                   # the filter from the URL
    assert chrome.rows("board-0", 1) == ["carol"]
    chrome.goto(svc.http + "/#/problem/1?by=model")
    assert chrome.rows("board-0", 2) == ["model-a", "model-b", "model-c"]
    if os.environ.get("PKB_WEB_SCREENSHOT_DIR"):
        chrome.goto(svc.http + "/#/problem/1")
        chrome.screenshot(pathlib.Path(os.environ["PKB_WEB_SCREENSHOT_DIR"]) / "leaderboard-problem.png")
    assert not chrome.errors


def test_submission_page_shows_verdict_timings_and_events(world):
    svc, chrome, jobs = world
    chrome.goto(svc.http + f"/#/job/{jobs['alice']}")
    assert chrome.js("document.getElementById('verdict').textContent") == "OK"
    assert "Ranks on the leaderboard" in chrome.js("document.getElementById('ranks').textContent")
    confirmation = chrome.js("document.getElementById('confirmation').textContent")
    assert confirmation.startswith("Confirmation: confirmed (2.400×, then 2.400×)"), confirmation
    assert chrome.rows("timings", 0) == ["candidate", "baseline"]
    assert chrome.rows("timings", 1) == ["6.25", "15.00"]
    stages = chrome.rows("events", 2)
    assert stages[0] == "QUEUED" and stages[-1] == "DONE" and "BENCHMARKING" in stages
    # The profile's timeline: a bar per record, the candidate's kernels numbered, not named.
    assert chrome.js("document.querySelectorAll('#profile rect').length") == 3
    titles = chrome.js("[...document.querySelectorAll('#profile title')].map(t => t.textContent).join('|')")
    assert "kernel 1: 6.25 µs" in titles and "fake_kernel" not in titles, titles
    assert "copy peer to peer" in titles and "ncclDevKernel_AllReduce" in titles, titles
    chrome.goto(svc.http + f"/#/job/{jobs['ce']}")
    assert chrome.js("document.getElementById('verdict').textContent") == "COMPILE_ERROR"
    assert "does not rank" in chrome.js("document.getElementById('ranks').textContent").lower()
    chrome.goto(svc.http + "/#/job/nope")
    assert "Cannot load" in chrome.js("document.getElementById('error').textContent")
    assert not chrome.errors


MARKER = "leakmark_7f3a"  # a name in the candidates' source that must never be public


@pytest.fixture(scope="module")
def leaky(tmp_path_factory):
    """A service whose candidates' every free-text field (messages, diagnostics, rank errors...)
    quotes their source (the fake engine's FAKE_LEAKY_MESSAGE), with each kind of verdict."""
    svc = Service(tmp_path_factory.mktemp("leaky"))
    line = f"int {MARKER} = 1; // FAKE_LEAKY_MESSAGE"
    jobs, private = {}, {}
    for name, source, args in [
            ("ok", f"FAKE_OK FAKE_SPEEDUP=2.0\n{line}\n", ["--model", "model-leak"]),
            ("ce", f"FAKE_COMPILE_ERROR\n{line}\n", []),
            ("mismatch", f"FAKE_MISMATCH\n{line}\n", []),
            ("rejected", f"FAKE_REJECT\n{line}\n", []),
            ("no_device", f"{line}\n", [])]:
        jobs[name], private[name] = svc.submit_events(source, 1, "--submitter", "eve", *args)
    yield svc, jobs, private
    svc.stop()


def test_no_endpoint_shows_text_from_a_submission(leaky):
    svc, jobs, private = leaky
    # The engine did put the source's text everywhere: the submitter's own stream shows it.
    for name, events in private.items():
        assert MARKER in json.dumps(events), name
    paths = ["/api/v1/problems", "/api/v1/leaderboard", "/api/v1/leaderboard?problem=1",
             "/api/v1/leaderboard?by=model", "/api/v1/leaderboard?format=csv",
             "/api/v1/leaderboard?by=model&format=csv", "/api/v1/suite", "/api/v1/suite?format=csv",
             "/api/v1/suite?world_size=2&format=csv", "/", "/app.js"]
    for job in jobs.values():
        paths += [f"/api/v1/submissions/{job}", f"/api/v1/submissions/{job}?format=csv"]
    for path in paths:
        _, _, body = svc.get(path)
        assert MARKER not in body, f"{path}: {body[:2000]}"
    board = json.loads(svc.get("/api/v1/leaderboard?problem=1")[2])["boards"][0]
    assert [e["jobId"] for e in board["entries"]] == [jobs["ok"]]  # the OK job does rank
    sub = json.loads(svc.get(f"/api/v1/submissions/{jobs['mismatch']}")[2])
    result = sub["job"]["result"]
    assert result["message"] == "MISMATCH on rank 1, trial 2"
    assert result["rankTrials"][0]["outputs"][0]["badCount"] == "3"
    assert result["rankTrials"][0]["error"] == "" and result["failedRankLog"] == ""
    assert sub["events"][-1]["message"] == "MISMATCH on rank 1, trial 2"
    ok = json.loads(svc.get(f"/api/v1/submissions/{jobs['ok']}")[2])
    assert ok["job"]["result"]["message"] == "OK: correct on every rank in every trial"
    assert ok["job"]["result"]["stageSeconds"] == {"compile": 0.1, "verify": 0.2, "benchmark": 0.2}
    messages = [e["message"] for e in ok["events"]]
    assert set(messages) == {"queued", "compiling", "benchmarking", "OK: correct on every rank in "
                             "every trial"} | {f"trial {t} ok" for t in range(5)}, messages


def test_submission_page_renders_scrubbed_data(world, leaky):
    _, chrome, _ = world
    svc, jobs, _ = leaky
    chrome.goto(svc.http + f"/#/job/{jobs['mismatch']}")
    assert chrome.js("document.getElementById('verdict').textContent") == "MISMATCH"
    text = chrome.js("document.body.innerText")
    assert "MISMATCH on rank 1, trial 2" in text and MARKER not in text
    assert chrome.rows("events", 2)[-1] == "DONE"
    chrome.goto(svc.http + f"/#/job/{jobs['ok']}")
    assert chrome.js("document.getElementById('verdict').textContent") == "OK"
    assert chrome.rows("timings", 1) == ["7.50", "15.00"]
    assert MARKER not in chrome.js("document.body.innerText")
    chrome.goto(svc.http + "/#/problem/1")
    assert chrome.rows("board-0", 1) == ["eve"]
    assert MARKER not in chrome.js("document.documentElement.outerHTML")
    assert not chrome.errors


def test_https_with_the_coordinators_certificate(tmp_path):
    """With --tls-cert/--tls-key the web leaderboard speaks HTTPS only, with the same certificate."""
    import ssl
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem")],
                   check=True, capture_output=True)
    log = open(tmp_path / "coordinator.log", "ab")
    proc = subprocess.Popen(
        [_bin("PKB_COORDINATOR_BIN", "build/server/pkb-coordinator"), "--listen", "127.0.0.1:0",
         "--db", str(tmp_path / "jobs.db"),
         "--engine", _bin("PKB_FAKE_ENGINE", "tests/service/fake_pkb_eval.sh"),
         "--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem"),
         "--port-file", str(tmp_path / "port"), "--http-listen", "127.0.0.1:0",
         "--http-port-file", str(tmp_path / "http_port")], stdout=log, stderr=log)
    try:
        port = _wait_file(tmp_path / "port") and _wait_file(tmp_path / "http_port")
        ctx = ssl.create_default_context(cafile=str(tmp_path / "cert.pem"))
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/api/v1/problems", context=ctx,
                                    timeout=10) as r:
            assert r.status == 200
            assert json.load(r)["problems"][0]["slug"] == "1_allreduce"
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/problems", timeout=5).read()
    finally:
        proc.kill()
        proc.wait()
