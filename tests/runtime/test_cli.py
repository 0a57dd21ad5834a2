"""``samza-dsl plan APP``: every format, -o, and the errors a user meets (exit code 2, no traceback).

Most cases call ``runtime.ops.cli.main(argv)`` in this process; the ones about the installed console
script, the working directory and a machine without Graphviz run ``samza-dsl`` as a subprocess.
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from runtime.ops.cli import main
from runtime.ops.loader import load_app

REPO = Path(__file__).resolve().parents[2]
TRENDING = "examples/trending_tags.py:app"
PAGE_VIEWS = "examples/page_view_counts.py:app"
CLI = Path(sys.executable).parent / "samza-dsl"
SVG_ROOT = "{http://www.w3.org/2000/svg}svg"
BY_TAG = "trending-tags-1-partition_by-by-tag"
BY_WINDOW = "trending-tags-1-partition_by-by-window"
GRAPHVIZ_FORMATS = ("svg", "html")


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # APP paths are relative, as a user types them


@pytest.fixture(scope="module")
def trending_ops() -> list[str]:
    return [op.op_id for op in load_app(str(REPO / TRENDING)).spec().operators]


def plan_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_cli(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    import subprocess

    assert CLI.exists(), f"the samza-dsl console script is not installed next to {sys.executable}"
    proc = subprocess.run([str(CLI), *argv], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def assert_clean_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2, err
    assert err.startswith("samza-dsl plan: error: "), err
    assert "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, f"{fragment!r} not in {err!r}"


def svg_text(svg: str) -> str:
    root = ET.fromstring(svg.encode("utf-8"))  # bytes: the text starts with an XML declaration
    assert root.tag == SVG_ROOT
    return " ".join(root.itertext())


# -- formats -------------------------------------------------------------------------------------

def test_the_example_has_the_operators_the_tests_expect(trending_ops: list[str]) -> None:
    assert len(trending_ops) == 14
    assert {BY_TAG, BY_WINDOW, "trending-tags-1-window-tag-counts",
            "trending-tags-1-window-top-k", "trending-tags-1-merge-all-tags"} <= set(trending_ops)


def test_text_is_the_default_format_from_the_console_script(trending_ops: list[str]) -> None:
    code, out, err = run_cli("plan", TRENDING)
    assert code == 0, err
    assert out.startswith("Plan of trending-tags-1: 3 stage(s), 14 operator(s)\n")
    for op_id in trending_ops:
        assert op_id in out
    assert f"intermediate {BY_TAG} (4 partitions" in out
    assert f"intermediate {BY_WINDOW} (4 partitions" in out
    assert "input        profile-updates (4 partitions" in out
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("stage-")] == [
        "stage-0", "stage-1", "stage-2"]


def test_json_parses_and_names_every_operator(capsys: pytest.CaptureFixture[str],
                                              trending_ops: list[str]) -> None:
    code, out, err = plan_cli(capsys, TRENDING, "--format", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["application"] == {"name": "trending-tags", "app_id": "1",
                                   "job": "trending-tags-1"}
    assert sorted(plan["operators"]) == sorted(trending_ops)
    for op_id, op in plan["operators"].items():
        assert op["id"] == op_id
        assert op_id.startswith(f"trending-tags-1-{op['opcode']}-")
    assert {sid: s["partitions"] for sid, s in plan["streams"].items()
            if s["kind"] == "intermediate"} == {BY_TAG: 4, BY_WINDOW: 4}
    assert [len(stage["operators"]) for stage in plan["stages"]] == [8, 3, 3]
    assert sorted(op_id for stage in plan["stages"] for op_id in stage["operators"]) == \
        sorted(trending_ops)


def test_dot_has_a_cluster_per_stage_and_red_intermediate_edges(
        capsys: pytest.CaptureFixture[str], trending_ops: list[str]) -> None:
    code, out, err = plan_cli(capsys, TRENDING, "--format", "dot")
    assert code == 0, err
    assert out.startswith('digraph "trending-tags-1" {')
    assert out.rstrip().endswith("}")
    for stage in ("stage-0", "stage-1", "stage-2"):
        assert f'subgraph "cluster_{stage}"' in out
    for op_id in trending_ops:
        assert f'"{op_id}"' in out
    for sid in (BY_TAG, BY_WINDOW):
        red = [line for line in out.splitlines() if f'label="{sid}\\n4 partitions"' in line]
        assert len(red) == 1 and 'color="#c5221f"' in red[0], red


def test_mermaid_has_a_subgraph_per_stage(capsys: pytest.CaptureFixture[str],
                                          trending_ops: list[str]) -> None:
    code, out, err = plan_cli(capsys, TRENDING, "--format", "mermaid")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "flowchart LR"
    assert sum(line.lstrip().startswith("subgraph ") for line in lines) == 3
    assert sum(line.strip() == "end" for line in lines) == 3
    for op_id in trending_ops:
        assert op_id in out
    for sid in (BY_TAG, BY_WINDOW):
        assert f'==>|"{sid} (4 partitions)"|' in out


def test_svg_is_an_svg_document_naming_every_operator(capsys: pytest.CaptureFixture[str],
                                                      trending_ops: list[str]) -> None:
    code, out, err = plan_cli(capsys, TRENDING, "--format", "svg")
    assert code == 0, err
    text = svg_text(out)
    for op_id in trending_ops:
        assert op_id in text
    assert "4 partitions" in text


def test_html_embeds_the_svg_and_the_text_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plan_cli(capsys, TRENDING, "--format", "html")
    assert code == 0, err
    assert out.startswith("<!DOCTYPE html>")
    assert "<title>Plan of trending-tags-1</title>" in out
    svg = out[out.index("<svg"):out.index("</svg>") + len("</svg>")]
    assert BY_TAG in svg_text(svg)
    assert "Plan of trending-tags-1: 3 stage(s), 14 operator(s)" in out


@pytest.mark.parametrize("fmt", ["text", "json", "dot", "mermaid", "svg", "html"])
def test_every_format_plans_both_examples(capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    for app, job in ((TRENDING, "trending-tags-1"), (PAGE_VIEWS, "page-view-counts-1")):
        code, out, err = plan_cli(capsys, app, "--format", fmt)
        assert code == 0, err
        assert out.endswith("\n")
        assert job in (svg_text(out) if fmt == "svg" else out)  # SVG escapes "-" as &#45;
        assert err == ""


def test_page_view_counts_copartitions_the_repartitioned_logins(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plan_cli(capsys, PAGE_VIEWS, "--format", "json")
    assert code == 0, err
    streams = json.loads(out)["streams"]
    assert streams["logins"]["partitions"] == 2
    assert streams["page-views"]["partitions"] == 4
    # it meets page-views (4 partitions) at the join
    assert streams["page-view-counts-1-partition_by-logins-by-user"]["partitions"] == 4


# -- -o FILE -------------------------------------------------------------------------------------

def test_svg_to_a_file_from_the_console_script(tmp_path: Path, trending_ops: list[str]) -> None:
    target = tmp_path / "plan.svg"
    code, out, err = run_cli("plan", TRENDING, "--format", "svg", "-o", str(target))
    assert code == 0, err
    assert out == ""
    assert err.strip() == f"wrote the svg plan of trending-tags-1 to {target}"
    text = svg_text(target.read_text(encoding="utf-8"))
    assert all(op_id in text for op_id in trending_ops)


@pytest.mark.parametrize("fmt", ["text", "json", "dot", "mermaid", "svg", "html"])
def test_output_file_holds_what_stdout_would(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                              fmt: str) -> None:
    target = tmp_path / f"plan.{fmt}"
    code, out, err = plan_cli(capsys, TRENDING, "--format", fmt, "--output", str(target))
    assert code == 0, err
    assert out == ""
    assert f"wrote the {fmt} plan of trending-tags-1 to {target}" in err
    code, stdout_text, _ = plan_cli(capsys, TRENDING, "--format", fmt)
    assert code == 0
    assert target.read_text(encoding="utf-8") == stdout_text


def test_output_into_a_missing_directory_makes_it(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "dir" / "plan.json"
    code, out, err = plan_cli(capsys, TRENDING, "--format", "json", "-o", str(target))
    assert code == 0, err
    assert target.read_text().startswith("{") and out == ""


def test_output_where_a_directory_cannot_be_made_is_a_clean_error(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "no").write_text("a file, not a directory\n")
    target = tmp_path / "no" / "dir" / "plan.json"
    code, out, err = plan_cli(capsys, TRENDING, "--format", "json", "-o", str(target))
    assert_clean_error(code, err, "cannot write the plan to", str(target))
    assert out == ""


# -- the APP reference ---------------------------------------------------------------------------

def test_a_missing_app_file_exits_2_without_a_traceback() -> None:
    code, out, err = run_cli("plan", "examples/no_such_app.py:app")
    assert_clean_error(code, err, "application file 'examples/no_such_app.py' does not exist")
    assert out == ""


def test_a_missing_attribute_names_it_and_the_applications_there(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plan_cli(capsys, "examples/trending_tags.py:no_such_attr")
    assert_clean_error(code, err, "has no attribute 'no_such_attr'", "its applications: app",
                       "path/to/file.py:ATTR")
    assert out == ""


@pytest.mark.parametrize("ref, message", [
    ("no_such_module_xyz:app", "cannot import application module 'no_such_module_xyz'"),
    ("examples/trending_tags.py:WINDOW", "is a timedelta, not a StreamApplication"),
    ("examples/trending_tags.py:sample_input", "is a function that needs arguments"),
    ("examples:app", "'examples' is a directory"),
    (":app", "no application in ':app'"),
])
def test_bad_app_references(capsys: pytest.CaptureFixture[str], ref: str, message: str) -> None:
    code, _, err = plan_cli(capsys, ref)
    assert_clean_error(code, err, message)


def test_the_attribute_defaults_to_app(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plan_cli(capsys, "examples/trending_tags.py")
    assert code == 0, err
    assert out.startswith("Plan of trending-tags-1")


def test_a_module_reference_is_found_from_the_working_directory() -> None:
    # a console script does not put the working directory on sys.path by itself
    code, out, err = run_cli("plan", "examples.page_view_counts:app")
    assert code == 0, err
    assert out.startswith("Plan of page-view-counts-1")


# -- config and partitions -----------------------------------------------------------------------

@pytest.mark.parametrize("pair, key, hint", [
    ("task.max.concurency=2", "task.max.concurency", "task.max.concurrency"),
    ("job.container.cuont=2", "job.container.cuont", "job.container.count"),
])
def test_an_unknown_config_key_is_named(capsys: pytest.CaptureFixture[str], pair: str, key: str,
                                        hint: str) -> None:
    code, out, err = plan_cli(capsys, TRENDING, "-c", pair)
    assert_clean_error(code, err, f"unknown config key {key!r}", f"did you mean {hint!r}")
    assert out == ""


def test_a_bad_config_value_names_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plan_cli(capsys, TRENDING, "-c", "task.max.concurrency=zero")
    assert_clean_error(code, err, "task.max.concurrency", "not an integer")


def test_config_without_a_value_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plan_cli(capsys, TRENDING, "-c", "task.max.concurrency")
    assert_clean_error(code, err, "-c takes KEY=VALUE, got 'task.max.concurrency'")


def test_config_reaches_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plan_cli(capsys, TRENDING, "--format", "json",
                              "-c", "task.max.concurrency=8",
                              "-c", "job.intermediate.stream.partitions=16")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["config"]["task.max.concurrency"] == 8
    assert plan["streams"][BY_TAG]["partitions"] == 16


def test_partitions_for_an_unknown_stream_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plan_cli(capsys, TRENDING, "--partitions", "no-such-stream=3")
    assert_clean_error(code, err, "unknown stream 'no-such-stream'")


def test_partitions_that_break_a_join_name_the_join(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plan_cli(capsys, PAGE_VIEWS, "--partitions",
                            "page-view-counts-1-partition_by-logins-by-user=2")
    assert_clean_error(code, err, "page-view-counts-1-join-view-login",
                       "page-view-counts-1-partition_by-logins-by-user")


@pytest.mark.parametrize("pair", ["logins", "logins=two", "=3"])
def test_malformed_partitions(capsys: pytest.CaptureFixture[str], pair: str) -> None:
    code, _, err = plan_cli(capsys, PAGE_VIEWS, "--partitions", pair)
    assert_clean_error(code, err, "--partitions takes STREAM=COUNT")


def test_an_unknown_format_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["plan", TRENDING, "--format", "png"])
    assert exc.value.code == 2
    assert "invalid choice: 'png'" in capsys.readouterr().err


# -- without Graphviz ----------------------------------------------------------------------------

@pytest.fixture
def env_without_dot(tmp_path: Path) -> dict[str, str]:
    """PATH holds only a python, so Graphviz's `dot` is not found."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    return {**os.environ, "PATH": str(bin_dir)}


@pytest.mark.parametrize("fmt", GRAPHVIZ_FORMATS)
def test_a_missing_graphviz_says_how_to_install_it(env_without_dot: dict[str, str],
                                                   tmp_path: Path, fmt: str) -> None:
    target = tmp_path / f"plan.{fmt}"
    code, out, err = run_cli("plan", TRENDING, "--format", fmt, "-o", str(target),
                             env=env_without_dot)
    assert_clean_error(code, err, "apt-get install graphviz", "brew install graphviz",
                       "--format text, json, dot or mermaid")
    assert out == ""
    assert not target.exists()


def test_formats_without_graphviz_still_work(env_without_dot: dict[str, str]) -> None:
    code, out, err = run_cli("plan", TRENDING, "--format", "dot", env=env_without_dot)
    assert code == 0, err
    assert out.startswith('digraph "trending-tags-1"')
