"""Puts loadtest/ on the import path, so that the tests import the runner as the `bench` package."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
