"""Experiments on a lab: the pure serving plan, the runner of one run, the live lab of
`up --serve`, comparisons of variants and the load sweep's ramp."""
