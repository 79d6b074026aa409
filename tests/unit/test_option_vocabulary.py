"""One boolean vocabulary for every option: ``true``/``false`` (any case) or a Python bool, in `S2Config`,
its option map, and the ``format("s2")`` reader and writer options alike."""

from __future__ import annotations

import pytest

from s2_sink import ConfigError, S2Config
from s2_sink._option_map import parse_bool
from s2_sink._read.read_options import parse_read_options
from s2_sink.datasource._write_options import parse_write_options


@pytest.mark.parametrize(("raw", "want"), [(True, True), (False, False), ("true", True), (" FALSE ", False)])
def test_true_and_false_in_any_case_are_booleans(raw: object, want: bool) -> None:
    """Python bools pass through; the words true and false are read in any case, around spaces."""
    assert parse_bool("s2.x", raw) is want


@pytest.mark.parametrize("raw", ["yes", "1", "on", "off", "", None, 1])
def test_every_other_value_names_the_option_and_the_value(raw: object) -> None:
    """No second vocabulary (yes/on/1): the error names the option, the value and what it must be."""
    with pytest.raises(ConfigError, match=r"option s2\.x=.* must be true or false"):
        parse_bool("s2.x", raw)


def test_config_options_use_the_one_vocabulary() -> None:
    """`S2Config.from_options` reads ``s2.create-streams=TRUE`` and refuses ``yes`` like format("s2") does."""
    cfg = S2Config.from_options({"s2.basin": "my-basin", "s2.auth-token": "t", "s2.create-streams": "TRUE"})
    assert cfg.create_streams is True
    with pytest.raises(ConfigError, match=r"s2\.create-streams='yes' must be true or false"):
        S2Config.from_options({"s2.basin": "my-basin", "s2.auth-token": "t", "s2.create-streams": "yes"})


def test_reader_and_writer_options_use_the_one_vocabulary() -> None:
    """The reader's and the writer's boolean options take the same words, and refuse the same ones."""
    read = parse_read_options({"s2.stream": "s", "s2.fail-on-data-loss": "False"}, streaming=True)
    assert read.fail_on_data_loss is False
    cfg = S2Config(basin="my-basin", stream="s", access_token="t")
    options = {"s2.format": "upsert", "s2.key-columns": "id"}
    parsed = parse_write_options({**options, "s2.compact": "True"}, cfg=cfg, streaming=False)
    assert parsed.encoder.compact is True  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"s2\.compact='on' must be true or false"):
        parse_write_options({**options, "s2.compact": "on"}, cfg=cfg, streaming=False)
