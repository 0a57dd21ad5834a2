"""A flush encodes a window's or join's dirty entries in one pass (``state_codec``'s
``encode.many``): the same bytes as one by one, and the same error for the first entry that
does not encode."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.state.codec import state_codec
from runtime.state.writeback import encode_all
from samza_dsl import KV
from samza_dsl.errors import SerdeError

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(),
                    st.binary(), st.dates())
keys = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3).map(tuple), st.builds(KV, inner, inner),
    st.frozensets(st.integers(), max_size=3)), max_leaves=6)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
    st.dictionaries(st.text(), inner, max_size=3), st.builds(KV, keys, inner),
    st.tuples(st.integers(0, 2**63 - 1), st.builds(KV, st.integers(), st.dictionaries(
        st.text(), st.one_of(st.integers(), st.text()), max_size=3)))), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(keys, max_size=8), st.lists(values, max_size=8))
def test_a_batch_encodes_as_each_alone(ks: list[Any], vs: list[Any]) -> None:
    ke, _, ve, _ = state_codec({}, "join state 'j'")
    assert encode_all(ke, ks) == [ke(k) for k in ks]
    assert encode_all(ve, vs) == [ve(v) for v in vs]


class Unknown:
    pass


@pytest.mark.parametrize("bad", [Unknown(), (1, KV(2, {"at": dt.UTC, "n": 1}))])
def test_a_value_that_does_not_encode_fails_a_batch_as_it_fails_alone(bad: Any) -> None:
    ke, _, ve, _ = state_codec({}, "join state 'j'")
    with pytest.raises(SerdeError) as alone:
        ve(bad)
    with pytest.raises(SerdeError) as batch:
        encode_all(ve, [(1, KV(2, {"ok": 1})), bad, 2**70])
    assert batch.value.reason == alone.value.reason
    assert "join state 'j'" in batch.value.reason
