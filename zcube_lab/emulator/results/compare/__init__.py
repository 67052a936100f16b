"""The comparison's report: the compared figures (`compare_metrics`), the side-by-side table and
`report.html` (`report`), its plots (`plots`), and the verdict paragraph and the health table
that open it (`verdicttext`)."""
