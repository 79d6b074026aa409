"""Where bytes leave and come back: event loop, pooled clients and sessions, retries, failures in words.

- `runtime`: one background event loop per Python process, driving the async SDK from sync code, and the
  warm clients on it (`SessionPool`) shared by the tasks a worker runs.
- `append_session`: an S2S append session fed with already serialized ``AppendInput`` messages;
  `h2_frames`: the frames of the unary requests (`sdk`), written and read without h2.
- `retry`: what is retried, how long to wait, and what cannot have been applied.
- `explain`: SDK and transport failures put into words; `preflight`: the driver's first call.
"""
