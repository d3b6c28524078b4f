"""``python -m pytest_vlaeval``: the same as the ``vlaeval`` command."""

import sys

from pytest_vlaeval.cli import main

sys.exit(main())
