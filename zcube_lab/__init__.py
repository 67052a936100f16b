"""zcube-lab: a live emulator of LLM inference clusters on ZCube, ROFT and Clos fabrics."""

__version__ = "0.1.0"
