#!/usr/bin/env bash
# Copies stdin to stdout with each line prefixed by the UTC time it arrived; a progress bar
# (carriage returns within a line) is cut to its last state. Used by test-vm.sh for wall times.
while IFS= read -r line; do
    line="${line##*$'\r'}"
    printf '%s %s\n' "$(date -u +%H:%M:%S)" "${line//$'\e'\[K/}"
done
