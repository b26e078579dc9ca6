"""``python -m tierlog.cli``: the same as the ``tierlog`` command."""

import sys

from tierlog.cli import main

sys.exit(main())
