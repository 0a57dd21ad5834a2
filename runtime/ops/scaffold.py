"""``samza-dsl init NAME``: a new project in directory NAME that runs as it is written.

It holds ``pipeline.py`` (an application on the embedded local system, with ``sample_input(n)``
for ``run --sample``), ``test_pipeline.py`` (an example test and a hypothesis property over
``TestRunner``), ``sample.jsonl`` (input for ``run --input``) and a README with the two
commands: ``samza-dsl run pipeline.py:app --input lines=sample.jsonl`` and ``pytest``.

>>> import tempfile, pathlib
>>> with tempfile.TemporaryDirectory() as tmp:
...     made = init_project(pathlib.Path(tmp) / "word-lengths")
...     sorted(p.name for p in made)
['README.md', 'pipeline.py', 'sample.jsonl', 'test_pipeline.py']
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from samza_dsl.errors import SamzaError

__all__ = ["init_project", "FILES"]

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")

PIPELINE = '''"""{name}: splits lines of text into words and writes each word with its length.

Run it:   samza-dsl run pipeline.py:app --input lines=sample.jsonl
Test it:  pytest
"""

from __future__ import annotations

from typing import Any

from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

# the embedded local system: streams are logs under .samza/ in the working directory
local = LocalSystem("local")
app = StreamApplication("{name}", config={{"job.default.system": "local"}})
lines = app.input(local.input("lines", serde=JsonSerde(), partitions=2))
word_lengths = app.output(local.output("word-lengths", serde=KVSerde(StringSerde(), JsonSerde()),
                                       partitions=2))


def words(line: dict[str, Any]) -> list[str]:
    """The words of a line ``{{"text": "..."}}``, lower case, punctuation stripped."""
    stripped = (w.strip(".,;:!?\\"'()") for w in line["text"].split())
    return [w.lower() for w in stripped if w]


(lines.flat_map(words, name="words")
      .map(lambda word: KV(word, {{"length": len(word)}}), name="length")
      .send_to(word_lengths))


def sample_input(n: int) -> list[dict[str, Any]]:
    """``samza-dsl run pipeline.py:app --sample N`` feeds ``lines`` with these."""
    text = ["To be, or not to be", "that is the question", "Whether tis nobler in the mind"]
    return [{{"text": text[i % len(text)]}} for i in range(n)]
'''

TEST = '''"""Tests of pipeline.py: an example, and a property that holds for any input (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import app, lines, word_lengths, words
from samza_dsl import KV
from samza_dsl.testing import TestRunner


def test_each_word_comes_out_with_its_length() -> None:
    result = TestRunner(app).add_input(lines, [{{"text": "To be, or not"}}]).run()
    assert result.messages(word_lengths) == [
        KV("to", {{"length": 2}}), KV("be", {{"length": 2}}), KV("or", {{"length": 2}}),
        KV("not", {{"length": 3}})]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=20))
def test_every_word_of_the_input_comes_out_once(texts: list[str]) -> None:
    messages = [{{"text": t}} for t in texts]
    result = TestRunner(app).add_input(lines, messages).run()
    out = result.messages(word_lengths)
    expected = [w for m in messages for w in words(m)]
    assert sorted(kv.key for kv in out) == sorted(expected)
    assert all(kv.value == {{"length": len(kv.key)}} for kv in out)
'''

README = '''# {name}

A samza-dsl pipeline: `pipeline.py` splits lines of text into words and writes each word with
its length; `test_pipeline.py` tests it, with a property that hypothesis checks on many inputs.

## The two commands

```
samza-dsl run pipeline.py:app --input lines=sample.jsonl
pytest
```

The first runs the pipeline on the embedded local system over `sample.jsonl` (one JSON message a
line) and prints what it wrote; its streams and checkpoints are kept in `.samza/`, so a second
run goes on from where the first stopped (`--append` adds the file again, `samza-dsl reset
pipeline.py:app` starts over). `samza-dsl run pipeline.py:app --sample 100` feeds it
`sample_input(100)` instead. The second needs `pip install pytest hypothesis`.

`samza-dsl dump pipeline.py:app word-lengths` prints the output stream, `samza-dsl plan
pipeline.py:app` the plan.
'''

SAMPLE = ["To be, or not to be", "that is the question",
          "Whether tis nobler in the mind to suffer"]

#: the files of a new project, by name
FILES = ("pipeline.py", "test_pipeline.py", "sample.jsonl", "README.md")


def init_project(directory: Path) -> list[Path]:
    """Write a new project into ``directory`` (made; it must not exist, or be empty), named
    after its last part. Returns the files written.

    Raises:
        SamzaError: the name is no identifier-like name, or the directory holds files.
    """
    name = directory.name
    if not _NAME.fullmatch(name):
        raise SamzaError(f"init {str(directory)!r}: a project name starts with a letter and has "
                         f"only letters, digits, '-' and '_' (e.g. word-lengths)")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise SamzaError(f"init: {directory} already exists and is not empty; choose another "
                         f"name or remove it")
    directory.mkdir(parents=True, exist_ok=True)
    texts = {
        "pipeline.py": PIPELINE.format(name=name),
        "test_pipeline.py": TEST.format(),
        "sample.jsonl": "".join(json.dumps({"text": t}) + "\n" for t in SAMPLE),
        "README.md": README.format(name=name),
    }
    made = []
    for file in FILES:
        path = directory / file
        path.write_text(texts[file], encoding="utf-8")
        made.append(path)
    return made
