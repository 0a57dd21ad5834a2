"""The page-view counts of ``page_view_counts.py`` on Kafka, the brokers from the environment
(``KAFKA_BOOTSTRAP``, by default 127.0.0.1:9092): the app deploy/kubernetes runs.

    samza-dsl run examples/kafka_page_views.py:app --follow          # joins the job's group
"""

from __future__ import annotations

import os

from page_view_counts import build_app

from samza_dsl.systems import KafkaSystem

app = build_app(KafkaSystem("kafka", bootstrap_servers=os.environ.get("KAFKA_BOOTSTRAP",
                                                                     "127.0.0.1:9092")))
