"""Interaction data: frames <-> CSR with id maps (_interactions), files (_io), recometrics'
split (_split), the other splitters (_splitters), and generated data sets (_datasets,
public as gpureco.datasets)."""
