"""Context and ReadWriteTable are protocols a runtime implements for user functions' init(ctx)."""

from __future__ import annotations

from samza_dsl import Context, ReadWriteTable


class DictTable:
    def __init__(self):
        self.data = {}

    def get(self, key):
        return self.data.get(key)

    def put(self, key, value):
        self.data[key] = value

    def delete(self, key):
        self.data.pop(key, None)

    def get_all(self, keys):
        return {k: self.data[k] for k in keys if k in self.data}

    def put_all(self, entries):
        for k, v in entries:
            self.put(k, v)

    def range(self, start, end):
        return iter([])

    def all(self):
        return iter([])


class Ctx:
    task_name = "Partition 0"
    config: dict = {}
    metrics = None

    def table(self, name):
        return DictTable()


def test_a_runtime_context_satisfies_the_protocols():
    assert isinstance(DictTable(), ReadWriteTable)
    assert isinstance(Ctx(), Context)


def test_an_incomplete_table_does_not():
    class NoRange:
        def get(self, key): ...
        def put(self, key, value): ...

    assert not isinstance(NoRange(), ReadWriteTable)
    assert not isinstance(object(), Context)
