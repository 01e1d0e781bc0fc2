"""Shared heterogeneous memory: tables, difficulty modes, programs, snapshots, Hub release."""
