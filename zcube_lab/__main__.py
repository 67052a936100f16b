"""`python -m zcube_lab`: the `zcube-lab` command."""

from zcube_lab.cli import main

raise SystemExit(main())
