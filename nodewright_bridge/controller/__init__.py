"""The NodeWright controller: snapshot -> lifecycle planners -> actions -> executor.

``snapshot`` reads the informer caches into planner inputs, ``reconciler`` asks
``lifecycle.rollout`` and ``lifecycle.stages`` what to do and hands the actions to ``executor``,
``statusing`` writes the CR status, ``productmetrics`` keeps the rollout metrics.
"""
