"""The KPIs of the IETF BMWG draft on AI inference fabric benchmarking: what they are, as typed
data (`kpis`), how a run's summary and records give them (`bmwg`), their table in report.html
(`kpitable`)."""
