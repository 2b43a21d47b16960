"""``python -m decoding_adapters``: the same as the ``decoding-adapters`` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
