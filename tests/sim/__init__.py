"""Deterministic simulation of the exactly-once protocol (see docs/exactly-once.md, *Simulation*)."""
