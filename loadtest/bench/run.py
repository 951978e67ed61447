#!/usr/bin/env python3
"""Thin entry point of the comparison runner (`make bench`, via scripts/bench.sh): puts
loadtest/ on the import path and runs the `bench` package (see bench/__init__.py)."""

import sys
from pathlib import Path

# Replaces this directory (Python's default first entry) so that no module here shadows another.
sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.cli import main  # noqa: E402  (the path must be set first)

if __name__ == "__main__":
    sys.exit(main())
