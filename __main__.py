"""`python -m tilevm ...` is `vmc ...` (the same command line, `tilevm.cli`)."""

import sys

from tilevm.cli import main

sys.exit(main())
