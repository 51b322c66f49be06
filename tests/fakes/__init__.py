"""Fakes for what cannot run on a CPU-only machine (STYLE.md: real parts everywhere else)."""
