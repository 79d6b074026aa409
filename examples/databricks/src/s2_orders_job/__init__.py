"""Example Databricks job for s2-sink: ``s2-orders-job`` (see ``job.py`` and ``databricks.yml``)."""
