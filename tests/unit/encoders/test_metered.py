"""S2's metered size: the Arrow, the single-record and the SDK's definitions agree."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from s2_sdk import Record
from s2_sdk import metered_bytes as sdk_metered_bytes

from s2_sink.encoders._frame import HEADERS_ARROW_TYPE
from s2_sink.encoders._metered import header_size, metered_bytes, metered_size

headers_lists = st.one_of(
    st.none(), st.lists(st.tuples(st.binary(min_size=1, max_size=8), st.binary(max_size=8)), max_size=4)
)
records_strategy = st.lists(st.tuples(st.binary(max_size=64), headers_lists), max_size=20)


@settings(max_examples=200, deadline=None)
@given(records_strategy)
def test_single_record_size_equals_the_sdk_and_the_columnar_size(
    records: list[tuple[bytes, list[tuple[bytes, bytes]] | None]],
) -> None:
    """metered_size of one record equals s2_sdk.metered_bytes and the row of metered_bytes over columns."""
    bodies = pa.array([b for b, _ in records], pa.binary())
    headers = pa.array(
        [None if h is None else [{"name": n, "value": v} for n, v in h] for _, h in records],
        HEADERS_ARROW_TYPE,
    )
    columnar = metered_bytes(bodies, headers).to_pylist()
    single = [metered_size(b, h or []) for b, h in records]
    sdk = [sdk_metered_bytes([Record(body=b, headers=h or [])]) for b, h in records]
    assert single == sdk
    assert columnar == sdk


@given(st.binary(max_size=40), st.binary(max_size=40))
def test_a_header_adds_its_header_size(name: bytes, value: bytes) -> None:
    """Adding one header to a record grows its metered size by exactly header_size(name, value)."""
    assert metered_size(b"body", [(name, value)]) - metered_size(b"body", []) == header_size(name, value)
