"""The command line and the operations around a job: ``samza-dsl`` (``cli``) and its commands'
modules (``dump``, ``status``, ``scaffold``, ``loader``) and the live job page (``ui``). Nothing
below imports them (docs/architecture.md)."""
