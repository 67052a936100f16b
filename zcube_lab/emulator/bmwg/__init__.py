"""`zcube-lab bmwg run`: the IETF draft's tests on Mininet labs (needs root; issue 46)."""
