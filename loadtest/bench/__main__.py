"""`python3 -m bench` from loadtest/: the same as loadtest/bench/run.py."""

import sys

from .cli import main

sys.exit(main())
