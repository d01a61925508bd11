"""`python -m retromae` runs the command line."""

import sys

from retromae.cli import main

sys.exit(main())
