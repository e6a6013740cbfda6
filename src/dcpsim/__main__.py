"""``python -m dcpsim``: the same as the ``dcpsim`` command."""

import sys

from dcpsim.experiments.cli import main

if __name__ == "__main__":
    sys.exit(main())
