"""Pure decision core of nodewright-bridge.

Everything here is a function of its inputs: no Kubernetes, no Ansible, no subprocesses, no
environment, no wall clock (callers pass ``now``). That keeps every rollout rule unit-testable and
lets ``nwb plan`` give the same answers offline that the controller acts on.
"""
