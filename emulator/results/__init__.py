"""What a run produced, as typed data and as figures: run summaries, the fault report, the
side-by-side report with plots (pure, apart from writing files)."""
