"""The fine time scale and record-and-replay of a run's transfers (pure; issue 45)."""
