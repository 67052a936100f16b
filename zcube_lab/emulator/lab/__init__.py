"""The Mininet lab: a fabric realized on Open vSwitch with our controller, and what touches it
(measurements, health sampling, the fault injector, doctor's probes). Needs root."""
