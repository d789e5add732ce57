"""``python -m iris.examples NAME [--ranks N] [...]``: see ``iris.examples.cli``."""

import sys

from iris.examples.cli import main

if __name__ == "__main__":
    sys.exit(main())
