"""``python -m benchcamp.router --backend URL ...`` (or ``--prefill URL --decode URL``)."""

import sys

from benchcamp.router.server import main

if __name__ == "__main__":
    sys.exit(main())
