"""``python -m fetchproxy``: the same as the ``fetchproxy`` command."""

import sys

from fetchproxy.cli import main

sys.exit(main())
