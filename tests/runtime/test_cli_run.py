"""`samza-dsl run`: the README's main command, inputs from files, and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_the_main_job_runs_on_a_generated_sample_and_prints_results_and_progress() -> None:
    proc = run_cli("run", "examples/page_view_counts.py:app", "--sample", "3000")
    assert proc.returncode == 0, proc.stderr
    assert "page-view-counts:" in proc.stdout
    assert "message(s)" in proc.stdout
    # the progress line: messages/s, in flight, checkpoint positions
    assert "msg/s" in proc.stderr and "in flight" in proc.stderr and "checkpoint" in proc.stderr


def test_inputs_from_json_lines_files(tmp_path) -> None:
    app_file = tmp_path / "upper.py"
    app_file.write_text(
        "from samza_dsl import StreamApplication, KV\n"
        "from samza_dsl.systems import MemorySystem\n"
        "from samza_dsl.serdes import KVSerde, StringSerde, JsonSerde\n"
        "app = StreamApplication('upper')\n"
        "mem = MemorySystem()\n"
        "words = app.input(mem.input('words', serde=KVSerde(StringSerde(), JsonSerde())))\n"
        "out = app.output(mem.output('shout'))\n"
        "words.map(lambda kv: KV(kv.key, kv.value['w'].upper())).send_to(out)\n")
    data = tmp_path / "words.jsonl"
    data.write_text("\n".join(json.dumps({"key": str(i), "value": {"w": w}})
                              for i, w in enumerate(["ab", "cd"])) + "\n")
    proc = run_cli("run", f"{app_file}:app", "--input", f"words={data}", "-q")
    assert proc.returncode == 0, proc.stderr
    assert "shout: 2 message(s)" in proc.stdout
    assert "'AB'" in proc.stdout and "'CD'" in proc.stdout


def test_a_malformed_input_line_names_the_file_and_line(tmp_path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text('{"key": "1", "value": 1}\nnot json\n')
    proc = run_cli("run", "examples/page_view_counts.py:app", "--input", f"page-views={data}")
    assert proc.returncode == 2
    assert f"{data}:2" in proc.stderr and "Traceback" not in proc.stderr


def test_an_unknown_input_stream_is_named() -> None:
    proc = run_cli("run", "examples/page_view_counts.py:app", "--input", "nope=x.jsonl")
    assert proc.returncode == 2
    assert "'nope'" in proc.stderr and "page-views" in proc.stderr


def test_a_failing_user_function_stops_the_job_naming_operator_and_offset(tmp_path) -> None:
    app_file = tmp_path / "boom.py"
    app_file.write_text(
        "from samza_dsl import StreamApplication\n"
        "from samza_dsl.systems import MemorySystem\n"
        "app = StreamApplication('boom')\n"
        "mem = MemorySystem()\n"
        "def f(m):\n"
        "    if m == 3:\n"
        "        raise ValueError('three')\n"
        "    return m\n"
        "app.input(mem.input('n')).map(f, name='explode').send_to(app.output(mem.output('o')))\n"
        "def sample_input(n):\n"
        "    return list(range(n))\n")
    proc = run_cli("run", f"{app_file}:app", "--sample", "10", "-q")
    assert proc.returncode == 2
    assert "boom-1-map-explode" in proc.stderr and "offset 3" in proc.stderr
    assert "ValueError: three" in proc.stderr
