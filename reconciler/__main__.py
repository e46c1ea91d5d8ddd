"""`python -m reconciler`."""

import sys

from reconciler.cli.parser import main

sys.exit(main())
