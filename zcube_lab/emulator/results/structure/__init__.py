"""The structure table, a scaled fabric beside the full size it stands for: in every run's
folder, in report.html and in the sweep's report (`structuresection`), rendered as text or HTML
(`structuretable`)."""
