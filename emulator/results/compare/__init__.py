"""The comparison's report: the compared figures (`compare_metrics`), the side-by-side table and
`report.html` (`report`), its plots (`plots`), the verdict paragraph and the health table that
open it (`verdicttext`), and the structure table, scaled against full size (`structuresection`,
rendered by `structuretable`)."""
