"""Operator tools on live cgroups: discovery, sampling, the per-period detector, causes,
recommendations and safe tuning (bwlab doctor, top, tune)."""
