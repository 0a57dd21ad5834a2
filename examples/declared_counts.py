"""Page views per country in one-minute windows, with the aggregation declared.

The job of ``reprocess_page_views.py`` written with field names and ``Aggregate.count()`` in
place of Python functions: ``partition_by("country")`` and
``Windows.keyed_tumbling(key="country", event_time="ts", aggregate=Aggregate.count())``. Every
runner folds it the same way; on Spark, over Parquet or a DataFrame, it runs in Spark SQL (the
declared tier), which ``samza-dsl plan`` shows:

    samza-dsl plan examples/declared_counts.py:app

The input declares no event time (the window does), so a reprocessing run closes every pane at
the end of the pass, in the order of pane start and country.

>>> from samza_dsl.testing import TestRunner
>>> views = [{"country": "NL", "ts": 1.0}, {"country": "NL", "ts": 2.0},
...          {"country": "DE", "ts": 3.0}, {"country": "NL", "ts": 61.0}]
>>> result = TestRunner(build_app()).add_input("page-views", views).run()
>>> sorted(result.messages("country-counts"))
[('DE', '0', 1), ('NL', '0', 2), ('NL', '60000', 1)]
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from samza_dsl import Aggregate, StreamApplication, WindowPane, Windows
from samza_dsl.serdes import JsonSerde
from samza_dsl.systems import LocalSystem

__all__ = ["app", "build_app", "WINDOW"]

WINDOW = timedelta(minutes=1)


def count_row(pane: WindowPane) -> tuple[Any, str, int]:
    return (pane.key.key, pane.key.pane_id, pane.message)


def build_app(system: Any = None, *, name: str = "declared-counts") -> StreamApplication:
    """The job on ``system`` (by default the embedded ``LocalSystem``)."""
    system = system if system is not None else LocalSystem("local")
    app = StreamApplication(name, config={"job.default.system": system.name})
    views = app.input(system.input("page-views", serde=JsonSerde(), partitions=4))
    counts = app.output(system.output("country-counts", serde=JsonSerde(), partitions=4))
    (
        views.partition_by("country", name="by-country")
        .window(Windows.keyed_tumbling(key="country", size=WINDOW, event_time="ts",
                                       aggregate=Aggregate.count()), name="views-per-minute")
        .map(count_row, name="count-row")
        .send_to(counts)
    )
    return app


app = build_app()
