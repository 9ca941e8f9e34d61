"""The NodeWright controller: snapshot -> lifecycle planners -> actions -> executor.

``snapshot`` reads the informer caches into planner inputs, ``reconciler`` asks
``lifecycle.rollout`` and ``lifecycle.stages`` what to do, hands the actions to ``executor`` and
writes the CR status that ``lifecycle.aggregation`` decides; ``productmetrics`` keeps the rollout
metrics.
"""
