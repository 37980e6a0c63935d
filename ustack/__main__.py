"""``python -m ustack``: the same command line as the ``ustack`` console script."""

import sys

from ustack.tools.cli import main

sys.exit(main())
