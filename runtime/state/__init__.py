"""Task state: LMDB stores with a write-back cache and a changelog (``lmdb_store``), their on-disk
format (``format``: checksums, long keys), the codecs of window, join and table state
(``codec``), and the table a task's operators read and write (``tables``)."""
