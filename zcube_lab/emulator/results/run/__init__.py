"""One run's summary (`summary.json`): `RunSummary` and its sections (client, server, transfer,
lossless in `summary`; the fabric's in `fabricfigures`, the faults' in `faultfigures`, the flat
section helpers in `sections`), the client and fabric figures computed from a run's records
(`figures`), SLOs and goodput over a run's requests (`goodput`), the fault report
(`fault_report`), and a dilated run's times in modelled seconds (`dilation`)."""
