"""`python -m tilevm.cli`: the `vmc` command line."""

import sys

from tilevm.cli import main

sys.exit(main())
