"""What a run produced, as typed data and as figures: run summaries, link statistics
(`linkstats`), the fault report, the compared metrics, the sweep's points, the side-by-side
report with plots (pure, apart from writing files)."""
