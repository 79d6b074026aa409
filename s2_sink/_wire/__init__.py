"""Where records become bytes on the wire: S2's protobuf messages written (`append/`) and read
(`read_batch`) in bulk over Arrow columns (`columns`)."""
