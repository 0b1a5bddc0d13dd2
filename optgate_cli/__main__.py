"""``python -m optgate_cli``: the same as the ``optgate`` console script."""

import sys

from optgate_cli.main import main

sys.exit(main())
