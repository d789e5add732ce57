"""``python -m iris.examples NAME [--ranks N] [...]``: see ``iris.examples.harness.cli``."""

import sys

from iris.examples.harness.cli import main

if __name__ == "__main__":
    sys.exit(main())
