"""Connectors built on the public connector API (``samza_dsl.connectors``) and nothing else:
``files`` (Parquet and JSON Lines files, committed with the job's checkpoint). They import
``samza_dsl`` only, as a connector written by a user would."""
