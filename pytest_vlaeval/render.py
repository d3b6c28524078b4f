"""The render check's original path (``env.preflight`` of benchmark files written before ``envs/``)."""

import sys

from pytest_vlaeval.envs.render import main

if __name__ == "__main__":
    sys.exit(main())
