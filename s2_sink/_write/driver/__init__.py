"""Driver side of a write: how a micro-batch is delivered, where its rows are routed, what its metrics say."""
