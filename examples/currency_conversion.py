"""Currency conversion: payments converted to euros with exchange rates kept in a table that is
filled from a stream of rate updates (a side input).

Two inputs, both keyed by currency code and with 2 partitions:

- ``rate-updates``, the side input of the table ``rates``: ``KV(currency, {"per_eur": rate})``,
  or ``{"per_eur": None}`` when a currency is withdrawn. ``to_rates`` (the table's processor)
  turns each into the entries to put: the rate, or a delete;
- ``payments``: ``KV(currency, {"id", "amount"})``.

Each payment is joined with its currency's rate (``join_table``) and sent to
``payments-eur`` as ``KV(currency, {"id", "amount", "eur"})`` (``eur`` is None for a currency
without a rate). On every start each task reads its partition of ``rate-updates`` from the
oldest record to the end before it converts any payment, so the table is complete and no
changelog is needed: it is restored from ``rate-updates`` itself.

Look at the plan with ``samza-dsl plan examples/currency_conversion.py:app`` (the table shows
its side input). ``sample_input(n)`` makes deterministic input:

>>> inputs = sample_input(2)
>>> inputs["rate-updates"][0]
KV(key='USD', value={'per_eur': 1.08})
>>> inputs["payments"][0]
KV(key='USD', value={'id': 0, 'amount': 398.5})
>>> to_rates(KV("XAU", {"per_eur": None}))
[KV(key='XAU', value=None)]
"""

from __future__ import annotations

import random
from typing import Any

from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

__all__ = ["app", "sample_input", "RATES"]

RATES = {"USD": 1.08, "GBP": 0.86, "CHF": 0.95, "JPY": 162.0, "XAU": 0.0004}
PARTITIONS = 2


def _json_kv() -> KVSerde:
    return KVSerde(StringSerde(), JsonSerde())


# -- user functions ------------------------------------------------------------------------------

def to_rates(update: KV[str, dict[str, Any]]) -> list[KV[str, float | None]]:
    """The table entries of a rate update: the currency's rate, or a delete."""
    return [KV(update.key, update.value["per_eur"])]


def convert(payment: KV[str, dict[str, Any]],
            rate: KV[str, float] | None) -> KV[str, dict[str, Any]]:
    eur = None if rate is None else round(payment.value["amount"] / rate.value, 2)
    return KV(payment.key, {**payment.value, "eur": eur})


# -- the application -----------------------------------------------------------------------------

app = StreamApplication("currency-conversion", config={"job.default.system": "local"})
local = LocalSystem("local")
rates = app.table("rates", serde=_json_kv(), processor=to_rates, side_inputs=[
    local.input("rate-updates", serde=_json_kv(), partitions=PARTITIONS)])
(
    app.input(local.input("payments", serde=_json_kv(), partitions=PARTITIONS))
    .join_table(rates, combine=convert, name="convert")
    .send_to(app.output(local.output("payments-eur", serde=_json_kv(), partitions=PARTITIONS)))
)


# -- sample input --------------------------------------------------------------------------------

def sample_input(n: int, seed: int = 0) -> dict[str, list[KV[str, dict[str, Any]]]]:
    """The rates of ``RATES`` (gold, ``XAU``, withdrawn again) and ``n`` payments."""
    if n < 0:
        raise ValueError(f"sample_input needs n >= 0, got {n}")
    rng = random.Random(seed)
    updates = [KV(c, {"per_eur": r}) for c, r in RATES.items()] + [KV("XAU", {"per_eur": None})]
    payments = [KV(rng.choice(sorted(RATES)), {"id": i, "amount": rng.randint(10, 500) + 0.5})
                for i in range(n)]
    return {"rate-updates": updates, "payments": payments}


if __name__ == "__main__":
    print(app.plan().explain())
