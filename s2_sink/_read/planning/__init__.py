"""Driver-side planning of ``format("s2")`` reads: which streams, from which seq_num to which, in which
ranges."""
