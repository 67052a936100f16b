"""What a run produced, as typed data and as figures (pure, apart from reading and writing a
run's files), grouped by concern: one run's summary, its sections and its goodput (`run`), link
and transfer figures (`fabric`), the IETF BMWG draft's KPIs (`ietf`), victim accounting in a
lossless run (`lossless`), the load sweep's points and capacity (`sweep`), the structure table
(`structure`), and the comparison's report with its plots and verdict paragraph (`compare`)."""
