"""tests/compat holds scripts, not tests: ``make test-compat`` runs them, each leg in its own virtualenv.

Kept out of ``pytest tests`` explicitly, although their names already do not match ``test_*.py``.
"""

collect_ignore = ["matrix.py", "smoke.py"]
