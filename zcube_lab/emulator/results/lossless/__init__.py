"""Victim accounting in a lossless run: which class raised each pause and what waited behind it
(`victims`), read from a run's logs and episode file (`victimlogs`), and report.html's lossless
fact and victim table (`victimtable`)."""
