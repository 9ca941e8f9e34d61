"""The generic controller runtime: work queue, rate limiting, leader election, metrics, health
endpoints, structured logs, and the manager that wires them to the informers and a reconciler.

Nothing here knows what a NodeWright is; the reconciler plugs in through
:class:`nodewright_bridge.runtime.reconciling.Reconciler`.
"""
