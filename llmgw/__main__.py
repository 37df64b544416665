"""`python -m llmgw` is the `llmgw` command."""

import sys

from llmgw.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
