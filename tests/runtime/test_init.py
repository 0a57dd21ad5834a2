"""``samza-dsl init NAME`` writes a project that runs as written: its README's two commands (the
app's run command and pytest, with a hypothesis property) pass in a fresh directory."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

CLI = str(Path(sys.executable).parent / "samza-dsl")


def sh(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def test_init_writes_a_project_whose_two_commands_pass(tmp_path: Path) -> None:
    made = sh([CLI, "init", "word-lengths"], tmp_path)
    assert made.returncode == 0, made.stderr
    project = tmp_path / "word-lengths"
    assert sorted(p.name for p in project.iterdir()) == [
        "README.md", "pipeline.py", "sample.jsonl", "test_pipeline.py"]
    assert "cd word-lengths" in made.stdout

    readme = (project / "README.md").read_text()
    block = readme.split("## The two commands")[1].split("```")[1]
    run_cmd, test_cmd = [shlex.split(ln) for ln in block.strip().splitlines()]
    assert run_cmd[:2] == ["samza-dsl", "run"] and test_cmd == ["pytest"]
    assert "@given(" in (project / "test_pipeline.py").read_text()  # a property

    ran = sh([CLI, *run_cmd[1:]], project)
    assert ran.returncode == 0, ran.stderr
    assert "in: 3 new message(s) (3 from lines)" in ran.stdout
    assert "out: 18 message(s) (18 to word-lengths)" in ran.stdout
    assert "KV(key='question', value={'length': 8})" in ran.stdout

    tested = sh([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], project)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "2 passed" in tested.stdout

    sample = sh([CLI, "run", "pipeline.py:app", "--sample", "30", "--replace", "-q"], project)
    assert sample.returncode == 0, sample.stderr
    assert "in: 30 new message(s) (30 from lines)" in sample.stdout


def test_init_refuses_a_directory_that_holds_files_and_a_name_that_is_no_name(
        tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    again = sh([CLI, "init", "taken"], tmp_path)
    assert again.returncode == 2
    assert again.stderr.strip().splitlines() == [
        "samza-dsl init: error: init: taken already exists and is not empty; choose another "
        "name or remove it"]
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"
    bad = sh([CLI, "init", "2fast"], tmp_path)
    assert bad.returncode == 2 and "a project name starts with a letter" in bad.stderr
