"""Read records (`s2_sink._wire.columns.RecordColumns`) turned into the rows of each ``s2.format``, one
module per format, picked by the read's `schemas.RowsKind` (tests/rows_by_record.py is the reference they are
tested against).
"""
