"""The lab on several machines (Mininet cluster edition, VXLAN links between machines)."""
