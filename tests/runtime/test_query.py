"""Interactive queries of a running job's stores (``query.enabled``, docs/queries.md): a real
``samza-dsl run --follow`` of the ReadWrite counter on the embedded local system, asked over HTTP
on 127.0.0.1 by the Python client and by ``samza-dsl query``: the latest state runs ahead of the
committed one until the next commit, a missing store or key is a clear answer, the token is
asked for when set and required off loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from samza_dsl.query import QueryClient, QueryError

ROOT = Path(__file__).resolve().parents[2]
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
COUNTER = f"{ROOT / 'examples' / 'readwrite_counter.py'}:app"
ENV = {**os.environ, "Q66_TOKEN": "s3cr3t-q66"}


def _until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = check()
        except (OSError, QueryError):
            got = None
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _load(cwd: Path, n: int, start: int = 0) -> None:
    (cwd / "in.jsonl").write_text("".join(
        json.dumps({"key": f"k{i % 7}", "value": i}) + "\n" for i in range(start, start + n)))
    load = subprocess.run([CLI, "load", COUNTER, "events", "in.jsonl"], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    assert load.returncode == 0, load.stderr


def _url(cwd: Path) -> str | None:
    path = cwd / ".samza" / "readwrite-counter-1" / "query" / "container-0.json"
    return json.loads(path.read_text())["url"] if path.exists() else None


@pytest.fixture
def running(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Path, str]]:
    extra = getattr(request, "param", [])
    _load(tmp_path, 70)
    proc = subprocess.Popen([CLI, "run", COUNTER, "--follow", "-q", "-c", "query.enabled=true",
                             "-c", "task.commit.ms=4000", *extra], cwd=tmp_path, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = _until(lambda: _url(tmp_path), 60, "the query endpoint's record")
        yield tmp_path, url
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    assert _url(tmp_path) is None  # the record goes with the container


def test_latest_runs_ahead_of_committed_until_the_commit(running: tuple[Path, str]) -> None:
    cwd, url = running
    client = QueryClient([url])
    # 70 events over 7 keys: 10 each, once processed and committed
    _until(lambda: client.get("counts", "k3", read="committed")["value"] == 10, 30,
           "the first commit")
    _load(cwd, 14, start=70)  # two more of each key
    latest = _until(lambda: (a := client.get("counts", "k3"))["value"] == 12 and a, 30,
                    "the latest state")
    committed = client.get("counts", "k3", read="committed")
    assert latest["read"] == "latest" and latest["found"] and latest["task"].startswith("Part")
    # the commit is due up to 4 s after the run processed the two: committed is 10 or, if the
    # commit came in between, 12; it never runs ahead of the latest
    assert committed["read"] == "committed" and committed["value"] in (10, 12), committed
    seen = {committed["value"]}
    deadline = time.monotonic() + 20
    while 12 not in seen and time.monotonic() < deadline:
        seen.add(client.get("counts", "k3", read="committed")["value"])
        time.sleep(0.05)
    assert 12 in seen, seen
    # a range and a prefix, from both states, decoded by the table's serdes (the 14 events
    # may have been processed across two commits: the committed range catches up)
    entries = client.prefix("counts", "k", limit=3)["entries"]
    assert [(e["key"], e["value"]) for e in entries] == [("k0", 12), ("k1", 12), ("k2", 12)]

    def committed_range() -> list[tuple[str, int]]:
        got = client.range("counts", "k5", None, read="committed")["entries"]
        pairs = [(e["key"], e["value"]) for e in got]
        assert [k for k, _ in pairs] == ["k5", "k6"] and all(v in (10, 12) for _, v in pairs)
        return pairs
    assert _until(lambda: committed_range() == [("k5", 12), ("k6", 12)], 20, "the commit")


def _http(url: str, token: str | None = None) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_missing_store_or_key_and_a_wrong_request_are_clear_answers(
        running: tuple[Path, str]) -> None:
    cwd, url = running
    status, body = _http(f"{url}/query/nope?key=k1")
    assert status == 404 and "has no store 'nope'; its stores: counts" in body["error"]
    status, body = _http(f"{url}/query/counts?key=zz")
    assert status == 200 and body["found"] is False and body["value"] is None
    status, body = _http(f"{url}/query/counts?key=k1&read=yesterday")
    assert status == 400 and "read=latest or read=committed" in body["error"]
    status, body = _http(f"{url}/query/counts?limit=5")
    assert status == 400 and "key=K, prefix=P" in body["error"]
    # the command line: a value, a key found nowhere (exit 1), a store the job lacks (exit 2)
    _until(lambda: _http(f"{url}/query/counts?key=k3")[1].get("value") == 10, 30, "the counts")
    q = subprocess.run([CLI, "query", COUNTER, "counts", "k3"], cwd=cwd, capture_output=True,
                       text=True, timeout=60)
    assert q.returncode == 0 and q.stdout.splitlines()[0] == "10", q.stderr
    q = subprocess.run([CLI, "query", COUNTER, "counts", "zz", "--read", "committed"], cwd=cwd,
                       capture_output=True, text=True, timeout=60)
    assert q.returncode == 1 and "not in store 'counts' (committed state)" in q.stdout, q
    q = subprocess.run([CLI, "query", COUNTER, "nope", "k1"], cwd=cwd, capture_output=True,
                       text=True, timeout=60)
    assert q.returncode == 2 and "has no store 'nope'" in q.stderr
    assert len(q.stderr.strip().splitlines()) == 1, q.stderr


@pytest.mark.parametrize("running", [["-c", "query.token=env:Q66_TOKEN"]], indirect=True)
def test_a_token_once_set_is_asked_for(running: tuple[Path, str]) -> None:
    cwd, url = running
    status, body = _http(f"{url}/query/counts?key=k1")
    assert status == 401 and "Authorization: Bearer" in body["error"]
    assert "s3cr3t" not in json.dumps(body)
    status, body = _http(f"{url}/query/counts?key=k1", token="wrong")
    assert status == 401
    _until(lambda: _http(f"{url}/query/counts?key=k1", token="s3cr3t-q66")[1].get("value")
           == 10, 30, "the counts, with the token")
    q = subprocess.run([CLI, "query", COUNTER, "counts", "k1", "-c",
                        "query.token=env:Q66_TOKEN"], cwd=cwd, capture_output=True, text=True,
                       timeout=60, env=ENV)
    assert q.returncode == 0 and q.stdout.splitlines()[0] == "10", q
    q = subprocess.run([CLI, "query", COUNTER, "counts", "k1"], cwd=cwd, capture_output=True,
                       text=True, timeout=60)
    assert q.returncode == 2 and "needs its token" in q.stderr and "s3cr3t" not in q.stderr


def test_off_loopback_a_token_is_required(tmp_path: Path) -> None:
    _load(tmp_path, 7)
    run = subprocess.run([CLI, "run", COUNTER, "-q", "-c", "query.enabled=true", "-c",
                          "query.host=0.0.0.0"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2, run.stderr
    assert "query.host=0.0.0.0 is not a loopback address: set query.token" in run.stderr
    assert "Traceback" not in run.stderr


def test_the_token_is_never_shown() -> None:
    shown = subprocess.run([CLI, "config", "--app", COUNTER, "-c", "query.token=hunter2-q66",
                            "query"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "query.token    '***'" in shown.stdout and "hunter2" not in shown.stdout, shown.stdout
    assert "query.enabled  False  (default)" in shown.stdout


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


UI_PORT = _free_port()


@pytest.mark.parametrize("running", [["--ui", str(UI_PORT)]], indirect=True)
def test_the_job_page_serves_the_queries_of_the_job_it_runs(running: tuple[Path, str]) -> None:
    _, url = running
    page = f"http://127.0.0.1:{UI_PORT}"
    got = _until(lambda: (a := _http(f"{page}/query/counts?key=k3"))[1].get("value") == 10
                 and a, 30, "the page's answer")
    assert got[0] == 200 and got[1]["task"] == _http(f"{url}/query/counts?key=k3")[1]["task"]
    status, body = _http(f"{page}/query/nope?key=k3")
    assert status == 404 and "has no store 'nope'" in body["error"]


TTL_COUNTER = f"{ROOT / 'examples' / 'readwrite_counter_ttl.py'}:app"


def test_a_table_with_a_ttl_answers_its_live_entries_only(tmp_path: Path) -> None:
    """A query reads a ttl table as the job's own reads do (docs/joins-and-tables.md, "Time to
    live"): the value without its write time, and nothing once the entry expired, latest and
    committed, by key and by prefix."""
    (tmp_path / "in.jsonl").write_text("".join(
        json.dumps({"key": f"k{i % 3}", "value": i}) + "\n" for i in range(30)))
    load = subprocess.run([CLI, "load", TTL_COUNTER, "events", "in.jsonl"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert load.returncode == 0, load.stderr
    env = {**ENV, "READWRITE_TTL_SECONDS": "4"}
    proc = subprocess.Popen([CLI, "run", TTL_COUNTER, "--follow", "-q", "-c",
                             "query.enabled=true"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    record = tmp_path / ".samza" / "readwrite-counter-ttl-1" / "query" / "container-0.json"
    try:
        url = _until(lambda: record.exists() and json.loads(record.read_text())["url"], 60,
                     "the query endpoint's record")
        client = QueryClient([url])
        for read in ("latest", "committed"):
            got = _until(lambda r=read: (a := client.get("counts", "k1", read=r))["found"] and a,
                         30, f"k1, {read}")
            assert got["value"] == 10, got  # the count itself, not (write time, count)
            rows = client.prefix("counts", "k", read=read)["entries"]
            assert sorted((e["key"], e["value"]) for e in rows) == \
                [("k0", 10), ("k1", 10), ("k2", 10)], rows
        time.sleep(4.5)  # every entry's time to live is over
        for read in ("latest", "committed"):
            gone = client.get("counts", "k1", read=read)
            assert not gone["found"] and gone["value"] is None, gone
            assert client.prefix("counts", "k", read=read)["entries"] == [], read
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
