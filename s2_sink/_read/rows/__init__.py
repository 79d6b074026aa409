"""Record columns turned into the rows of each ``s2.format``, as the read's `schemas.RowsKind` picks
(tests/rows_by_record.py is the reference they are tested against).
"""
