"""End to end: `specserve batch` under a real `ray job submit` to a local `ray start --head`.

One head and one application for the module: the first job deploys the application itself
(`specserve-batch`, kept with --keep-app) and every later job and the online comparison use it
(the kill -9 test, last, lets its job delete it). The head is torn down at the end of the module,
before tests/e2e/test_serving.py starts its own application (two engine sets at once would not fit
this machine's 2 cores). Disk-full cases write to a real small tmpfs (tests/small_fs.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
import yaml

from batch_head import VENV_BIN, RayHead
from small_fs import tmpfs

from cluster.batch.rows import parse_row
from core import MODELS_DIR_ENV, haproxy_ports_env, models_dir
from deployments.cores import CORES_DIR_ENV, node_cores

pytestmark = pytest.mark.serve

REPO = Path(__file__).resolve().parents[2]
PORT = int(os.environ.get("SPECSERVE_BATCH_TEST_PORT", "8200"))
MODEL = "specserve-tiny"
CODE = ["def fibonacci(n):\n    ", "import os\nimport sys\n\n\ndef main(argv):\n",
        "class Stack:\n    def __init__(self):\n", "def parse(line: str) -> dict:\n    "]
PROSE = ["The history of the city begins", "Q: What is 12 * 7? A:"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(custom_id: str, url: str = "/v1/completions", **body) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": url,
            "body": {"model": MODEL, "temperature": 0, "max_tokens": 24, **body}}


def chat(custom_id: str, text: str, **body) -> dict:
    return request(custom_id, "/v1/chat/completions",
                   messages=[{"role": "user", "content": text}], **body)


def read_output(path: Path) -> list[dict]:
    text = path.read_text()
    assert text.endswith("\n"), "torn last line"
    return [json.loads(t) for t in text.splitlines()]


@pytest.fixture(scope="module")
def models(request) -> str:
    """The model lab's folder: used as built (a smoke lab too); built by tests/session_app.py's
    `lab` if absent."""
    if (models_dir() / "manifest.json").is_file():
        return str(models_dir())
    return request.getfixturevalue("lab")


@pytest.fixture(scope="module")
def head(models):
    temp_dir = tempfile.mkdtemp(prefix="ssb-", dir="/tmp")  # short: Ray puts sockets in it
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env |= {"PATH": f"{VENV_BIN}:{env.get('PATH', '')}", MODELS_DIR_ENV: models,
            # a Ray 2.60 head enables token auth when ~/.ray/auth_token exists; the job CLI
            # needs the mode said explicitly
            "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0",
            # this head's replicas lease cores among themselves, not against the session app's
            CORES_DIR_ENV: os.path.join(temp_dir, "cores"),
            # HAProxy's own ports for this head, not those of the session's cluster
            **haproxy_ports_env(PORT)}
    h = RayHead(temp_dir, free_port(), free_port(), num_cpus=node_cores(), env=env)
    h.start()
    yield h
    h.stop()
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def config_path(tmp_path_factory) -> Path:
    data = yaml.safe_load((REPO / "cluster/default.yaml").read_text())
    for pool in ("vanilla", "speculative"):
        data[pool] |= {"enforce_eager": True, "profile_max_batch": 8}  # start in seconds
    data["server"]["port"] = PORT
    data["router"]["max_speculative_temperature"] = 0.7  # the "hot" row's `high_temperature`
    path = tmp_path_factory.mktemp("batch") / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def batch_cmd(config_path: Path, inp: Path, out: Path, *flags: str) -> list[str]:
    return ["python", "-m", "cluster.cli", "batch", "--config", str(config_path), "--input",
            str(inp), "--output", str(out), "--progress-interval-s", "5", *flags]


def submit_job(head: RayHead, cmd: list[str], *submit_flags: str,
               timeout_s: float = 600) -> subprocess.CompletedProcess:
    """`ray job submit --working-dir <repo> -- <cmd>`, as a user types it; prints the job's
    verdict (shown by `pytest -rA`)."""
    proc = subprocess.run([str(VENV_BIN / "ray"), "job", "submit", "--address",
                           head.dashboard_url, "--working-dir", str(REPO), *submit_flags, "--",
                           *cmd], env=head.env, capture_output=True, text=True, timeout=timeout_s)
    said = [t for t in proc.stdout.splitlines() if t.startswith("specserve batch: ")]
    code = next((t.split("exit code ")[1].split(",")[0] for t in proc.stdout.splitlines()
                 if "failed with exit code" in t), "0" if proc.returncode == 0 else "?")
    print(f"[job] {' '.join(cmd[cmd.index('--input'):])}\n  -> ray job submit {proc.returncode}, "
          f"driver {code}: {said[-1][17:] if said else '-'}")
    return proc


# The mixed file of the first job: (line content, what it is). Line numbers are 1-based.
MALFORMED = {"{not json": "invalid_json", "[1, 2]": "invalid_json",
             json.dumps({"url": "/v1/completions", "body": {}}): "invalid_custom_id",
             json.dumps({**request("m-get"), "method": "GET"}): "invalid_method",
             json.dumps({**request("m-url"), "url": "/v1/embeddings"}): "invalid_url",
             json.dumps(request("m-body", max_tokens="many")): "invalid_body",
             json.dumps(request("m-model", prompt="x", model="gpt-4")): "model_not_found",
             json.dumps(request("m-stream", stream=True)): "invalid_body",
             json.dumps(request("code-0", prompt="a repeat")): "duplicate_custom_id"}


def mixed_rows() -> list[dict]:
    rows = [request(f"code-{i}", prompt=p) for i, p in enumerate(CODE)]
    rows += [request(f"prose-{i}", prompt=p) for i, p in enumerate(PROSE)]
    rows += [chat("chat-0", "Write a Python function that adds two numbers."),
             chat("chat-1", "Hi! How are you today?")]
    rows += [request(f"pin-{r}-{i}", prompt=CODE[i], route=r) for r in ("speculative", "vanilla")
             for i in range(2)]
    rows += [request("hot", prompt=PROSE[0], temperature=1.2, seed=7),
             request("bad-route", prompt=CODE[0], route="sideways")]  # the router refuses: 400
    rows += [request(cid, prompt=CODE[0], **body) for cid, body in REFUSED_ONLINE.items()]
    return rows


# Rows the online validation refuses (router/request.py): 400 naming the field, in batch too.
REFUSED_ONLINE = {"too-long": {"max_tokens": 5000}, "n-100": {"n": 100},
                  "temp-5": {"temperature": 5}, "beam": {"use_beam_search": True}}
REFUSED_PARAM = {"too-long": "max_tokens", "n-100": "n", "temp-5": "temperature",
                 "beam": "use_beam_search"}


@pytest.fixture(scope="module")
def first_run(head, config_path, tmp_path_factory) -> dict:
    """The first job: deploys `specserve-batch` and keeps it for the rest of the module."""
    d = tmp_path_factory.mktemp("first")
    lines = [json.dumps(r) for r in mixed_rows()]
    for i, text in enumerate(MALFORMED):  # spread the bad lines among the good ones
        lines.insert(2 * i + 1, text)
    lines.insert(5, "")  # blank lines are skipped
    inp, out, summary = d / "in.jsonl", d / "out.jsonl", d / "summary.json"
    inp.write_text("\n".join(lines) + "\n")
    proc = submit_job(head, batch_cmd(config_path, inp, out, "--keep-app", "--summary",
                                      str(summary)))
    bad_lines = {n: MALFORMED[t] for n, t in enumerate(lines, 1) if t in MALFORMED}
    return {"input": inp, "output": out, "summary": summary, "proc": proc, "lines": lines,
            "bad_lines": bad_lines}


def test_job_deploys_the_app_and_answers_every_row(first_run):
    proc = first_run["proc"]
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "deploying 'specserve-batch'" in proc.stdout and "summary: " in proc.stdout
    summary = json.loads(first_run["summary"].read_text())
    valid, refused = len(mixed_rows()), 1 + len(REFUSED_ONLINE)  # bad-route and the invalid
    assert summary["rows"] == {"total": valid + len(MALFORMED), "ok": valid - refused,
                               "failed": refused + len(MALFORMED), "skipped": 0, "unfinished": 0}
    assert sum(summary["routes"].values()) == valid - refused  # refused rows reach no pool
    assert summary["reasons"]["requested"] == 4 and summary["reasons"]["high_temperature"] == 1
    assert summary["tokens"]["completion"] > 0


def test_malformed_lines_become_error_rows_naming_the_line(first_run):
    records = read_output(first_run["output"])
    errors = {r["error"]["line"]: r for r in records if r["error"]}
    assert {n: r["error"]["code"] for n, r in errors.items()} == first_run["bad_lines"]
    for n, r in errors.items():
        assert r["error"]["message"].startswith(f"line {n}: ") and r["response"] is None
    dup = next(r for r in errors.values() if r["error"]["code"] == "duplicate_custom_id")
    assert dup["custom_id"] == "code-0" and "repeats line" in dup["error"]["message"]
    by_id = {r["custom_id"]: r for r in records if r["response"]}
    assert by_id["code-0"]["response"]["status_code"] == 200  # the first occurrence ran
    refused = {cid: by_id[cid]["response"] for cid in ("bad-route", *REFUSED_ONLINE)}
    assert all(r["status_code"] == 400 and r["body"]["error"]["code"] == 400
               for r in refused.values())
    assert refused["bad-route"]["body"]["error"]["param"] == "route"


def test_rows_the_online_endpoint_refuses_are_refused_alike(first_run):
    """One validation for both: each row gets the 400 (param, message) the endpoint answers."""
    by_id = {r["custom_id"]: r for r in read_output(first_run["output"]) if r["response"]}
    rows = {r["custom_id"]: r for r in mixed_rows()}
    with httpx.Client(base_url=f"http://127.0.0.1:{PORT}", timeout=120) as client:
        for cid, param in REFUSED_PARAM.items():
            batch = by_id[cid]["response"]
            online = client.post(rows[cid]["url"], json=rows[cid]["body"])
            assert (batch["status_code"], online.status_code) == (400, 400), online.text
            assert batch["body"]["error"]["param"] == online.json()["error"]["param"] == param
            assert batch["body"]["error"]["message"] == online.json()["error"]["message"]
            assert "x-specserve-route" not in batch["headers"]  # no pool was asked


def test_every_valid_row_once_and_equal_to_the_online_greedy_output(first_run):
    records = read_output(first_run["output"])
    answered = Counter(r["custom_id"] for r in records if r["response"])
    assert answered == Counter(r["custom_id"] for r in mixed_rows())
    rows = {r["custom_id"]: r for r in mixed_rows()}
    with httpx.Client(base_url=f"http://127.0.0.1:{PORT}", timeout=120) as client:
        for r in records:
            response, row = r["response"], rows.get(r["custom_id"])
            if not response or response["status_code"] != 200 or row["body"]["temperature"]:
                continue
            online = client.post(row["url"], json=row["body"])
            assert online.status_code == 200, online.text
            assert text_of(online.json()) == text_of(response["body"]), r["custom_id"]
            if "route" in row["body"]:
                assert response["headers"]["x-specserve-route"] == \
                    online.headers["x-specserve-route"] == row["body"]["route"]
            assert response["headers"]["x-specserve-route"] in ("speculative", "vanilla")


def text_of(body: dict) -> str:
    choice = body["choices"][0]
    return choice["text"] if "text" in choice else choice["message"]["content"]


def test_rerun_directly_skips_completed_rows(first_run, head, config_path, tmp_path):
    """The same command without `ray job submit`: a driver on this machine, same cluster."""
    before = first_run["output"].read_bytes()
    summary = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, *batch_cmd(config_path, first_run["input"], first_run["output"],
                                    "--address", head.address, "--summary", str(summary),
                                    "--keep-app")[1:]],
        cwd=REPO, env=head.env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "using the running application 'specserve-batch'" in proc.stdout
    assert first_run["output"].read_bytes() == before
    rows = json.loads(summary.read_text())["rows"]
    assert rows["skipped"] == rows["total"] and rows["ok"] == rows["failed"] == 0


def kept(config_path: Path, inp: Path, out: Path, *flags: str) -> list[str]:
    """`batch_cmd` with --keep-app: the job leaves the module's application running."""
    return batch_cmd(config_path, inp, out, "--keep-app", *flags)


