"""Append messages (s2.v1 ``AppendInput``) written in bulk from Arrow columns."""
