"""``python -m spec_lib.run --profile {smoke,cpu,gpu} [NOTEBOOK ...]``: the notebook runner
(:mod:`spec_lib.notebook.run`)."""

import sys

from .notebook.run import main

if __name__ == "__main__":
    sys.exit(main())
