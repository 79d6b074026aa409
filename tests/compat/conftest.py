"""``matrix.py`` and ``smoke.py`` are scripts, not tests: ``make test-compat`` runs them, each leg in its own
virtualenv. They stay out of ``pytest tests`` explicitly (their names already do not match ``test_*.py``);
``test_matrix.py`` is the driver's own fast test and is collected as usual.
"""

collect_ignore = ["matrix.py", "smoke.py"]
