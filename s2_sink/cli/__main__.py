"""``python -m s2_sink.cli``: the ``s2-sink`` command."""

from __future__ import annotations

import sys

from s2_sink.cli import main

if __name__ == "__main__":
    sys.exit(main())
