"""Where bytes leave and come back: the event loop and pooled clients (`runtime`), append sessions, unary
requests' frames, retries, failures in words, the driver's preflight."""
