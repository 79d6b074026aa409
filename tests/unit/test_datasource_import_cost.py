"""What importing format("s2") costs a fresh Python process (Spark starts one per planning step)."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_data_source_and_its_writer_leaves_pandas_out() -> None:
    """Spark runs the data source's create, write-planning and commit steps each in a new Python process,
    which imports ``s2_sink.datasource`` and converts no data. pyarrow imports pandas (a third of a second
    of CPU) on its first conversion of a Python value, so no module on that path may convert one at
    import time."""
    code = (
        "import sys, s2_sink.datasource, s2_sink.datasource._writer, s2_sink.encoders; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_executors_unpickling_the_writer_import_none_of_the_read_side() -> None:
    """A task's Python worker imports the writer's module to unpickle it; the data source class and the
    reading modules stay unimported until something asks for them."""
    code = (
        "import sys, s2_sink.datasource._writer; "
        "print(sorted(m for m in sys.modules if m.startswith('s2_sink.datasource.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == str(
        ["s2_sink.datasource._compat", "s2_sink.datasource._write_options", "s2_sink.datasource._writer"]
    )
