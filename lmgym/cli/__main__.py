"""``python -m lmgym.cli``: the ``lmgym`` command."""

import sys

from lmgym.cli import main

sys.exit(main())
