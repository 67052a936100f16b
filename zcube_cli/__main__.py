"""`python -m zcube_cli ...`: the `zcube-lab` command."""

import sys

from zcube_cli import main

sys.exit(main())
