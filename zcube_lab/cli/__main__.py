"""`python -m zcube_lab.cli ...`: the `zcube-lab` command."""

import sys

from zcube_lab.cli import main

sys.exit(main())
