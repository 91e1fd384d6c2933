"""`python -m gpureco`: the command line (gpureco/cli)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
