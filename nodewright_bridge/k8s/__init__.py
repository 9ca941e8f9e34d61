"""The Kubernetes edge: client construction, request metering, raw REST calls, informers and
their stores, patch helpers and the Event recorder.

``kubernetes`` client types and exceptions stay inside this package; callers get raw ``dict``
objects and :mod:`nodewright_bridge.errors` exceptions.
"""
