"""``python -m benchcamp.router --backend URL ...`` (or ``--prefill URL --decode URL``)."""

import sys

from benchcamp.router.server import main

sys.exit(main())