def write_rows(path: Path, rows: list[dict | str]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_another_input_with_the_same_ids_is_refused_then_replaced_on_request(
        first_run, head, config_path, tmp_path):
    in1 = write_rows(tmp_path / "in1.jsonl", [request(f"row-{i}", prompt=CODE[i])
                                              for i in range(4)])
    in2 = write_rows(tmp_path / "in2.jsonl", [request(f"row-{i}", prompt=PROSE[i % 2] + str(i))
                                              for i in range(4)])
    out = tmp_path / "out.jsonl"
    proc = submit_job(head, kept(config_path, in1, out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    before = out.read_bytes()
    proc = submit_job(head, kept(config_path, in2, out))
    assert proc.returncode != 0 and "failed" in proc.stdout, proc.stdout[-3000:]
    assert f"--output {out}: 4 answered rows no longer match --input {in2}" in proc.stdout
    assert all(f"'row-{i}'" in proc.stdout for i in range(4))  # named, in file order
    assert "using the running application" not in proc.stdout  # refused before any row ran
    assert out.read_bytes() == before
    proc = submit_job(head, kept(config_path, in2, out, "--replace-changed"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "and 4 changed answers (--replace-changed)" in proc.stdout
    records = read_output(out)
    expected = {r.custom_id: r.fingerprint for r in
                (parse_row(n, t, MODEL) for n, t in enumerate(in2.read_text().splitlines(), 1))}
    assert {r["custom_id"]: r["fingerprint"]["row"] for r in records} == expected
    assert len(records) == 4 and all(r["response"]["status_code"] == 200 for r in records)


def test_fixed_error_lines_are_superseded_not_doubled(first_run, head, config_path, tmp_path):
    lines = ["{not json", json.dumps(request("b", prompt=CODE[1], max_tokens="many")),
             json.dumps(request("c", prompt=CODE[2]))]
    inp, out = write_rows(tmp_path / "in.jsonl", lines), tmp_path / "out.jsonl"
    proc = submit_job(head, kept(config_path, inp, out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [r["error"]["code"] if r["error"] else 200 for r in read_output(out)] == \
        ["invalid_json", "invalid_body", 200]
    lines[:2] = [json.dumps(request("a", prompt=CODE[0])), json.dumps(request("b", prompt=CODE[1]))]
    write_rows(inp, lines)
    proc = submit_job(head, kept(config_path, inp, out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "removed 2 lines without an answer that no longer match" in proc.stdout
    records = read_output(out)
    assert Counter(r["custom_id"] for r in records) == {"a": 1, "b": 1, "c": 1}
    assert all(r["error"] is None and r["response"]["status_code"] == 200 for r in records)


def admin_pin(pin: str | None) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{PORT}", timeout=30) as client:
        r = client.put("/admin/policy", json={"pin": pin})
        assert r.status_code == 200 and r.json()["pin"] == (pin or "auto"), r.text


def test_a_runtime_pin_holds_for_the_rows_of_a_job(first_run, head, config_path, tmp_path):
    """`PUT /admin/policy` on the live application reaches the job's router (the StatsBoard):
    greedy code rows, a task that gains from speculation, all go vanilla, pinned."""
    inp = write_rows(tmp_path / "in.jsonl", [request(f"p-{i}", prompt=CODE[i % 4] + str(i))
                                             for i in range(6)])
    out = tmp_path / "out.jsonl"
    admin_pin("vanilla")
    try:
        proc = submit_job(head, kept(config_path, inp, out))
    finally:
        admin_pin(None)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    routed = {(r["response"]["headers"]["x-specserve-route"],
               r["response"]["headers"]["x-specserve-reason"]) for r in read_output(out)}
    assert routed == {("vanilla", "pinned")}


def acceptance_tasks() -> set[str]:
    """Task types the online router has acceptance estimates for (its /metrics)."""
    text = httpx.get(f"http://127.0.0.1:{PORT}/metrics", timeout=30).text
    return {line.split('task="')[1].split('"')[0] for line in text.splitlines()
            if line.startswith("specserve_mean_acceptance_length{")}


def test_acceptance_learned_from_batch_rows_reaches_the_online_router(first_run, head,
                                                                     config_path, tmp_path):
    """Extraction rows, which no online request of this module sends, forced speculative: the
    online router's estimates gain the task while the job publishes its counts."""
    assert "extraction" not in acceptance_tasks()
    texts = ["Extract the names from: Alice met Bob in Paris.",
             "Summarize the following text: the cat sat on the mat. TL;DR:"]
    inp = write_rows(tmp_path / "in.jsonl", [request(f"x-{i}", prompt=texts[i % 2] + f" ({i})",
                                                     max_tokens=48, route="speculative")
                                             for i in range(12)])
    out = tmp_path / "out.jsonl"
    cmd = [str(VENV_BIN / "ray"), "job", "submit", "--address", head.dashboard_url,
           "--working-dir", str(REPO), "--",
           *kept(config_path, inp, out, "--max-in-flight", "2")]
    job = subprocess.Popen(cmd, env=head.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    seen, deadline = False, time.monotonic() + 300
    while not seen and time.monotonic() < deadline:
        seen = "extraction" in acceptance_tasks()
        if job.poll() is not None and not seen:  # the board keeps a driver's counts 5 s
            time.sleep(1)
            seen = "extraction" in acceptance_tasks()
            break
        time.sleep(0.3)
    stdout, _ = job.communicate(timeout=300)
    assert job.returncode == 0, stdout[-3000:]
    assert all(r["response"]["headers"]["x-specserve-task"] == "extraction"
               for r in read_output(out))
    assert seen, "the online router never saw the job's extraction acceptance"


def test_disk_full_stops_at_the_first_failed_write_with_every_line_whole(
        first_run, head, config_path, tmp_path):
    rows = [request(f"d-{i}", prompt=CODE[i % 4] + str(i), max_tokens=24) for i in range(40)]
    inp = write_rows(tmp_path / "in.jsonl", rows)
    with tmpfs(tmp_path / "small", 12) as small:
        out, summary = small / "out.jsonl", tmp_path / "summary.json"
        cmd = kept(config_path, inp, out, "--max-in-flight", "4", "--summary", str(summary))
        proc = submit_job(head, cmd)
        assert proc.returncode != 0, proc.stdout[-3000:]
        assert "stopping at the first failed write" in proc.stdout, proc.stdout[-3000:]
        assert "No space left on device" in proc.stdout and "Traceback" not in proc.stdout
        written = read_output(out)  # every line complete JSON, the file ends with its newline
        done = json.loads(summary.read_text())
        assert 0 < len(written) < len(rows)
        assert done["rows"]["ok"] == len(written) and done["rows"]["failed"] == 0
        # no row was started after the failure: those without a line were in flight at it
        assert done["rows"]["unfinished"] <= 4
        subprocess.run(["mount", "-o", "remount,size=1m", str(small)], check=True)
        proc = submit_job(head, cmd)  # space freed: the same command finishes the rest
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        records = read_output(out)
        assert Counter(r["custom_id"] for r in records) == {r["custom_id"]: 1 for r in rows}


def test_disk_full_on_an_error_line_stops_with_a_summary(first_run, head, config_path,
                                                         tmp_path):
    """Error lines fill the disk before any row runs: the same stop, message and summary."""
    lines = [f"{{not json {i}" for i in range(60)] + [json.dumps(request("late", prompt="x"))]
    inp = write_rows(tmp_path / "in.jsonl", lines)
    with tmpfs(tmp_path / "small", 4) as small:
        out = small / "out.jsonl"
        proc = submit_job(head, kept(config_path, inp, out))
        assert proc.returncode != 0, proc.stdout[-3000:]
        assert "stopping at the first failed write" in proc.stdout and "Traceback" not in \
            proc.stdout, proc.stdout[-3000:]
        assert "summary: " in proc.stdout
        done = json.loads(proc.stdout.split("summary: ", 1)[1].splitlines()[0])
        written = read_output(out)
        assert 0 < len(written) < 60 and done["rows"]["failed"] == len(written)
        assert done["routes"] == {}  # the valid row after them never ran


def test_ordered_output_follows_the_input(first_run, head, config_path, tmp_path):
    """Long rows first, short ones after: completion order differs from input order."""
    rows = [request(f"o-{i}", prompt=CODE[i % 4] + str(i), max_tokens=96 if i % 4 == 0 else 2)
            for i in range(16)]
    inp, out = write_rows(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    proc = submit_job(head, kept(config_path, inp, out, "--ordered", "--max-in-flight", "8"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [r["custom_id"] for r in read_output(out)] == [r["custom_id"] for r in rows]


SETTLE_DRIVER = """
import gc, ray
from cluster.batch.app import _pool_handles, settle_handles
from core.ray_private import LongPollClient
ray.init(log_to_driver=False)
handles = _pool_handles("specserve-batch")
for handle in handles.values():
    handle.options(stream=False).requests_in_engine.remote().result(timeout_s=60)
def polling():
    return sum(o.is_running for o in gc.get_objects() if isinstance(o, LongPollClient))
print("polling before", polling(), flush=True)
settle_handles(handles)
print("polling after", polling(), flush=True)
ray.shutdown()
"""


def test_settled_handles_leave_nothing_polling_before_ray_shutdown(first_run, head):
    """The driver's exit path (cluster/batch/app.py `settle_handles`): after it no Serve long-poll
    client of the process still runs, so none reconnects to Ray after `ray.shutdown()` (the CI run
    of 2026-12-05 printed such a traceback at the end of a disk-full job)."""
    proc = head.run(SETTLE_DRIVER)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = dict(line.rsplit(" ", 1) for line in proc.stdout.splitlines()
                if line.startswith("polling "))
    assert int(said["polling before"]) >= 1, proc.stdout  # the handles' routers follow the app
    assert said["polling after"] == "0", proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


def driver_pid(output: Path) -> int | None:
    """The python process of the batch driver writing `output` (not its /bin/sh parent)."""
    for entry in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if Path(argv[0].decode()).name.startswith("python") and b"cluster.cli" in argv and \
                str(output).encode() in argv:
            return int(entry)
    return None


def test_kill9_half_way_then_resubmit_yields_every_row_once(first_run, head, config_path,
                                                            tmp_path):
    n_rows = 120
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps(request(f"k-{i}", prompt=f"{CODE[i % 4]}{i}",
                                              max_tokens=48)) + "\n" for i in range(n_rows)))
    cmd = batch_cmd(config_path, inp, out, "--max-in-flight", "8")
    proc = submit_job(head, cmd, "--no-wait")
    assert proc.returncode == 0, proc.stderr[-3000:]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if out.is_file() and out.read_text().count("\n") >= 15:
            break
        time.sleep(0.2)
    pid = driver_pid(out)
    assert pid is not None, "driver not found"
    os.kill(pid, signal.SIGKILL)
    while Path(f"/proc/{pid}").exists():
        time.sleep(0.1)
    written = out.read_text().count("\n")
    assert 15 <= written < n_rows
    with out.open("a") as f:  # and a torn write, as if it died inside one
        f.write('{"id": "batch_req_999", "custom_id": "k-999", "respo')
    # re-submit through the waiting submitter (`specserve batch --submit`)
    proc = subprocess.run([sys.executable, *cmd[1:], "--submit", head.dashboard_url],
                          cwd=REPO, env=head.env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert f"{written} rows already there, torn last line" in proc.stdout
    # it found the application the first job left and, owning it by its name, deleted it
    assert "using the running application 'specserve-batch'" in proc.stdout
    assert "deleting application 'specserve-batch'" in proc.stdout
    records = read_output(out)
    assert Counter(r["custom_id"] for r in records) == {f"k-{i}": 1 for i in range(n_rows)}
    assert all(r["response"]["status_code"] == 200 for r in records)
