"""The placement engine: a pure core deciding which node and GPUs a pod gets, with reasons.

    view = ClusterView(); view.upsert_node(name, devices, ...)      # or views.from_objects(...)
    engine = Engine(PlacementConfig())
    decision = engine.place(view, parse_pod(pod))                  # Decision(node, devices, ...)
    view.reserve(reservation_for(request, decision))               # and view.release(pod_key)
"""
from hami_control.placement.engine import Engine, PlacementConfig, place
from hami_control.placement.model import Decision, PlacementError
from hami_control.placement.view import ClusterView, Reservation

__all__ = ["ClusterView", "Decision", "Engine", "PlacementConfig", "PlacementError",
           "Reservation", "place"]
