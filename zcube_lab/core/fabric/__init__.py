"""The fabric, as pure data: its description (`description`), the builders registered by fabric
kind (`builders`), how a host's network is configured (`hostplan`), every interface's link
layer as batch scripts (`linkplan`), the scale-down factor
(`scale`), the full-size cost model (`cost`), the placement of serving roles on GPU hosts
(`placement`) and the split of a fabric across lab machines (`split`). No root, no processes,
no clock."""
